#!/usr/bin/env bash
# fsdp_figures.sh — loom.torch.fully_shard against PyTorch's FSDP2 (fully_shard over gloo) on the
# same 2 ranks of 1 thread, transformer LM, data, global batch and AdamW (tests/torch/bench_fsdp.py):
# samples/s of each, the best of $ROUNDS runs taken alternately, and the ratio, for
#   - 2 equal ranks;
#   - ranks of speeds 1.0 + 0.4 (LOOM_EMULATE_SPEED on rank 1, emulated alike in both, layer by
#     layer): loom.torch splits each batch by LOOM_DEVICE_WEIGHT 1.0 : 0.4 (as srun --loom-bind
#     sets it), FSDP2 evenly; loom.torch with even shares is printed too;
# and the largest model each trains when rank 1's state is capped (tests/torch/fsdp_capacity.py).
# FSDP2 needs PyTorch 2.x: LOOM_PYTHON names a Python with PyPI's PyTorch.
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${LOOM_PYTHON:-/usr/bin/python3}
ROUNDS=${ROUNDS:-2}
[ -f "$B/runtime/python/.libs/libloomtorch.so" ] || { echo "fsdp_figures: loom.torch not built; skipped"; exit 0; }
"$PY" -c 'from torch.distributed.fsdp import fully_shard' 2>/dev/null ||
  { echo "fsdp_figures: $PY has no PyTorch with FSDP2 (set LOOM_PYTHON); skipped"; exit 0; }
export LOOM_TORCH_LIB=$B/runtime/python/.libs/libloomtorch.so PYTHONPATH=$S/runtime/python:$S/tests/torch
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

rate() {  # MODE WEIGHT1 SPEED1: samples/s of one run (rank 0 at weight and speed 1.0)
  local line
  line=$(MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --bind-to none -x PYTHONPATH -x LOOM_TORCH_LIB -x MASTER_PORT \
    -np 1 -x LOOM_DEVICE_WEIGHT=1.0 "$PY" "$S/tests/torch/bench_fsdp.py" --mode "$1" : \
    -np 1 -x LOOM_DEVICE_WEIGHT="$2" -x LOOM_EMULATE_SPEED="$3" "$PY" "$S/tests/torch/bench_fsdp.py" --mode "$1" | tail -1)
  "$PY" -c 'import json, sys; print("%.1f" % json.loads(sys.argv[1])["samples_per_s"])' "$line"
}
max() { echo "$1 $2" | awk '{print ($1 > $2) ? $1 : $2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

loom=0 fsdp2=0
for _ in $(seq "$ROUNDS"); do
  loom=$(max "$(rate loom 1.0 1.0)" $loom)
  fsdp2=$(max "$(rate fsdp2 1.0 1.0)" $fsdp2)
done
echo "fsdp_figures: 2 equal ranks, transformer LM, AdamW: loom.torch.fully_shard $loom samples/s, FSDP2 (gloo) $fsdp2: $(ratio $loom $fsdp2)x (target >= 1.0x)"
loom=0 even=0 fsdp2=0
for _ in $(seq "$ROUNDS"); do
  loom=$(max "$(rate loom 0.4 0.4)" $loom)
  even=$(max "$(rate loom 1.0 0.4)" $even)
  fsdp2=$(max "$(rate fsdp2 1.0 0.4)" $fsdp2)
done
echo "fsdp_figures: speeds 1.0 + 0.4: loom.torch.fully_shard (shares by speed) $loom samples/s, with even shares $even," \
  "FSDP2 (gloo, even) $fsdp2: $(ratio $loom $fsdp2)x (target >= 1.4x)"
cap=${CAP:-16777216}
largest() {  # MODE: the largest model's parameters with rank 0 at 2x the cap and rank 1 at the cap
  local line
  line=$(MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --bind-to none -x PYTHONPATH -x LOOM_TORCH_LIB -x MASTER_PORT \
    -np 1 -x LOOM_EMULATE_MEMORY=$((2 * cap)) "$PY" "$S/tests/torch/fsdp_capacity.py" --mode "$1" : \
    -np 1 -x LOOM_EMULATE_MEMORY=$cap "$PY" "$S/tests/torch/fsdp_capacity.py" --mode "$1" | tail -1)
  "$PY" -c 'import json, sys; b = json.loads(sys.argv[1])["largest"]; print(b["parameters"] if b else 0, b["layers"] if b else 0)' "$line"
}
read -r loom loom_layers <<<"$(largest loom)"
read -r fsdp2 fsdp2_layers <<<"$(largest fsdp2)"
echo "fsdp_figures: memory 2:1 (rank 1's state capped at $cap bytes, rank 0's at twice that): the largest LM trained:" \
  "loom.torch.fully_shard $loom parameters ($loom_layers blocks), FSDP2 (even) $fsdp2 ($fsdp2_layers blocks): $(ratio $loom $fsdp2)x (target >= 1.3x)"
