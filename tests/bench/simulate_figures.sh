#!/usr/bin/env bash
# simulate_figures.sh — issue 17's figures from loom-topo simulate: on 1024 GPUs (64 DGX A100 +
# 64 DGX-1V, 2:1 oversubscribed fat tree) and 1,000 jobs of 2 to 128 GPUs, Loom's mean step
# time against Slurm alone's (the peer, same jobs; target >= 30% less), what each mechanism
# gives, and how long the simulation takes (target <= 10 s).
set -u
T=${LOOM_TOPO:-${LOOM_BUILDDIR:-.}/loom-topo}
S=${LOOM_SRCDIR:-$(dirname "$0")/../..}/examples/simulate
start=$(date +%s.%N)
out=$("$T" simulate --cluster "$S/cluster-1024.yaml" --workload "$S/workload-1000.yaml" --format json) ||
  { echo "simulate_figures: loom-topo simulate failed (built without yaml-cpp?)"; exit 0; }
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
/usr/bin/python3 - "$out" "$secs" <<'PY'
import json, sys
d, secs = json.loads(sys.argv[1]), float(sys.argv[2])
s, l = d["policies"]["slurm"], d["policies"]["loom"]
red = d["step_time_reduction"]
print(f"simulate: 1024 GPUs, {l['jobs']} jobs: mean step loom {l['mean_step_s']:.4f} s vs slurm alone (peer) "
      f"{s['mean_step_s']:.4f} s: {100 * red:.1f}% less, ratio {s['mean_step_s'] / l['mean_step_s']:.2f}x; "
      f"target >= 30%: {'met' if red >= 0.30 else 'missed'}")
print(f"simulate: allreduce {l['mean_allreduce_s'] * 1e3:.1f} ms vs {s['mean_allreduce_s'] * 1e3:.1f} ms, "
      f"compute {l['mean_compute_s'] * 1e3:.1f} ms vs {s['mean_compute_s'] * 1e3:.1f} ms")
for k, v in d["mechanisms"].items():
    print(f"simulate: {k}: alone {100 * v['alone']:+.1f}%, loom without it {100 * v['without']:+.1f}%")
print(f"simulate: {secs:.2f} s for both policies and the six attribution runs "
      f"(simulation itself {d['seconds']:.2f} s); target <= 10 s: {'met' if secs <= 10 else 'missed'}")
PY
