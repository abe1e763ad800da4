#!/usr/bin/env bash
# zero3_figures.sh — loom-train --zero 3 against --zero 1 and the unsharded run on the same ranks:
# 4 MPI ranks (oversubscribed on this machine's cores) train a gpt of 56.8M parameters (227 MB in
# fp32: 8 layers, 768 wide, context 32) with AdamW, global batch 8. Per level, the median over
# ROUNDS (3) interleaved rounds of STEPS (6) steps:
#   - model-state bytes per rank (the summary's parameter + gradient + optimizer bytes): target
#     <= 0.30x of the unsharded run's (ideal 0.25x);
#   - peak resident memory per rank (/usr/bin/time): the ranks that only train, and rank 0, which
#     also evaluates at the end (a forward over 64 windows with every parameter gathered there);
#   - time per step (rank 0's breakdown, which leaves out the evaluation): target <= 1.3x of ZeRO-1.
# MPIRUN_ARGS (default --oversubscribe) and TRAIN_ARGS add launcher and loom-train options.
set -euo pipefail
T=${LOOM_BUILDDIR:?set LOOM_BUILDDIR}/loom-train
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
read -r -a extra <<<"${TRAIN_ARGS:-}"
read -r -a launch <<<"mpirun -np 4 ${MPIRUN_ARGS:---oversubscribe}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
python3 -c "
import random; random.seed(1)
w = 'the cat sat on a mat dog ran far away and then slept'.split()
open('t.txt', 'w').write(' '.join(random.choice(w) for _ in range(30000)))"
args=(--model gpt --data text:t.txt --context 32 --n-layer 8 --n-embd 768 --n-head 12 --optimizer adamw --lr 0.0003
      --global-batch 8 --steps "$steps" --seed 3 --log-every 1000 --threads 1 "${extra[@]}")
for r in $(seq "$rounds"); do
  for z in 0 1 3; do
    "${launch[@]}" /usr/bin/time -f "peak %M KB" "$T" "${args[@]}" --zero $z --metrics-file "m$z.$r.jsonl" 2>"e$z.$r.txt" >/dev/null ||
      { cat "e$z.$r.txt" >&2; exit 1; }
  done
done
python3 - "$rounds" <<'PY'
import json, re, statistics, sys
rounds = int(sys.argv[1])
def run(z, r):
    s = [json.loads(l) for l in open(f"m{z}.{r}.jsonl") if '"summary"' in l][-1]
    err = open(f"e{z}.{r}.txt").read()
    peaks = sorted(int(x) * 1024 for x in re.findall(r"^peak (\d+) KB", err, re.M))
    step = float(re.search(r"rank 0: time per step: ([0-9.]+) ms", err).group(1))
    state = s["param_bytes_per_rank"] + s["grad_bytes_per_rank"] + s["optimizer_bytes_per_rank"]
    return {"state": state, "train_peak": max(peaks[:-1]), "rank0_peak": peaks[-1], "step_ms": step}
res = {z: {k: statistics.median(run(z, r)[k] for r in range(1, rounds + 1)) for k in ("state", "train_peak", "rank0_peak", "step_ms")}
       for z in (0, 1, 3)}
mib = lambda b: b / 1048576
print("zero3: 4 ranks, gpt of 56.8M parameters (227 MB fp32), AdamW, batch 8; medians of", rounds, "rounds")
print(f"{'level':8} {'state MiB/rank':>15} {'peak MiB (train ranks)':>23} {'peak MiB (rank 0)':>18} {'ms/step':>9}")
for z in (0, 1, 3):
    r = res[z]
    print(f"ZeRO-{z:<3} {mib(r['state']):15.1f} {mib(r['train_peak']):23.1f} {mib(r['rank0_peak']):18.1f} {r['step_ms']:9.1f}")
ratio = res[3]["state"] / res[0]["state"]
print(f"model-state bytes per rank, ZeRO-3 / unsharded: {ratio:.3f}x (target <= 0.30x, ideal 0.25x): {'met' if ratio <= 0.30 else 'MISSED'}")
print(f"peak memory per training rank, ZeRO-3 / ZeRO-1: {res[3]['train_peak'] / res[1]['train_peak']:.2f}x "
      f"({mib(res[3]['train_peak']):.0f} MiB vs {mib(res[1]['train_peak']):.0f}); rank 0 with the evaluation: "
      f"{res[3]['rank0_peak'] / res[1]['rank0_peak']:.2f}x")
t = res[3]["step_ms"] / res[1]["step_ms"]
print(f"step time, ZeRO-3 / ZeRO-1: {t:.2f}x ({res[3]['step_ms']:.0f} ms vs {res[1]['step_ms']:.0f}; target <= 1.3x): {'met' if t <= 1.3 else 'MISSED'}")
PY
