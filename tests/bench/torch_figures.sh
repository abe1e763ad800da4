#!/usr/bin/env bash
# torch_figures.sh — loom.torch against PyTorch's DistributedDataParallel (gloo), on the same
# ranks, threads, model, data and global batch, in one run (tests/torch/bench_dp.py): two equal
# ranks, and ranks of speeds 1.0 + 0.4 (LOOM_EMULATE_SPEED, emulated alike in both), where DDP
# splits evenly and loom.torch's dynamic shares follow the speeds; and the sum of the two ranks'
# solo rates (each alone on its share of the work at its speed). Each figure is the best of
# $ROUNDS runs; printed with the peer and the ratio, and each side's step-time breakdown.
# LOOM_PYTHON: the interpreter with PyTorch (the timed peer is PyPI's 2.x where it is given).
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${LOOM_PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-2}
[ -f "$B/runtime/python/.libs/libloomtorch.so" ] || { echo "torch_figures: loom.torch not built; skipped"; exit 0; }
"$PY" -c 'import torch, torchvision' 2>/dev/null || { echo "torch_figures: $PY has no torch and torchvision; skipped"; exit 0; }
export LOOM_TORCH_LIB=$B/runtime/python/.libs/libloomtorch.so PYTHONPATH=$S/runtime/python:$S/tests/torch
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() {  # run SLOW_SPEED MODE MODEL [ARGS]: the best JSON line of $ROUNDS
  local speed=$1 mode=$2 model=$3 best="" r line
  shift 3
  for r in $(seq "$ROUNDS"); do
    if [ "$mode" = solo ]; then
      line=$(LOOM_EMULATE_SPEED=$speed "$PY" "$S/tests/torch/bench_dp.py" --mode solo --model "$model" "$@" | tail -1)
    else
      line=$(MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun -x PYTHONPATH -x LOOM_TORCH_LIB -x MASTER_PORT \
        -np 1 "$PY" "$S/tests/torch/bench_dp.py" --mode "$mode" --model "$model" "$@" : \
        -np 1 -x LOOM_EMULATE_SPEED="$speed" "$PY" "$S/tests/torch/bench_dp.py" --mode "$mode" --model "$model" "$@" | tail -1)
    fi
    best=$("$PY" -c 'import json, sys
a, b = (json.loads(t) if t else None for t in sys.argv[1:3])
print(json.dumps(b if a is None or b["samples_per_s"] > a["samples_per_s"] else a))' "$best" "$line")
  done
  echo "$best"
}
rate() { "$PY" -c 'import json, sys; print("%.0f" % json.loads(sys.argv[1])["samples_per_s"])' "$1"; }
parts() { "$PY" -c 'import json, sys; d = json.loads(sys.argv[1])
print("compute %.1f ms + exposed communication %.1f ms + update %.1f ms%s" % (d["compute_ms"], d["comm_ms"], d["update_ms"],
      ", shares %s" % d["shares"] if "shares" in d else ""))' "$1"; }
ratio() { "$PY" -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
# PowerSGD: loom.torch's against PyTorch's powerSGD_hook on DDP, the same model, rank and start,
# 2 equal ranks: bytes per step and the loss (rank 0's, mean of each 10 steps) side by side.
psgd() { "$PY" -c 'import json, sys; d = json.loads(sys.argv[1]); print(d.get("bytes_per_step"), d["losses_every_10"])' "$1"; }
a="--global-batch 64 --steps 100 --warmup 0 --lr 0.1"
loom=$(ROUNDS=1 run 1 loom textlm $a --balance static --powersgd 2,10)
ddp=$(ROUNDS=1 run 1 ddp textlm $a --powersgd 2,10)
plain=$(ROUNDS=1 run 1 ddp textlm $a)
echo "torch transformer on GPL-3's bytes, PowerSGD rank 2 from step 10, bytes per step and losses every 10 steps:"
echo "  loom.torch:            $(psgd "$loom")"
echo "  DDP powerSGD_hook:     $(psgd "$ddp")"
echo "  DDP fp32 (reference):  $(psgd "$plain" | sed 's/^None/all gradients/')"
for spec in "transformer --global-batch 64 --steps 40" "resnet --global-batch 32 --steps 20 --warmup 15"; do
  set -- $spec
  m=$1
  shift
  loom=$(run 1 loom "$m" "$@" --balance static)
  ddp=$(run 1 ddp "$m" "$@")
  echo "torch $m, 2 equal ranks: loom.torch $(rate "$loom") samples/s, DDP (gloo) $(rate "$ddp"): ratio $(ratio "$(rate "$loom")" "$(rate "$ddp")") (target >= 1.0)"
  echo "  loom.torch: $(parts "$loom")"
  echo "  DDP:        $(parts "$ddp") (DDP's exposed communication ends its backward, inside compute)"
  loom=$(run 0.4 loom "$m" "$@" --balance dynamic)
  ddp=$(run 0.4 ddp "$m" "$@")
  fast=$(run 1 solo "$m" "$@")
  slow=$(run 0.4 solo "$m" "$@")
  solo=$("$PY" -c 'import sys; print("%.0f" % (float(sys.argv[1]) + float(sys.argv[2])))' "$(rate "$fast")" "$(rate "$slow")")
  echo "torch $m, speeds 1.0 + 0.4: loom.torch (dynamic shares) $(rate "$loom") samples/s, DDP's even split $(rate "$ddp"):" \
    "ratio $(ratio "$(rate "$loom")" "$(rate "$ddp")") (target >= 1.4); the two solo rates summed $solo: $(ratio "$(rate "$loom")" "$solo") of it"
  echo "  loom.torch: $(parts "$loom")"
  echo "  DDP:        $(parts "$ddp")"
done
