# lib.sh — shared helpers for Loom's shell tests: assertions that say what failed, a private
# temporary folder, and the automake exit codes (77 skip, 99 hard error).
set -u
LOOM_TEST_NAME=$(basename "$0" .sh)
LOOM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/loom-$LOOM_TEST_NAME.XXXXXX")
trap 'rm -rf "$LOOM_TMP"' EXIT
failures=0
checks=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { checks=$((checks + 1)); }
skip() { echo "SKIP: $*"; exit 77; }

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
  if [ "$2" == "$3" ]; then pass; else fail "$1: expected '$2', got '$3'"; fi
}
# expect_match WHAT REGEX TEXT
expect_match() {
  if printf '%s' "$3" | grep -Eq -- "$2"; then pass; else fail "$1: '$3' does not match /$2/"; fi
}
# expect_ne WHAT UNEXPECTED ACTUAL
expect_ne() {
  if [ "$2" != "$3" ]; then pass; else fail "$1: got '$3'"; fi
}
# expect_http WHAT STATUS BODY-REGEX CURL-ARGS...: curl's answer has that HTTP status and a body
# matching the regex (the protocol's error body, as each test spells it).
expect_http() {
  local what=$1 want=$2 re=$3 got
  shift 3
  got=$(curl -s -w '\n%{http_code}' "$@")
  expect_eq "$what: status" "$want" "${got##*$'\n'}"
  expect_match "$what: body" "$re" "${got%$'\n'*}"
}
# expect_no_match WHAT REGEX TEXT
expect_no_match() {
  if printf '%s' "$3" | grep -Eq -- "$2"; then fail "$1: '$3' matches /$2/"; else pass; fi
}

# require_cluster: skips unless the local cluster (contrib/local-cluster.sh, $SLURM_CONF) answers.
require_cluster() {
  [ "${LOOM_SKIP_CLUSTER_TESTS:-0}" = 1 ] && skip "LOOM_SKIP_CLUSTER_TESTS=1"
  [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ] || skip "no local cluster (contrib/local-cluster.sh start; export SLURM_CONF)"
  sinfo -h >/dev/null 2>&1 || skip "slurmctld at $SLURM_CONF does not answer"
}

# run_cmd CMD...: sets rc, out, err
run_cmd() {
  "$@" >"$LOOM_TMP/out" 2>"$LOOM_TMP/err"
  rc=$?
  out=$(cat "$LOOM_TMP/out")
  err=$(cat "$LOOM_TMP/err")
}

# serve_start NAME ARGS...: loom-serve in the background on a free HTTP port, its log in
# NAME.log; waits until it listens. Sets $pid, and $http and $grpc (host:port, or empty).
serve_start() {  # NAME ARGS...; with LOOM_SERVE_AS=USER, run as that user (setpriv execs: $pid is loom-serve's)
  local name=$1 n=0 as=()
  shift
  [ -n "${LOOM_SERVE_AS:-}" ] && as=(setpriv --reuid="$LOOM_SERVE_AS" --regid="$(id -g "$LOOM_SERVE_AS")" --clear-groups)
  "${as[@]}" "$LOOM_BUILDDIR/loom-serve" --http-port 0 "$@" 2>"$name.log" &
  pid=$!
  until grep -q "listening:" "$name.log" 2>/dev/null || [ $n -gt 300 ]; do sleep 0.05; n=$((n + 1)); done
  http=$(grep -oE "http [0-9.]+:[0-9]+" "$name.log" | cut -d' ' -f2)
  grpc=$(grep -oE "grpc [0-9.]+:[0-9]+" "$name.log" | cut -d' ' -f2)
}

# require_onnx_serve: what the tests of ONNX serving need: loom-serve built with gRPC and ONNX,
# Debian's PyTorch and grpcio, and protoc for the KServe messages.
require_onnx_serve() {
  /usr/bin/python3 -c 'import torch, grpc, google.protobuf' 2>/dev/null || skip "python3-torch and python3-grpcio are needed"
  command -v protoc >/dev/null || skip "protoc (protobuf-compiler) is needed"
  [ -x "$LOOM_BUILDDIR/loom-serve" ] || skip "loom-serve not built"
  "$LOOM_BUILDDIR/loom-serve" --help 2>&1 | grep -q grpc-port || skip "loom-serve built without gRPC"
  [ -x "$LOOM_BUILDDIR/tests/parity/onnx_run" ] || skip "loom-serve built without ONNX (libonnx-dev)"
}

# require_onnx_graph: loom-serve built with ONNX, and Debian's python3-onnx to build models with.
require_onnx_graph() {
  [ -x "$LOOM_BUILDDIR/tests/parity/onnx_run" ] || skip "loom-serve built without ONNX (libonnx-dev)"
  [ -x "$LOOM_BUILDDIR/loom-serve" ] || skip "loom-serve not built"
  /usr/bin/python3 -c 'import onnx' 2>/dev/null || skip "python3-onnx is needed"
}

# promtool_lint WHAT TEXT: Prometheus' own linter finds nothing in a /metrics page but Triton's
# nv_inference_* names, which keep Triton's spelling so that Triton's dashboards work unchanged.
promtool_lint() {
  command -v promtool >/dev/null || { echo "SKIP (part): no promtool (Debian's prometheus)"; return 0; }
  local found
  found=$(promtool check metrics <<<"$2" 2>&1 | grep -v '^nv_inference_')
  expect_eq "$1: promtool check metrics (Loom's names)" "" "$found"
}

# peer_venv NAME PACKAGE...: test peers from PyPI in a virtual environment (contrib/peer-venv.sh);
# skips the test, saying why, when it cannot be made. Sets $peer (the environment's folder).
# refused WHAT RC REGEX CMD...: CMD exits RC, says REGEX on stderr, prints nothing on stdout and
# writes no out.h5 (the file the refused commands were told to write).
refused() {
  local what=$1 want=$2 re=$3
  shift 3
  rm -f out.h5
  run_cmd "$@"
  expect_eq "$what: exit status" "$want" "$rc"
  expect_match "$what: message" "$re" "$err"
  [ ! -e out.h5 ] && pass || fail "$what: out.h5 was written"
  expect_eq "$what: nothing on stdout" "" "$out"
}

# json_edit FILE PYTHON: the JSON file changed by PYTHON (j is its value) and written back.
json_edit() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(j, open(sys.argv[1], "w"))
PY
}

# Triton's client from PyPI, with perf_analyzer's libcudart: one environment every test shares.
TRITON_PEER=('tritonclient[http,grpc]==2.41.1' nvidia-cuda-runtime-cu12 numpy)
peer_venv() {
  peer=$("${LOOM_SRCDIR:-$(dirname "$0")/../..}/contrib/peer-venv.sh" "$@" 2>"$LOOM_TMP/peer.err") || skip "$(cat "$LOOM_TMP/peer.err")"
}

# Models of tests/parity/onnx_models.py (FAMILY ...), exported by Debian's PyTorch at opset 17 into
# FAMILY/float.onnx under the current folder with their inputs (FAMILY/inputs, onnx_run's form).
export_onnx_families() {
  /usr/bin/python3 - "$LOOM_SRCDIR/tests/parity" "$@" <<'PY' 2>exporter.log || { cat exporter.log; exit 99; }
import os, sys
sys.path.insert(0, sys.argv[1])
import onnx_models as om
for fam in sys.argv[2:]:
    os.makedirs(fam, exist_ok=True)
    om.export(fam, f"{fam}/float.onnx", 17)
    om.write_inputs(fam, fam)
PY
}

# The start of the MPI training tests: loom-train ($T), mpirun and the data set there (else skip;
# under distcheck they ran in make check already), Open MPI allowed as root, the test's folder, and
# rankenv.sh: rank r weighs 2r+1 (uneven static shares), and with SLOW set rank 1 is emulated that
# much slower (LOOM_EMULATE_SPEED); nodeenv.sh and peakof.sh (below).
mpi_training_setup() {
  T=$LOOM_BUILDDIR/loom-train
  [ -x "$T" ] || skip "loom-train not built"
  [ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
  command -v mpirun >/dev/null || skip "mpirun missing"
  [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  cd "$LOOM_TMP" || exit 99
  cat >rankenv.sh <<'SH'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-0}
export LOOM_DEVICE_WEIGHT=$((2 * r + 1))
[ -n "$SLOW" ] && [ "$r" = 1 ] && export LOOM_EMULATE_SPEED=$SLOW
exec "$@"
SH
  chmod +x rankenv.sh
  # nodeenv.sh: ranks as 2-rank nodes (LOOM_NODE_ID stands in for the host), rank r weighing r+1.
  cat >nodeenv.sh <<'SH'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-0}
export LOOM_DEVICE_WEIGHT=$((r + 1)) LOOM_NODE_ID=node$((r / 2))
exec "$@"
SH
  chmod +x nodeenv.sh
  cp "$LOOM_SRCDIR/tests/train/peakof.sh" peakof.sh  # PREFIX CMD...: the peak resident KiB in PREFIX.<rank>
  chmod +x peakof.sh
}

finish() {
  if [ "$failures" -gt 0 ]; then
    echo "$LOOM_TEST_NAME: $failures of $((checks + failures)) checks failed"
    exit 1
  fi
  echo "$LOOM_TEST_NAME: all $checks checks passed"
  exit 0
}
