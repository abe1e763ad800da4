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
finish
