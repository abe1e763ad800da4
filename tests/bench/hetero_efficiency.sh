#!/usr/bin/env bash
# hetero_efficiency.sh — heterogeneous data-parallel efficiency: 2 ranks, rank 1 emulated at
# LOOM_EMULATE_SPEED=0.4. Prints each rank's solo samples/s (one process, the whole global
# batch), the 2-rank samples/s with an equal split and with dynamic balancing, and
# efficiency = 2-rank rate / (sum of solo rates). Target >= 0.90 dynamic; an equal split ~0.57.
# Emulated devices: the slow rank sleeps 1.5x its compute time (LOOM_EMULATE_SPEED).
set -euo pipefail
T=${LOOM_TRAIN:?set LOOM_TRAIN to the loom-train binary}
steps=${STEPS:-300}
batch=${BATCH:-256}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rate() { /usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "summary" in l][-1]["samples_per_s"])' "$1"; }
LOOM_EMULATE_SPEED=1 "$T" --steps "$steps" --global-batch "$batch" --log-every 100000 --metrics-file "$tmp/fast.jsonl" 2>/dev/null
LOOM_EMULATE_SPEED=0.4 "$T" --steps "$steps" --global-batch "$batch" --log-every 100000 --metrics-file "$tmp/slow.jsonl" 2>/dev/null
cat >"$tmp/rankenv.sh" <<'SH'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && export LOOM_EMULATE_SPEED=0.4
exec "$@"
SH
chmod +x "$tmp/rankenv.sh"
for bal in off dynamic; do
  mpirun -np 2 --oversubscribe "$tmp/rankenv.sh" "$T" --steps "$steps" --global-batch "$batch" --balance "$bal" \
    --replan-every 5 --log-every 100000 --metrics-file "$tmp/$bal.jsonl" 2>/dev/null
done
/usr/bin/python3 - "$(rate "$tmp/fast.jsonl")" "$(rate "$tmp/slow.jsonl")" "$(rate "$tmp/off.jsonl")" "$(rate "$tmp/dynamic.jsonl")" <<'PY'
import sys
fast, slow, equal, dyn = map(float, sys.argv[1:5])
print(f"hetero_efficiency: solo rank0 {fast:.0f} + solo rank1 (emulated 0.4) {slow:.0f} = {fast + slow:.0f} samples/s")
print(f"hetero_efficiency: equal split {equal:.0f} samples/s, efficiency {equal / (fast + slow):.2f}")
print(f"hetero_efficiency: dynamic balance {dyn:.0f} samples/s, efficiency {dyn / (fast + slow):.2f} (target >= 0.90)")
PY
