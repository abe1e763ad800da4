#!/usr/bin/env bash
# gpu_bundle.sh — contrib/gpu-bundle.sh without a GPU (so that a GPU window is never lost to a
# missing library): the bundle builds, its archive stays under the 64 MiB the device tool
# carries, and once unpacked elsewhere every program resolves each shared library from the
# bundle (only glibc and CUDA's own come from the machine), starts (--version), and the GPU
# tests start and skip; run.sh parses.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
[ -x "$LOOM_BUILDDIR/loom-serve" ] && [ -x "$LOOM_BUILDDIR/loom-train" ] || skip "loom-train and loom-serve not built"
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
run_cmd sh -c "cd '$LOOM_BUILDDIR' && LOOM_BUNDLE_XZ_LEVEL=2 bash '$LOOM_SRCDIR/contrib/gpu-bundle.sh' '$LOOM_TMP/gpu-bundle'"
expect_eq "gpu-bundle.sh: exit" 0 "$rc"
echo "gpu_bundle: $out"
kib=$(du -sk "$LOOM_TMP/gpu-bundle.tar.xz" | cut -f1)
[ "$kib" -le $((64 * 1024)) ] && pass || fail "gpu-bundle.tar.xz is $((kib / 1024)) MiB, over 64"
mkdir -p "$LOOM_TMP/there" && tar -C "$LOOM_TMP/there" -xJf "$LOOM_TMP/gpu-bundle.tar.xz"
B=$LOOM_TMP/there/gpu-bundle
L=$B/lib:$B/lib/fallback
machine='^(linux-vdso\.so|(/lib64/)?ld-linux[^ ]*|(libc|libm|libdl|libpthread|librt|libresolv|libcudart|libcublas|libcublasLt|libnccl|libcuda)\.so)'
for p in loom-train loom-bench loom-serve loom-compress loom-topo; do
  [ -x "$B/bin/$p" ] || { fail "$p is not in the bundle"; continue; }
  outside=$(LD_LIBRARY_PATH=$L ldd "$B/bin/$p" | awk '{print $1, $3}' | grep -v " $B/" | grep -Ev "$machine" || true)
  expect_eq "$p: every library from the bundle (or glibc, CUDA)" "" "$outside"
  run_cmd env LD_LIBRARY_PATH="$L" "$B/bin/$p" --version
  expect_eq "$p --version from the bundle" 0 "$rc"
done
for t in cuda_smoke kernels_test mlp_cuda_test nccl_test; do
  [ -x "$B/bin/$t" ] || continue
  outside=$(LD_LIBRARY_PATH=$L ldd "$B/bin/$t" | awk '{print $1, $3}' | grep -v " $B/" | grep -Ev "$machine" || true)
  expect_eq "$t: every library from the bundle (or glibc, CUDA)" "" "$outside"
  run_cmd env LD_LIBRARY_PATH="$L" "$B/bin/$t"
  { [ "$rc" = 0 ] || [ "$rc" = 77 ]; } && pass || fail "$t from the bundle: exit $rc ($out $err)"
done
[ -f "$B/data/fashion-mnist/t10k-images-idx3-ubyte.gz" ] && pass || fail "the bundle has no test images"
bash -n "$B/run.sh" && pass || fail "run.sh does not parse"
finish
