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
# fair baseline for "the sum of the devices", and both efficiencies are printed. Everything is
# measured in ROUNDS (3) interleaved rounds and the medians are compared. TRAIN_ARGS adds
# loom-train options to every run (TRAIN_ARGS="--zero 1": the optimizer sharded); MPIRUN (default
# mpirun) and MPIRUN_ARGS (default --oversubscribe) launch the pairs, e.g. on a 16-core machine
# MPIRUN_ARGS="--map-by slot:PE=4" TRAIN_ARGS="--threads 4": each rank on 4 cores of its own.
# The bound: after each dynamic run, each device alone at the batch the balancer gave it (its
# final share). The slower of the two is the step the pair would take if the exchange cost
# nothing: 2-rank rate <= global batch / that step. Smaller batches run each device below its
# full-batch rate, so this bound sits below 1; the gap between it and the dynamic rate is the
# exchange (the part that did not overlap, and its copies on the rank's own core).
set -euo pipefail
T=${LOOM_TRAIN:?set LOOM_TRAIN to the loom-train binary}
steps=${STEPS:-300}
batch=${BATCH:-256}
rounds=${ROUNDS:-3}
read -r -a extra <<<"${TRAIN_ARGS:-}"  # more loom-train options for every run (e.g. --zero 1)
read -r -a launch <<<"${MPIRUN:-mpirun} ${MPIRUN_ARGS:---oversubscribe}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/rankenv.sh" <<'SH'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && export LOOM_EMULATE_SPEED=0.4
exec "$@"
SH
chmod +x "$tmp/rankenv.sh"
run() {  # SPEED NAME [BATCH]: one solo process
  LOOM_EMULATE_SPEED=$1 "$T" --steps "$steps" --global-batch "${3:-$batch}" --log-every 100000 --metrics-file "$tmp/$2.jsonl" \
    "${extra[@]}" 2>/dev/null
}
# This machine's speed drifts by ~10% within minutes: every measurement is taken in each of
# $rounds rounds, one after another, and the medians are compared.
for r in $(seq "$rounds"); do
  run 1 "fast.$r"
  run 0.4 "slow.$r"
  run 1 "cfast.$r" &
  run 0.4 "cslow.$r"
  wait
  for bal in off dynamic; do
    "${launch[@]}" -np 2 "$tmp/rankenv.sh" "$T" --steps "$steps" --global-batch "$batch" --balance "$bal" \
      --replan-every 5 --log-every 100000 --metrics-file "$tmp/$bal.$r.jsonl" "${extra[@]}" 2>"$tmp/$bal.$r.err" ||
      { echo "hetero_efficiency: the $bal pair failed:" >&2; tail -5 "$tmp/$bal.$r.err" >&2; exit 1; }
  done
  share0=$(sed -n 's/.*rank 0: time per step.*(share \([0-9]*\) of.*/\1/p' "$tmp/dynamic.$r.err")
  [ -n "$share0" ] || { echo "hetero_efficiency: no share in the dynamic run's breakdown" >&2; exit 1; }
  echo "$share0" >"$tmp/share.$r"
  run 1 "bfast.$r" "$share0"
  run 0.4 "bslow.$r" $((batch - share0))
done
"${LOOM_PYTHON:-/usr/bin/python3}" - "$tmp" "$rounds" "$batch" "${TRAIN_ARGS:-}" <<'PY'
import json, statistics, sys
tmp, rounds, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def rate(name, r):
    return [json.loads(l) for l in open(f"{tmp}/{name}.{r}.jsonl") if "summary" in l][-1]["samples_per_s"]
runs = {n: [rate(n, r) for r in range(1, rounds + 1)] for n in ("fast", "slow", "cfast", "cslow", "off", "dynamic", "bfast", "bslow")}
shares = [int(open(f"{tmp}/share.{r}").read()) for r in range(1, rounds + 1)]
# The pair's step if the exchange were free: the slower device alone at its share.
bound = [int(batch) / max(shares[i] / runs["bfast"][i], (int(batch) - shares[i]) / runs["bslow"][i]) for i in range(rounds)]
med = {n: statistics.median(v) for n, v in runs.items()}
fast, slow, cfast, cslow, equal, dyn = (med[n] for n in ("fast", "slow", "cfast", "cslow", "off", "dynamic"))
print(f"hetero_efficiency: global batch {batch}{(', ' + sys.argv[4]) if sys.argv[4] else ''}; medians of {rounds} interleaved rounds "
      f"(dynamic runs: {', '.join(f'{v:.0f}' for v in runs['dynamic'])} samples/s)")
print(f"hetero_efficiency: solo alone:      rank0 {fast:.0f} + rank1 (emulated 0.4) {slow:.0f} = {fast + slow:.0f} samples/s")
print(f"hetero_efficiency: solo side by side: rank0 {cfast:.0f} + rank1 {cslow:.0f} = {cfast + cslow:.0f} samples/s")
for name, rate in (("equal split", equal), ("dynamic balance", dyn)):
    print(f"hetero_efficiency: {name} {rate:.0f} samples/s, efficiency {rate / (fast + slow):.2f} over solo alone, "
          f"{rate / (cfast + cslow):.2f} over solo side by side" + (" (target >= 0.90)" if name.startswith("dyn") else ""))
per_round = [runs["dynamic"][i] / (runs["fast"][i] + runs["slow"][i]) for i in range(rounds)]
print(f"hetero_efficiency: dynamic, each round over its own solo rates: {', '.join(f'{e:.2f}' for e in per_round)}")
print(f"hetero_efficiency: dynamic over equal split: {dyn / equal:.2f}x")
eb = [bound[i] / (runs["fast"][i] + runs["slow"][i]) for i in range(rounds)]
reached = [runs["dynamic"][i] / bound[i] for i in range(rounds)]
print(f"hetero_efficiency: bound with a free exchange (each device alone at its share, rank0 "
      f"{', '.join(str(s) for s in shares)} of {batch}): {statistics.median(eb):.2f} over solo alone "
      f"(each round: {', '.join(f'{e:.2f}' for e in eb)})")
print(f"hetero_efficiency: the dynamic run reached {statistics.median(reached):.2f} of that bound "
      f"(each round: {', '.join(f'{e:.2f}' for e in reached)}): the rest is the exchange")
PY
# Where the dynamic run's step time goes on each rank (loom-train's own breakdown), each round.
grep -h "time per step" "$tmp"/dynamic.*.err | sed 's/^loom-train: /hetero_efficiency: dynamic, /'
