#!/usr/bin/env bash
# multinode_allreduce.sh — issue 17's shaped-network figures: the namespace cluster
# (local-cluster.sh --nodes "a100:2 a100:2") with each node's link shaped by tc tbf to
# LOOM_SHAPE_GBIT Gbit/s (default 1; tbf and htb work in this kernel, netem does not, so no delay
# is added), 2 nodes x 2 ranks: Loom's flat ring against its hierarchical allreduce, with
# MPI_Allreduce as the peer and loom-topo simulate's prediction for the same setup beside the
# measurement; then a training step with gradients plain, fp16 and PowerSGD. Root only.
set -u
B=${LOOM_BUILDDIR:-.}
SRC=${LOOM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
[ "$(id -u)" -eq 0 ] || { echo "multinode_allreduce: needs root (network namespaces, tc): skipped"; exit 0; }
command -v tc >/dev/null && command -v srun >/dev/null || { echo "multinode_allreduce: needs tc and Slurm: skipped"; exit 0; }
rate=${LOOM_SHAPE_GBIT:-1}
bytes=${LOOM_ALLREDUCE_BYTES:-16777216}
tmp=$(mktemp -d)
export LOOM_CLUSTER_DIR=$tmp/cluster LOOM_SLURM_PORT=16947 SLURM_CONF=$tmp/cluster/slurm.conf LOOM_BUILDDIR=$B
LC=$SRC/contrib/local-cluster.sh
trap '"$LC" stop >/dev/null 2>&1; rm -rf "$tmp"' EXIT
"$LC" start --nodes "a100:2 a100:2" >"$tmp/start.log" 2>&1 || { echo "multinode_allreduce: the cluster did not start"; tail -5 "$tmp/start.log"; exit 1; }
eval "$("$LC" names)"  # this cluster's namespace prefix
for i in 1 2; do  # both directions of each node's link
  tc qdisc replace dev "${nsp}v$i" root tbf rate "${rate}gbit" burst 512kb latency 400ms
  nsenter --net="/run/netns/${nsp}n$i" tc qdisc replace dev eth0 root tbf rate "${rate}gbit" burst 512kb latency 400ms
done
# A time limit, no retry: with PMIx's hash store (local-cluster.sh) start-ups do not hang or fail.
run4() { timeout -k 5 300 srun -N2 -n4 --ntasks-per-node=2 --mpi=pmix "$@" 2>>"$tmp/srun.err"; }
flat=$(run4 "$B/loom-bench" allreduce --bytes "$bytes" --iters 5 --format json --flat | tail -1)
hier=$(run4 "$B/loom-bench" allreduce --bytes "$bytes" --iters 5 --format json | tail -1)
printf 'nodes:\n  - {count: 2, shape: %s, nics: 0, nic_gbps: %s}\n' "$SRC/tests/fixtures/topology/local-a100.xml" "$rate" >"$tmp/c.yaml"
pf=$("$B/loom-topo" simulate --cluster "$tmp/c.yaml" --job-gpus 4 --bytes "$bytes" --algo flat --placement loom --format json)
ph=$("$B/loom-topo" simulate --cluster "$tmp/c.yaml" --job-gpus 4 --bytes "$bytes" --algo hier --placement loom --format json)
train() {  # GRAD-COMPRESS -> samples/s of the whole job (loom-train logs on stderr)
  : >"$tmp/srun.err"
  run4 "$B/loom-train" --steps 60 --global-batch 512 --log-every 1000 --threads 1 --grad-compress "$1" >/dev/null
  grep -oE "done: [0-9]+ steps, [0-9]+ samples/s" "$tmp/srun.err" | grep -oE "[0-9]+ samples/s" | cut -d' ' -f1
}
t_none=$(train none)
t_fp16=$(train fp16)
t_psgd=$(train powersgd:rank=4,start=0)
/usr/bin/python3 - "$flat" "$hier" "$pf" "$ph" "$rate" "${t_none:-0}" "${t_fp16:-0}" "${t_psgd:-0}" <<'PY'
import json, sys
try:
    flat, hier = json.loads(sys.argv[1]), json.loads(sys.argv[2])
except ValueError:
    print("multinode_allreduce: a run failed:", sys.argv[1][:200], sys.argv[2][:200]); sys.exit(1)
pf, ph = json.loads(sys.argv[3])["placements"]["loom"], json.loads(sys.argv[4])["placements"]["loom"]
measured, predicted = flat["loom_s"] / hier["loom_s"], pf["allreduce_s"] / ph["allreduce_s"]
none, fp16, psgd = (float(x) for x in sys.argv[6:9])
out = {"shaped_gbit": float(sys.argv[5]), "bytes": flat["bytes"], "ranks": flat["ranks"],
       "flat_s": flat["loom_s"], "hier_s": hier["loom_s"], "layout": hier["layout"],
       "mpi_busbw_gbps": hier["mpi_busbw_gbps"], "hier_busbw_gbps": hier["loom_busbw_gbps"],
       "measured_hier_over_flat": measured, "predicted_flat_s": pf["allreduce_s"], "predicted_hier_s": ph["allreduce_s"],
       "predicted_hier_over_flat": predicted, "prediction_error": predicted / measured - 1,
       "train_samples_per_s": {"none": none, "fp16": fp16, "powersgd": psgd}}
print(json.dumps(out))
print(f"multinode_allreduce: {out['ranks']} ranks on 2 nodes at {out['shaped_gbit']:g} Gbit/s, {out['bytes']} bytes: "
      f"hierarchical {hier['loom_s'] * 1e3:.0f} ms vs flat {flat['loom_s'] * 1e3:.0f} ms: {measured:.2f}x (target >= 1.3x: "
      f"{'met' if measured >= 1.3 else 'missed'}); loom-topo simulate predicts {predicted:.2f}x "
      f"({100 * (predicted / measured - 1):+.0f}%, target within 25%: {'met' if abs(predicted / measured - 1) <= 0.25 else 'missed'}); "
      f"peer MPI_Allreduce {hier['mpi_busbw_gbps']:.3f} GB/s busbw vs loom hierarchical {hier['loom_busbw_gbps']:.3f}")
if none > 0:
    print(f"multinode_allreduce: training step, samples/s: plain {none:.0f}, fp16 gradients {fp16:.0f} "
          f"({fp16 / none:.2f}x), PowerSGD rank 4 {psgd:.0f} ({psgd / none:.2f}x)")
PY
