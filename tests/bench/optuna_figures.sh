#!/usr/bin/env bash
# optuna_figures.sh — loom-sweep's GP/EI against Optuna's TPE (issue 38 item 5): Branin, Hartmann-6
# and a 4-D Rosenbrock, 24 trials, 10 seeds each, at parallel 1 and 4, --executor local. Both read
# the same spec and run the same command (objectives.sh); prints the median best, its spread (the
# seeds' quartiles) and whether Loom's median is <= Optuna's. Peer: Debian's python3-optuna, TPE
# with its constant liar at parallel 4 (optuna_peer.py). Trials take milliseconds, so at parallel 4
# which trials are pending when loom-sweep proposes depends on timing: its figures vary by run.
# OPTUNA_SEEDS, OPTUNA_PARALLEL ("1 4") and OPTUNA_FUNCTIONS narrow a run; OPTUNA_VERBOSE=1 prints
# each seed's best.
set -u
S=${LOOM_BUILDDIR:-.}/loom-sweep
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$S" ] || { echo "optuna_figures: loom-sweep not built, skipped"; exit 0; }
/usr/bin/python3 -c 'import optuna' 2>/dev/null || { echo "optuna_figures: python3-optuna missing, skipped"; exit 0; }
SEEDS=${OPTUNA_SEEDS:-10}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec() {  # FUNCTION SEED PARALLEL
  local f=$1 dims lo=0 hi=1 i
  case $f in branin) dims=2 ;; hartmann6) dims=6 ;; rosenbrock) dims=4 lo=-2 hi=2 ;; esac
  printf 'command: bash %s/objectives.sh %s {metrics_file}' "$here" "$f"
  for i in $(seq 1 $dims); do printf ' {x%d}' "$i"; done
  printf '\nmetric: value\ngoal: minimize\nmethod: bayes\nseed: %s\ntrials: 24\nparallel: %s\nparameters:\n' "$2" "$3"
  for i in $(seq 1 $dims); do
    [ "$f" = branin ] && { [ "$i" = 1 ] && lo=-5 hi=10 || lo=0 hi=15; }
    printf '  x%d: {type: float, min: %s, max: %s}\n' "$i" "$lo" "$hi"
  done
}
loom_best() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['best']['value'])" "$1"; }
quartiles() { sort -g | awk '{ v[NR] = $1 } END { printf "%.4g %.4g %.4g", v[int((NR + 3) / 4)], v[int((NR + 1) / 2)], v[int((3 * NR + 3) / 4)] }'; }
met=0 all=0
for par in ${OPTUNA_PARALLEL:-1 4}; do
  for f in ${OPTUNA_FUNCTIONS:-branin hartmann6 rosenbrock}; do
    for seed in $(seq 1 "$SEEDS"); do
      spec "$f" "$seed" "$par" >"$tmp/s.yaml"
      rm -rf "$tmp/run"
      if "$S" --spec "$tmp/s.yaml" --dir "$tmp/run" --executor local >/dev/null 2>&1; then
        loom_best "$tmp/run/results.json" >>"$tmp/loom-$f-$par"
      else
        echo "optuna_figures: loom-sweep $f seed $seed parallel $par failed"
      fi
      /usr/bin/python3 -W ignore "$here/optuna_peer.py" "$tmp/s.yaml" >>"$tmp/optuna-$f-$par" ||
        echo "optuna_figures: optuna $f seed $seed parallel $par failed"
    done
    [ -n "${OPTUNA_VERBOSE:-}" ] && echo "  loom: $(tr "\n" " " <"$tmp/loom-$f-$par")/ optuna: $(tr "\n" " " <"$tmp/optuna-$f-$par")"
    read -r l25 l50 l75 < <(quartiles <"$tmp/loom-$f-$par")
    read -r o25 o50 o75 < <(quartiles <"$tmp/optuna-$f-$par")
    verdict=$(awk -v l="$l50" -v o="$o50" 'BEGIN { print (l <= o ? "met" : "missed") }')
    all=$((all + 1)); [ "$verdict" = met ] && met=$((met + 1))
    echo "sweep vs optuna: $f, 24 trials, parallel $par, $SEEDS seeds: loom-sweep median best $l50 (quartiles $l25..$l75)," \
      "Optuna TPE (peer) $o50 ($o25..$o75); target loom <= optuna: $verdict"
  done
done
echo "sweep vs optuna: $met of $all comparisons met"
