#!/usr/bin/env bash
# check.sh — Loom's test command, from a fresh clone on a new machine: installs the Debian
# packages, builds out of tree, brings up the local Slurm cluster, runs every test (`make check`)
# and `make distcheck`, stops the cluster, and ends with one line: N passed, N failed.
#
# Environment: LOOM_SKIP_DEPS=1 (no apt-get), LOOM_SKIP_DISTCHECK=1, LOOM_BUILD (build folder,
# default _build), JOBS (parallel make jobs).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_BUILD:-$src/_build}
jobs=${JOBS:-$(nproc)}
say() { echo "check: $*"; }

if [ "${LOOM_SKIP_DEPS:-0}" != 1 ]; then
  "$src/contrib/install-deps.sh" || { say "installing dependencies failed"; echo "check: 0 passed, 1 failed"; exit 1; }
fi

step() {  # NAME CMD...: run, and on failure print the end of its log
  local name=$1
  shift
  say "$name"
  if ! "$@" >"$build/$name.log" 2>&1; then
    tail -n 60 "$build/$name.log"
    say "$name failed (log: $build/$name.log)"
    echo "check: 0 passed, 1 failed"
    exit 1
  fi
}

mkdir -p "$build"
step autogen "$src/autogen.sh"
fuzz=""
command -v clang++ >/dev/null && fuzz=--enable-fuzzing
step configure sh -c "cd '$build' && '$src/configure' $fuzz"
sed -n '/configuration summary/,$p' "$build/configure.log"
step build make -C "$build" -j"$jobs"
step build-tests make -C "$build" -j"$jobs" check TESTS=

# The one-node cluster (2 A100 + 2 V100, fake devices) for the integration tests.
export LOOM_CLUSTER_DIR=$build/cluster LOOM_BUILDDIR=$build
cluster_up=0
if [ "$(id -u)" -eq 0 ]; then
  if "$src/contrib/local-cluster.sh" start --gpus a100:2,v100:2 >"$build/cluster-start.log" 2>&1; then
    cluster_up=1
    export SLURM_CONF=$LOOM_CLUSTER_DIR/slurm.conf
    say "local cluster up ($SLURM_CONF)"
  else
    cat "$build/cluster-start.log"
    say "the local cluster did not start: cluster tests will fail"
  fi
else
  say "not root: the local cluster cannot start; cluster tests will be skipped"
fi
stop_cluster() { [ $cluster_up = 1 ] && "$src/contrib/local-cluster.sh" stop >/dev/null 2>&1; cluster_up=0; }
trap stop_cluster EXIT

say "make check"
make -C "$build" -j1 check >"$build/check.log" 2>&1
check_rc=$?
grep -E '^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):' "$build/check.log"
if [ $check_rc -ne 0 ]; then
  for log in $(grep -lE '^:test-result: (FAIL|ERROR)' $(find "$build/tests" -name '*.trs') 2>/dev/null); do
    say "---- ${log%.trs}.log"
    tail -n 40 "${log%.trs}.log"
  done
fi
[ "$cluster_up" = 1 ] && { "$src/contrib/local-cluster.sh" status >/dev/null 2>&1 || { say "the cluster died during the tests"; check_rc=1; }; }
stop_cluster

pass=$(grep -c '^PASS:' "$build/check.log")
failn=$(grep -cE '^(FAIL|ERROR|XPASS):' "$build/check.log")
skipn=$(grep -c '^SKIP:' "$build/check.log")
for log in $(find "$build/tests" -name '*.log' 2>/dev/null); do
  grep -h '^SKIP: ' "$log" | sed "s|^|check: $(basename "$log" .log): |" | head -3
done

dist_rc=0
if [ "${LOOM_SKIP_DISTCHECK:-0}" != 1 ] && [ $check_rc -eq 0 ]; then
  say "make distcheck"
  # distcheck proves that the tarball builds out of tree and that the tests which read the
  # source tree (unit tests and their fixtures, layout, loom-topo goldens, serve, parity) find
  # their files. Tests that only drive the built programs ran in make check above on the same
  # sources and skip there (LOOM_DISTCHECK=1), and the sanitizer builds of the fuzz targets are
  # left to make check: the suite stays under 30 minutes on two cores.
  # -j: the tarball's build on every core (a serial one took 10 of the suite's 29 minutes).
  # -O1 without debug information: the tarball's build checks what the tarball holds, and the
  # -O2 -g build above is the one the tests measured; it took the distcheck from 8 to 5 minutes.
  if env -u SLURM_CONF LOOM_SKIP_CLUSTER_TESTS=1 LOOM_DISTCHECK=1 make -C "$build" -j"$jobs" distcheck \
    DISTCHECK_CONFIGURE_FLAGS="CFLAGS='-O1 -g0' CXXFLAGS='-O1 -g0'" >"$build/distcheck.log" 2>&1; then
    pass=$((pass + 1))
    say "distcheck passed"
  else
    tail -n 40 "$build/distcheck.log"
    for log in $(grep -lE '^:test-result: (FAIL|ERROR)' $(find "$build" -path '*/_build/*' -name '*.trs') 2>/dev/null); do
      say "---- distcheck: ${log%.trs}.log"
      tail -n 60 "${log%.trs}.log"
    done
    failn=$((failn + 1))
    dist_rc=1
  fi
fi

echo "check: $pass passed, $failn failed, $skipn skipped"
[ $check_rc -eq 0 ] && [ $dist_rc -eq 0 ] && [ "$failn" -eq 0 ]
