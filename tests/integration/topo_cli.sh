#!/usr/bin/env bash
# topo_cli.sh — loom-topo as an admin meets it: exit codes 0/1/2, one-line `loom-topo:` errors
# with nothing on stdout, every bad input of the issue, live discovery on this machine.
. "$(dirname "$0")/lib.sh"
T=$LOOM_TOPO
F=$LOOM_FIXTURES

# Help and usage errors: exit 2.
run_cmd "$T" --help
expect_eq "--help exit" 0 "$rc"
expect_match "--help lists commands" "node-conf" "$out"
for args in "" "bogus" "--frobnicate show" "show --as xml" "--format yaml show" "place" \
            "place --ntasks x" "place --ntasks 2 --mode bogus" "--xml a --nvidia-smi b show" "show extra" \
            "export --as pdf" "--xml" "gres --dev-dir relative"; do
  # shellcheck disable=SC2086
  run_cmd "$T" $args
  expect_eq "usage '$args' exit" 2 "$rc"
  expect_match "usage '$args' message" "^loom-topo: " "$err"
  expect_eq "usage '$args' stdout" "" "$out"
done

# Bad input files: exit 1, one line, nothing on stdout.
mkdir -p "$LOOM_TMP/bad"
printf '<topology><object type="Machine"' >"$LOOM_TMP/bad/malformed.xml"
head -c 9000 "$F/dgx1-v100.xml" >"$LOOM_TMP/bad/truncated.xml"
: >"$LOOM_TMP/bad/empty.xml"
printf '\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-1\nGPU1\tBOGUS\t X \t0-1\n' >"$LOOM_TMP/bad/unknown-word.txt"
printf '\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV2\t0-1\nGPU1\tNV1\t X \t0-1\n' >"$LOOM_TMP/bad/inconsistent.txt"
printf '\tNIC0\tCPU Affinity\nNIC0\t X \n' >"$LOOM_TMP/bad/zero-gpus.txt"
sed '4d' "$F/dgx-a100.nvsmi.txt" >"$LOOM_TMP/bad/missing-row.txt"
check_bad() {  # WHAT REGEX CMD...
  local what=$1 re=$2
  shift 2
  run_cmd "$@"
  expect_eq "$what exit" 1 "$rc"
  expect_eq "$what stdout" "" "$out"
  expect_eq "$what lines on stderr" 1 "$(printf '%s\n' "$err" | wc -l)"
  expect_match "$what message" "^loom-topo: .*$re" "$err"
}
check_bad "malformed XML" "not valid hwloc XML" "$T" --xml "$LOOM_TMP/bad/malformed.xml" show
check_bad "truncated XML" "not valid hwloc XML" "$T" --xml "$LOOM_TMP/bad/truncated.xml" gres
for f in "$F"/crashers/*.xml; do
  check_bad "hwloc crasher $(basename "$f")" "not valid hwloc XML" "$T" --xml "$f" show
done
check_bad "empty XML" "empty file" "$T" --xml "$LOOM_TMP/bad/empty.xml" show
check_bad "missing file" "No such file" "$T" --xml "$LOOM_TMP/nope.xml" show
check_bad "directory" "not a regular file" "$T" --nvidia-smi "$LOOM_TMP" show
check_bad "unknown word" "unknown path word 'BOGUS'" "$T" --nvidia-smi "$LOOM_TMP/bad/unknown-word.txt" show
check_bad "inconsistent matrix" "not symmetric|inconsistent" "$T" --nvidia-smi "$LOOM_TMP/bad/inconsistent.txt" show
check_bad "zero GPUs in text" "no 'nvidia-smi topo -m' matrix" "$T" --nvidia-smi "$LOOM_TMP/bad/zero-gpus.txt" show
check_bad "missing row" "no row for GPU2" "$T" --nvidia-smi "$LOOM_TMP/bad/missing-row.txt" place --ntasks 2
check_bad "zero GPUs for gres" "no GPUs" "$T" --xml "$F/cpu-only.xml" gres
check_bad "zero GPUs for place" "no GPUs" "$T" --xml "$F/cpu-only.xml" place --ntasks 2
check_bad "more tasks than CPUs" "more tasks \(4\) than allowed CPUs \(2\)" "$T" --xml "$F/local-mixed.xml" place --ntasks 4
check_bad "empty CPU set" "allowed CPU set is empty" "$T" --xml "$F/mixed-a100-v100.xml" place --ntasks 1 --cpus ""
check_bad "CPU not on node" "CPU 99 is not on this node" "$T" --xml "$F/local-mixed.xml" place --ntasks 1 --cpus 99
check_bad "GPU not on node" "GPU 5 is not on this node" "$T" --xml "$F/local-mixed.xml" place --ntasks 1 --gpus 5
check_bad "zero tasks" "must be positive" "$T" --xml "$F/local-mixed.xml" place --ntasks 0
check_bad "xml export of text" "needs a topology read by hwloc" "$T" --nvidia-smi "$F/dgx1-v100.nvsmi.txt" export --as xml
check_bad "nccl of text" "PCI ids" "$T" --nvidia-smi "$F/dgx1-v100.nvsmi.txt" nccl-xml

# Garbage of every kind never crashes: exit 1 with a message, never a signal.
for i in 1 2 3 4 5 6; do
  head -c $((i * 4000)) /dev/urandom >"$LOOM_TMP/bad/random$i"
  for flag in --xml --nvidia-smi; do
    run_cmd "$T" $flag "$LOOM_TMP/bad/random$i" show
    expect_eq "random bytes $i $flag exit" 1 "$rc"
  done
done

# Oversubscription is explicit.
run_cmd "$T" --xml "$F/local-mixed.xml" place --ntasks 4 --oversubscribe --format json
expect_eq "oversubscribe exit" 0 "$rc"
expect_match "oversubscribe shares CPU 0" '"cpus":\[0\]' "$out"

# Live discovery of this machine: works without a GPU driver and says so.
run_cmd "$T" export
expect_eq "live export exit" 0 "$rc"
expect_match "live export JSON" '"numa_nodes":\[\{"id":0' "$out"
if ! ldconfig -p | grep -q libnvidia-ml.so.1; then
  expect_match "live: no driver note" "no NVIDIA driver" "$err"
fi
run_cmd "$T" export --as xml
expect_eq "live XML export exit" 0 "$rc"
printf '%s\n' "$out" >"$LOOM_TMP/live.xml"
run_cmd "$T" --xml "$LOOM_TMP/live.xml" node-conf --host here
expect_eq "live XML reads back" 0 "$rc"
expect_match "live node-conf" "^NodeName=here CPUs=$(nproc --all) " "$out"
run_cmd "$T" node-conf
expect_match "live node-conf host" "^NodeName=$(hostname -s) " "$out"

# The live node-conf line agrees with Slurm's own view of this node (slurmd -C).
if command -v slurmd >/dev/null; then
  mine=$("$T" node-conf 2>/dev/null | grep -oE '(CPUs|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
  slurms=$(slurmd -C 2>/dev/null | head -n 1 | grep -oE '(CPUs|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
  expect_eq "node-conf agrees with slurmd -C" "$slurms" "$mine"
fi
# simulate and topology-conf (Contract 10): the JSON of one job and of a workload, the
# topology.conf of a cluster, and every bad cluster or workload file.
if "$T" simulate 2>&1 | grep -q "needs a build"; then
  echo "topo_cli: simulate not in this build (yaml-cpp)"
else
  S=$LOOM_SRCDIR/examples/simulate
  run_cmd "$T" simulate --cluster "$S/cluster-1024.yaml" --job-gpus 16 --bytes 1e9 --format json
  expect_eq "simulate one job" 0 "$rc"
  verdict=$(/usr/bin/python3 -c '
import json, sys
d = json.loads(sys.argv[1])
s, l = d["placements"]["slurm"], d["placements"]["loom"]
assert d["cluster"] == {"nodes": 128, "gpus": 1024}, d["cluster"]
assert all(k in s for k in ("allreduce_s", "busbw_gbps", "algo", "placement")), s
assert l["allreduce_s"] <= s["allreduce_s"] and l["nodes"] == 2
print("ok")' "$out" 2>&1)
  expect_eq "simulate one job: placements for both policies" ok "$verdict"
  cat >"$LOOM_TMP/small.yaml" <<'Y'
nodes:
  - {count: 6, shape: dgx1v, nics: 4, nic_gbps: 100}
  - {count: 2, shape: dgxa100}
network: {leaf_nodes: 4, oversubscription: 2}
Y
  cat >"$LOOM_TMP/jobs.yaml" <<'Y'
seed: 3
jobs:
  - {count: 40, gpus: 2, model_bytes: 1e8, compute_s: 0.05}
  - {count: 10, gpus: 16, model_bytes: 1e9, compute_s: 0.1}
Y
  run_cmd "$T" simulate --cluster "$LOOM_TMP/small.yaml" --workload "$LOOM_TMP/jobs.yaml" --format json
  expect_eq "simulate a workload" 0 "$rc"
  expect_match "with both policies, the reduction and the mechanisms" \
    '"policies":\{"slurm":\{"gpus":64,"jobs":50,"mean_step_s":.*"loom":\{.*"step_time_reduction":.*"mechanisms":\{"links"' "$out"
  run_cmd "$T" topology-conf --cluster "$LOOM_TMP/small.yaml" --node-prefix gpu
  expect_eq "topology-conf" 0 "$rc"
  expect_eq "one line a leaf and the spine" "SwitchName=leaf0 Nodes=gpu[001-004]|SwitchName=leaf1 Nodes=gpu[005-008]|SwitchName=spine Switches=leaf[0-1]" \
    "$(grep -v '^#' <<<"$out" | tr '\n' '|' | sed 's/|$//')"
  bad() {  # WHAT REGEX YAML
    printf '%s\n' "$3" >"$LOOM_TMP/bad.yaml"
    run_cmd "$T" simulate --cluster "$LOOM_TMP/bad.yaml" --job-gpus 2 --bytes 1e6
    expect_eq "simulate: $1 exit" 1 "$rc"
    expect_match "simulate: $1 message" "^loom-topo: .*$2" "$err"
  }
  bad "unknown shape" "unknown node shape 'dgx9'" "nodes: [{count: 2, shape: dgx9}]"
  bad "too many NICs" "'nics' must be 0..4" "nodes: [{count: 2, shape: dgx1v, nics: 9}]"
  bad "oversubscription below 1" "'oversubscription' must be 1 or more" "{nodes: [{count: 2, shape: dgx1v}], network: {oversubscription: 0.5}}"
  bad "unknown key" "unknown key 'gpus'" "nodes: [{count: 2, shape: dgx1v, gpus: 8}]"
  bad "no nodes" "'nodes' must be a non-empty list" "nodes: []"
  bad "not YAML" "not valid YAML" "nodes: [unclosed"
  run_cmd "$T" simulate --cluster "$LOOM_TMP/small.yaml" --job-gpus 100 --bytes 1e6
  expect_match "a job larger than the cluster" "a job of 100 GPUs does not fit" "$err"
  for args in "" "--cluster $LOOM_TMP/small.yaml" "--cluster $LOOM_TMP/small.yaml --job-gpus 2 --bytes 1 --placement best" \
              "--cluster $LOOM_TMP/small.yaml --job-gpus x --bytes 1"; do
    # shellcheck disable=SC2086
    run_cmd "$T" simulate $args
    expect_eq "simulate usage '$args'" 2 "$rc"
  done
  # plan (doc/plan.md): the seed's case, every combination in JSON, and what it refuses.
  mixed=$S/cluster-mixed-16.yaml
  run_cmd "$T" plan --cluster "$mixed" --params 13e9 --n-layer 40 --n-embd 5120 --n-head 40 --context 2048 --global-batch 64 --format json
  expect_eq "plan" 0 "$rc"
  /usr/bin/python3 - "$out" <<'PY' && pass || fail "plan's JSON: $out"
import json, sys
p = json.loads(sys.argv[1])
o = p["options"]
assert len(o) == 16 and {(x["zero"], x["recompute"], x["offload"]) for x in o} == {(z, r, f) for z in range(4) for r in (0, 1) for f in (0, 1)}
fits = {(x["zero"], x["recompute"], x["offload"]) for x in o if x["fits"]}
assert fits == {(3, True, False), (3, True, True)}, fits
for x in o:
    assert set(x["classes"]) == {"a100", "v100"} and x["step_s"] < x["step_s_equal_shares"], x
    a, v = x["classes"]["a100"], x["classes"]["v100"]
    assert a["capacity_bytes"] == 40 << 30 and v["capacity_bytes"] == 32 << 30 and abs(8 * a["share"] + 8 * v["share"] - 1) < 1e-9
    assert x["fits"] == (a["fits"] and v["fits"]) and a["fits"] == (a["memory_bytes"] <= a["capacity_bytes"])
assert p["best"] == "ZeRO-3 with recompute", p["best"]
PY
  run_cmd "$T" plan --cluster "$mixed" --params 13e9 --n-layer 40 --n-embd 5120 --n-head 40 --context 2048 --global-batch 64
  expect_match "plan's text: the best option against equal shares" "^best: ZeRO-3 with recompute, [0-9.]+ s a step \\(equal shares [0-9.]+ s: 1\\.[0-9]+x\\)" "$(grep "^best:" <<<"$out")"
  # Uneven parts: at 120 sequences a step ZeRO-3 with recompute fits only when each GPU's part of the
  # state follows the memory its batch share leaves (the A100s, with 2.5x the V100s' share, hold less).
  run_cmd "$T" plan --cluster "$mixed" --params 13e9 --n-layer 40 --n-embd 5120 --n-head 40 --context 2048 --global-batch 120 --format json
  /usr/bin/python3 - "$out" <<'PY' && pass || fail "plan's uneven parts: $out"
import json, sys
u = json.loads(sys.argv[1])["uneven"]
c = {(x["recompute"], x["offload"]): (x["fits_even"], x["fits_uneven"]) for x in u["choices"]}
assert c[(True, False)] == (False, True) and c[(True, True)] == (True, True), c
assert (u["recompute"], u["offload"], u["fits"]) == (True, False, True), u
a, v = u["classes"]["a100"], u["classes"]["v100"]
assert abs(8 * a["part_bytes"] + 8 * v["part_bytes"] - 16 * 13e9) < 1e3 and a["part_bytes"] < v["part_bytes"], u
assert a["memory_bytes"] <= 40 << 30 and v["memory_bytes"] <= 32 << 30, u
assert u["largest_global_batch"]["uneven"] > u["largest_global_batch"]["even"] >= 64, u
assert u["largest_layers"]["uneven"] > u["largest_layers"]["even"] >= 1, u
PY
  run_cmd "$T" plan --cluster "$mixed" --params 13e9 --n-layer 40 --n-embd 5120 --n-head 40 --context 2048 --global-batch 120
  expect_match "plan's text: what uneven parts allow" "ZeRO-3 with recompute fits only with uneven parts" "$out"
  run_cmd "$T" plan --cluster "$mixed" --params 1e9 --global-batch 8 --precision fp32 --reserve-gb 0 --format json
  /usr/bin/python3 - "$out" <<'PY' && pass || fail "plan --precision fp32 --reserve-gb 0: $out"
import json, sys
o = [x for x in json.loads(sys.argv[1])["options"] if x["zero"] == 0 and not x["recompute"] and not x["offload"]][0]
a = o["classes"]["a100"]
assert a["param_bytes"] == 4e9 and a["grad_bytes"] == 4e9 and a["optimizer_bytes"] == 8e9 and a["memory_bytes"] == 16e9, a
PY
  run_cmd "$T" plan --cluster "$mixed" --params 2e12 --global-batch 8
  expect_match "a model that fits nowhere says what it would need" "fits nowhere: even ZeRO-3 with recompute and optimizer offload needs .* GB on a a100 \\(has 40\\).*would fit on [0-9]+x these GPUs" "$out"
  printf 'nodes: [{count: 1, shape: dgx1v, gpu_memory_gb: 0}]\n' >"$LOOM_TMP/nomem.yaml"
  run_cmd "$T" plan --cluster "$LOOM_TMP/nomem.yaml" --params 1e9 --global-batch 8
  expect_match "a GPU class with no memory given" "^loom-topo: GPU class v100 .* has no memory given: add gpu_memory_gb" "$err"
  printf 'nodes: [{count: 1, shape: dgx1v, gpu_memory_gb: -4}]\n' >"$LOOM_TMP/negmem.yaml"
  run_cmd "$T" plan --cluster "$LOOM_TMP/negmem.yaml" --params 1e9 --global-batch 8
  expect_match "negative memory" "'gpu_memory_gb' must be from 0 to 100000" "$err"
  for args in "--params -5 --global-batch 8" "--params 1e40 --global-batch 8" "--params 1e9 --global-batch 0" "--params 1e9" \
              "--n-layer 4 --global-batch 8" "--params 12x --global-batch 8" "--params 1e9 --global-batch 8 --context 5" \
              "--params 1e9 --global-batch 8 --mfu 2" "--params 1e9 --global-batch 8 --precision fp8" \
              "--params 1e9 --global-batch 8 --reserve-gb -1" "--params 1e9 --global-batch 8 --reserve-gb 1e9"; do
    # shellcheck disable=SC2086
    run_cmd "$T" plan --cluster "$mixed" $args
    expect_eq "plan usage '$args'" 2 "$rc"
  done
fi
finish
