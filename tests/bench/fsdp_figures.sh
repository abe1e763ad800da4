#!/usr/bin/env bash
# fsdp_figures.sh — loom.torch.fully_shard against PyTorch's FSDP2 (fully_shard over gloo) on the
# same 2 ranks of 1 thread, transformer LM, data, global batch and AdamW (tests/torch/bench_fsdp.py):
# samples/s of each, the best of $ROUNDS runs taken alternately, and the ratio. FSDP2 needs
# PyTorch 2.x: LOOM_PYTHON names a Python with PyPI's PyTorch.
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
best_loom=0 best_fsdp2=0
for _ in $(seq "$ROUNDS"); do
  for mode in loom fsdp2; do
    line=$(MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --bind-to none -x PYTHONPATH -x LOOM_TORCH_LIB -x MASTER_PORT \
      -np 2 "$PY" "$S/tests/torch/bench_fsdp.py" --mode $mode | tail -1)
    rate=$("$PY" -c 'import json, sys; print("%.1f" % json.loads(sys.argv[1])["samples_per_s"])' "$line")
    if [ $mode = loom ]; then best_loom=$(echo "$rate $best_loom" | awk '{print ($1 > $2) ? $1 : $2}')
    else best_fsdp2=$(echo "$rate $best_fsdp2" | awk '{print ($1 > $2) ? $1 : $2}'); fi
  done
done
ratio=$(awk -v a="$best_loom" -v b="$best_fsdp2" 'BEGIN { printf "%.2f", a / b }')
echo "fsdp_figures: 2 equal ranks, transformer LM, AdamW: loom.torch.fully_shard $best_loom samples/s, FSDP2 (gloo) $best_fsdp2: ${ratio}x (target >= 1.0x)"
