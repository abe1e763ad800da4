#!/usr/bin/env bash
# sweep_cluster.sh — loom-sweep on the local cluster: a Bayesian sweep of Branin runs as one
# sbatch --array job (Slurm's job-completion records show every task), a failing trial is
# reported and the sweep goes on, a killed task is a failed trial, a metric never written stops
# the sweep with one error and cancels the array, an interrupted sweep resumes from --dir without
# rerunning finished trials, bad specs exit 2, and the local executor runs the same wrapper.
. "$(dirname "$0")/lib.sh"
S=$LOOM_BUILDDIR/loom-sweep
[ -x "$S" ] || skip "loom-sweep not built (needs yaml-cpp, Eigen, NLopt)"
cd "$LOOM_TMP" || exit 99

spec() {  # NAME COMMAND [EXTRA YAML]: a 2-D sweep over x1, x2 whose trials run COMMAND
  { echo "command: |-"
    echo "  $2"
    echo "metric: value"
    echo "trials: ${TRIALS:-10}"
    echo "parallel: ${PARALLEL:-2}"
    echo "seed: 3"
    echo "parameters:"
    echo "  x1: {type: float, min: -5, max: 10}"
    echo "  x2: {type: float, min: 0, max: 15}"
    printf '%b' "${3:-}"; } >"$1.yaml"
}
cat >branin.sh <<'SH'
# branin.sh X1 X2 FILE: Branin's function at (X1, X2), as a JSON line in FILE
awk -v x="$1" -v y="$2" 'BEGIN { pi = atan2(0, -1); b = 5.1 / (4 * pi * pi); c = 5 / pi; t = 1 / (8 * pi)
  printf "{\"value\": %.9f}\n", (y - b * x * x + c * x - 6) ^ 2 + 10 * (1 - t) * cos(x) + 10 }' >"$3"
SH
branin="bash $LOOM_TMP/branin.sh {x1} {x2} {metrics_file}"
jq_py() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# --- bad specs: one clear error, status 2, nothing submitted
spec bad-type "$branin" "  x3: {type: exponential, min: 1, max: 2}\n"
run_cmd "$S" --spec bad-type.yaml --dir bad
expect_eq "an unknown parameter type is a usage error" 2 "$rc"
expect_match "and says which" "parameters.x3: unknown type 'exponential'" "$err"
spec bad-range "echo {x1} {x2} > {metrics_file}"
sed -i 's/min: 0, max: 15/min: 15, max: 0/' bad-range.yaml
run_cmd "$S" --spec bad-range.yaml --dir bad
expect_eq "min >= max is refused" 2 "$rc"
expect_match "with the parameter named" "parameters.x2: min must be below max" "$err"
spec bad-cmd "echo {x1} {x2} > out.json"
run_cmd "$S" --spec bad-cmd.yaml --dir bad
expect_match "a command without {metrics_file} is refused" "has no \{metrics_file\}" "$err"
expect_eq "before anything ran" "" "$(ls bad/trials 2>/dev/null)"
run_cmd "$S" --spec bad-cmd.yaml
expect_eq "a missing --dir is a usage error" 2 "$rc"

# --- the local executor: the same wrapper as processes here
spec local "$branin {opt}" "  opt: {type: choice, values: [sgd, adam]}\n"
run_cmd "$S" --spec local.yaml --dir local --executor local --format json --tensorboard tb
expect_eq "a local sweep finishes" 0 "$rc"
expect_eq "with every trial ok" 10 "$(jq_py local/results.json "sum(t['state'] == 'ok' for t in d['trials'])")"
expect_match "and prints the best last" '"best":\{"id":[0-9]+,"value":[0-9.]+,"params":\{"x1":' "$out"
expect_eq "--tensorboard: a run per trial" 10 "$(ls -d tb/trial-* | wc -l)"
# TensorBoard's reader and its HParams plugin's protobufs (PyPI's tensorboard) read each trial back.
if [ "${LOOM_DISTCHECK:-0}" = 1 ]; then
  echo "SKIP (part): the TensorBoard reader ran in make check of the same sources (LOOM_DISTCHECK=1)"
elif tb=$("$LOOM_SRCDIR/contrib/peer-venv.sh" tensorboard tensorboard 2>peer.err); then
  run_cmd "$tb/bin/python" "$LOOM_SRCDIR/tests/train/sweep_tensorboard_check.py" tb local/results.json value
  expect_eq "--tensorboard: each trial an HParams session with its parameters and value ($out $(tail -2 <<<"$err"))" 0 "$rc"
else
  echo "SKIP (part): no tensorboard from PyPI: $(cat peer.err)"
fi

[ "${LOOM_SKIP_CLUSTER_TESTS:-0}" = 1 ] && { echo "sweep_cluster: cluster part skipped (LOOM_SKIP_CLUSTER_TESTS=1)"; finish; }
[ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ] || { echo "sweep_cluster: no local cluster, Slurm part skipped"; finish; }
sinfo -h >/dev/null 2>&1 || { fail "slurmctld at $SLURM_CONF does not answer"; finish; }
jobcomp=$(scontrol show config | awk '$1 == "JobCompLoc" { print $3 }')

# --- Branin, 12 trials, 3 at a time, as one array job
TRIALS=12 PARALLEL=3 spec branin "$branin"
run_cmd "$S" --spec branin.yaml --dir branin --format json
expect_eq "the Slurm sweep finishes" 0 "$rc"
job=$(jq_py branin/results.json "d['job']")
expect_match "as an array job" "^[0-9]+$" "$job"
expect_match "submitted with the throttle" "array job $job: trials 0-11, 3 at a time" "$err"
expect_eq "every trial ran as a task of that array" "$(seq -f "${job}_%g" 0 11 | tr '\n' ' ')" \
  "$(jq_py branin/results.json "' '.join(t['job'] for t in d['trials']) + ' '")"
sleep 1
expect_eq "Slurm's job-completion records show the 12 tasks" 12 \
  "$(grep -c "ArrayJobId=$job ArrayTaskId=" "$jobcomp" 2>/dev/null)"
echo "sweep_cluster: branin best $(jq_py branin/results.json "d['best']['value']") in 12 trials (optimum 0.398);" \
  "end -> next command $(jq_py branin/results.json "d['overhead_s']"), end -> next start $(jq_py branin/results.json "d['start_lag_s']")"
expect_eq "the next trial's command follows a trial's end within 2 s" True \
  "$(jq_py branin/results.json "d['overhead_s']['max'] <= 2")"
first=$(jq_py branin/results.json "d['best']['value']")
run_cmd "$S" --spec branin.yaml --dir branin --format json
expect_match "a finished sweep resumes as finished" "resuming .*: 12 trials done" "$err"
expect_eq "without a new job" "$job" "$(jq_py branin/results.json "d['job']")"
expect_eq "and the same best" "$first" "$(jq_py branin/results.json "d['best']['value']")"
spec other "$branin"
run_cmd "$S" --spec other.yaml --dir branin
expect_eq "another spec in the same folder is refused" 2 "$rc"
expect_match "saying so" "holds a sweep of another spec" "$err"

# --- a failing trial is reported and the sweep goes on; a killed task is a failed trial
TRIALS=6 spec failing "if mkdir $LOOM_TMP/failed-once 2>/dev/null; then echo failing on purpose; exit 3; fi; sleep 1; $branin" \
  "max_failures: 4\n"
"$S" --spec failing.yaml --dir failing --format json >failing.out 2>failing.err &
sweep=$!
for _ in $(seq 200); do [ -f failing/trials/2/start ] && break; sleep 0.1; done
scancel "$(jq_py failing/sweep.json "d['job']")_2"
wait $sweep
rc=$?
expect_eq "a sweep with a failed and a killed trial still finishes" 0 "$rc"
expect_match "the failed trial is reported" "trial [0-9]+ failed: .*exit status 3" "$(cat failing.err)"
expect_match "the killed one too" "trial 2 failed: its task ended without an exit status" "$(cat failing.err)"
expect_eq "the others are ok" 4 "$(jq_py failing/results.json "sum(t['state'] == 'ok' for t in d['trials'])")"

# --- a metric never written: one error, the array cancelled
TRIALS=8 spec nometric "echo '{\"loss\": {x1}, \"x2\": {x2}}' > {metrics_file}"
run_cmd "$S" --spec nometric.yaml --dir nometric
expect_eq "a metric no trial writes stops the sweep" 1 "$rc"
expect_match "with one clear error" "stopped: [3-9] trials failed .*metric 'value' is not in the metrics file" "$err"
nj=$(jq_py nometric/sweep.json "d['job']")
sleep 1
expect_eq "and the rest of the array is cancelled" "" "$(squeue -h -j "$nj" 2>/dev/null)"

# --- interrupted, then resumed: finished trials are not run again
TRIALS=6 spec slow "sleep 1; $branin"
"$S" --spec slow.yaml --dir slow >slow.out 2>slow.err &
sweep=$!
for _ in $(seq 300); do [ -f slow/trials/1/result.json ] && break; sleep 0.1; done
kill -TERM $sweep
wait $sweep
expect_eq "an interrupted sweep exits 1" 1 "$?"
expect_match "and says how to resume" "interrupted: the sweep resumes with the same --spec and --dir" "$(cat slow.err)"
before=$(cat slow/trials/0/start)
run_cmd "$S" --spec slow.yaml --dir slow --format json
expect_eq "the resumed sweep finishes" 0 "$rc"
expect_match "from where it stopped" "resuming .*: [1-9] trials done" "$err"
expect_eq "all six trials ok" 6 "$(jq_py slow/results.json "sum(t['state'] == 'ok' for t in d['trials'])")"
expect_eq "trial 0 was not run again" "$before" "$(cat slow/trials/0/start)"
finish
