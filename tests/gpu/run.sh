#!/usr/bin/env bash
# run.sh — the one prepared script for a machine with an NVIDIA GPU: builds Loom (with CUDA and
# NCCL), runs every GPU test and benchmark, and writes the log to $OUT (or ./gpu-results).
# Usage on the device machine: tests/gpu/run.sh   (from the repository root)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-results}
mkdir -p "$out"
exec > >(tee "$out/gpu-run.log") 2>&1
echo "== $(date -u) on $(hostname)"
nvidia-smi || echo "nvidia-smi not available"
nvidia-smi topo -m 2>/dev/null | tee "$out/nvidia-smi-topo.txt"
build=$root/_gpubuild
mkdir -p "$build"
cd "$root" && { [ -x configure ] || ./autogen.sh >/dev/null; }
cd "$build" && "$root/configure" --with-cuda --disable-werror >configure.log 2>&1 ||
  { tail -30 configure.log; exit 1; }
make -j"$(nproc)" loom-topo loom-train loom-bench loom-serve loom-compress tests/gpu/cuda_smoke tests/gpu/kernels_test tests/gpu/mlp_cuda_test \
  tests/gpu/nccl_test \
  >make.log 2>&1 ||
  { tail -30 make.log; exit 1; }
status=0
echo "== cuda_smoke"; ./tests/gpu/cuda_smoke || status=1
echo "== kernels_test (every CUDA kernel against the CPU one)"; ./tests/gpu/kernels_test || status=1
echo "== mlp_cuda_test (a CUDA training step against the CPU one)"; ./tests/gpu/mlp_cuda_test || status=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l); [ "$ngpu" -ge 1 ] || ngpu=1
echo "== nccl_test (NCCL communicator, $ngpu ranks, one GPU each)"
timeout 120 mpirun -np "$ngpu" ./tests/gpu/nccl_test || status=1
echo "== loom-bench allreduce --backend nccl against MPI_Allreduce on host buffers"
timeout 180 mpirun -np "$ngpu" ./loom-bench allreduce --backend nccl --format json | tee "$out/allreduce-nccl.jsonl" || status=1
echo "== loom-train --device cuda, 2 epochs of Fashion-MNIST"
./loom-train --device cuda --epochs 2 --global-batch 256 --lr 0.1 --log-every 200 --metrics-file "$out/cuda-train.jsonl" || status=1
echo "== loom-serve --device cuda against --device cpu: the same logits for the same test images (fp32 and INT8)"
rm -rf serve-repo && mkdir -p serve-repo/m/1 serve-repo/q/1
./loom-train --device cuda --steps 200 --global-batch 256 --export serve-repo/m/1/model.h5 >/dev/null 2>&1 || status=1
./loom-compress quantize serve-repo/m/1/model.h5 -o serve-repo/q/1/model.h5 --calib-samples 1000 >/dev/null || status=1
for dev in cuda cpu; do
  ./loom-serve --model-repository serve-repo --device $dev --http-port 0 --grpc-port -1 2>"serve-$dev.log" &
  for _ in $(seq 100); do grep -q listening "serve-$dev.log" && break; sleep 0.1; done
  grep -E "loaded|listening" "serve-$dev.log"
  /usr/bin/python3 - "$(grep -oE 'http [0-9.]+:[0-9]+' "serve-$dev.log" | cut -d' ' -f2)" "$out/serve-$dev" <<'PY' || status=1
import gzip, json, sys, urllib.request
raw = gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:16 + 32 * 784]
body = json.dumps({"inputs": [{"name": "input", "shape": [32, 784], "datatype": "UINT8", "data": list(raw)}]}).encode()
for model in ("m", "q"):
    out = json.loads(urllib.request.urlopen(urllib.request.Request("http://" + sys.argv[1] + f"/v2/models/{model}/infer", body)).read())
    json.dump(out["outputs"][0]["data"], open(f"{sys.argv[2]}-{model}.json", "w"))
PY
  kill -TERM $! && wait $!
done
/usr/bin/python3 - "$out" <<'PY' || status=1
import json, sys
o = sys.argv[1]
for model, tol in (("m", 1e-3), ("q", None)):
    a, b = (json.load(open(f"{o}/serve-{dev}-{model}.json")) for dev in ("cuda", "cpu"))
    d = max(abs(x - y) for x, y in zip(a, b))
    top = sum(max(range(10), key=lambda c: a[i * 10 + c]) == max(range(10), key=lambda c: b[i * 10 + c]) for i in range(32))
    print(f"loom-serve cuda vs cpu, model {model}: largest logit difference {d:.2e}, same class for {top} of 32")
    # fp32: the same arithmetic; INT8 (cuBLASLt against oneDNN): requantization may round a
    # hidden value one step apart, so the classes must agree and the logits stay close.
    assert d < tol if tol else (top >= 31 and d < 0.1 * max(abs(x) for x in b) + 0.05)
PY
./loom-bench serve --seconds 3 || status=1
echo "== loom-bench train (CPU of the GPU machine, against PyTorch)"; ./loom-bench train --threads "$(nproc)" || status=1
echo "== INT8 on this machine's CPU (VNNI where it has it): loom-bench gemm and infer"
grep -o -m1 -E 'avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
./loom-bench gemm --threads 1 --format json | tee "$out/gemm.json" || status=1
./loom-train --epochs 1 --threads 4 --export fp32.h5 --log-every 1000 >/dev/null 2>&1 &&
  ./loom-compress quantize fp32.h5 -o int8.h5 --calib-samples 1000 &&
  ./loom-bench infer --model fp32.h5 --compare int8.h5 --batch 256 --threads 1 --format json | tee "$out/infer.json" || status=1
echo "== loom-topo on this node (live: hwloc + NVML)"
./loom-topo show || status=1
./loom-topo export --format json >"$out/topology.json" || status=1
./loom-topo gres || status=1
./loom-topo node-conf || status=1
./loom-topo place --ntasks "$(nvidia-smi -L 2>/dev/null | wc -l)" || status=1
echo "== done, status $status"
exit $status
