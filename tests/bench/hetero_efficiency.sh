#!/usr/bin/env bash
# hetero_efficiency.sh — heterogeneous data-parallel efficiency: 2 ranks, rank 1 emulated at
# LOOM_EMULATE_SPEED=0.4. Prints each rank's solo samples/s (one process, the whole global
# batch), the 2-rank samples/s with an equal split and with dynamic balancing, and
# efficiency = 2-rank rate / (sum of solo rates). Target >= 0.90 dynamic; an equal split ~0.57.
# Emulated devices: the slow rank sleeps 1.5x its compute time (LOOM_EMULATE_SPEED).
# mpirun binds each of the 2 ranks to one core: a rank's communication thread shares it with its
# backward (the breakdown below says how long it was busy).
# Solo rates are measured twice: one process alone on the machine, and the two solo processes at
# the same time. Real GPUs do not slow each other down, but two ranks on this machine's CPU
# cores do (memory bandwidth, the communication threads): the concurrent solo rates are the
# fair baseline for "the sum of the devices", and both efficiencies are printed.
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
LOOM_EMULATE_SPEED=1 "$T" --steps "$steps" --global-batch "$batch" --log-every 100000 --metrics-file "$tmp/cfast.jsonl" 2>/dev/null &
LOOM_EMULATE_SPEED=0.4 "$T" --steps "$steps" --global-batch "$batch" --log-every 100000 --metrics-file "$tmp/cslow.jsonl" 2>/dev/null
wait
cat >"$tmp/rankenv.sh" <<'SH'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && export LOOM_EMULATE_SPEED=0.4
exec "$@"
SH
chmod +x "$tmp/rankenv.sh"
for bal in off dynamic; do
  mpirun -np 2 --oversubscribe "$tmp/rankenv.sh" "$T" --steps "$steps" --global-batch "$batch" --balance "$bal" \
    --replan-every 5 --log-every 100000 --metrics-file "$tmp/$bal.jsonl" 2>"$tmp/$bal.err"
done
/usr/bin/python3 - "$(rate "$tmp/fast.jsonl")" "$(rate "$tmp/slow.jsonl")" "$(rate "$tmp/cfast.jsonl")" \
  "$(rate "$tmp/cslow.jsonl")" "$(rate "$tmp/off.jsonl")" "$(rate "$tmp/dynamic.jsonl")" "$batch" <<'PY'
import sys
fast, slow, cfast, cslow, equal, dyn = map(float, sys.argv[1:7])
print(f"hetero_efficiency: global batch {sys.argv[7]}")
print(f"hetero_efficiency: solo alone:      rank0 {fast:.0f} + rank1 (emulated 0.4) {slow:.0f} = {fast + slow:.0f} samples/s")
print(f"hetero_efficiency: solo side by side: rank0 {cfast:.0f} + rank1 {cslow:.0f} = {cfast + cslow:.0f} samples/s")
for name, rate in (("equal split", equal), ("dynamic balance", dyn)):
    print(f"hetero_efficiency: {name} {rate:.0f} samples/s, efficiency {rate / (fast + slow):.2f} over solo alone, "
          f"{rate / (cfast + cslow):.2f} over solo side by side" + (" (target >= 0.90)" if name.startswith("dyn") else ""))
print(f"hetero_efficiency: dynamic over equal split: {dyn / equal:.2f}x")
PY
# Where the dynamic run's step time goes on each rank (loom-train's own breakdown).
grep -h "time per step" "$tmp/dynamic.err" | sed 's/^loom-train: /hetero_efficiency: dynamic, /'
