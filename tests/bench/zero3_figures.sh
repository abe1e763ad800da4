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
#   - loom-topo plan's memory per GPU for ZeRO-1 and ZeRO-3 (--precision fp32; the 4 ranks as one
#     class of 4 "GPUs"; --reserve-gb: the peak of a training rank of a 2-layer, 16-wide gpt, what
#     the process holds beside the model) against the measured peak of the training ranks:
#     target within 15%.
# MPIRUN_ARGS (default --oversubscribe) and TRAIN_ARGS add launcher and loom-train options.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
T=${LOOM_BUILDDIR:?set LOOM_BUILDDIR}/loom-train
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
read -r -a extra <<<"${TRAIN_ARGS:-}"
read -r -a launch <<<"mpirun -np 4 ${MPIRUN_ARGS:---oversubscribe}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
cp "$here/../train/peakof.sh" peakof.sh
chmod +x peakof.sh
python3 -c "
import random; random.seed(1)
w = 'the cat sat on a mat dog ran far away and then slept'.split()
open('t.txt', 'w').write(' '.join(random.choice(w) for _ in range(30000)))"
common=(--model gpt --data text:t.txt --context 32 --optimizer adamw --lr 0.0003 --global-batch 8 --seed 3 --log-every 1000
        --threads 1 "${extra[@]}")
args=("${common[@]}" --n-layer 8 --n-embd 768 --n-head 12 --steps "$steps")
for r in $(seq "$rounds"); do
  for z in 0 1 3; do
    "${launch[@]}" ./peakof.sh "peak$z.$r" "$T" "${args[@]}" --zero $z --metrics-file "m$z.$r.jsonl" 2>"e$z.$r.txt" >/dev/null ||
      { cat "e$z.$r.txt" >&2; exit 1; }
  done
done
# The process beside the model: a training rank's peak with a model of a few thousand parameters.
"${launch[@]}" ./peakof.sh base "$T" "${common[@]}" --n-layer 2 --n-embd 16 --n-head 1 --steps 2 2>base.txt >/dev/null ||
  { cat base.txt >&2; exit 1; }
base_kb=$(cat base.[123] | sort -n | tail -1)
{ printf '\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\n'
  for g in 0 1 2 3; do
    printf 'GPU%s' "$g"
    for h in 0 1 2 3; do [ "$g" = "$h" ] && printf '\t X ' || printf '\tPIX'; done
    printf '\t0-1\t0\n'
  done
  echo
  for g in 0 1 2 3; do echo "GPU $g: NVIDIA A100-SXM4-40GB (UUID: GPU-0000000$g)"; done; } >four.txt
printf 'nodes:\n  - {count: 1, shape: %s, nics: 0, nic_gbps: 100, gpu_memory_gb: 64}\n' "$PWD/four.txt" >ranks.yaml
"${LOOM_BUILDDIR}/loom-topo" plan --cluster ranks.yaml --n-layer 8 --n-embd 768 --n-head 12 --context 32 --vocab 256 \
  --global-batch 8 --precision fp32 --reserve-gb "$(python3 -c "print($base_kb / 1048576)")" --format json >plan.json
python3 - "$rounds" "$base_kb" <<'PY'
import json, re, statistics, sys
rounds = int(sys.argv[1])
def run(z, r):
    s = [json.loads(l) for l in open(f"m{z}.{r}.jsonl") if '"summary"' in l][-1]
    err = open(f"e{z}.{r}.txt").read()
    peaks = [int(open(f"peak{z}.{r}.{k}").read().split()[-1]) * 1024 for k in range(4)]  # rank k's
    step = float(re.search(r"rank 0: time per step: ([0-9.]+) ms", err).group(1))
    state = s["param_bytes_per_rank"] + s["grad_bytes_per_rank"] + s["optimizer_bytes_per_rank"]
    return {"state": state, "train_peak": max(peaks[1:]), "rank0_peak": peaks[0], "step_ms": step}
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
base = int(sys.argv[2]) * 1024
plan = {o["zero"]: o for o in json.load(open("plan.json"))["options"] if not o["recompute"] and not o["offload"]}
print(f"loom-topo plan against the measured peak of a training rank (the process beside the model: {mib(base):.0f} MiB, "
      "given as --reserve-gb):")
for z in (1, 3):
    predicted = next(iter(plan[z]["classes"].values()))["memory_bytes"]
    off = predicted / res[z]["train_peak"] - 1
    print(f"  ZeRO-{z}: plan {mib(predicted):.0f} MiB, measured {mib(res[z]['train_peak']):.0f} MiB: {off:+.1%} "
          f"(target within 15%): {'met' if abs(off) <= 0.15 else 'MISSED'}")
PY
