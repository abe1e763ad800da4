#!/usr/bin/env bash
# sweep_figures.sh — issue 18's sweep figures: Branin in 24 trials, loom-sweep's Bayesian
# optimisation against random search (the peer, same trials, same seeds), median of 5 seeds'
# best, against the optimum 0.398 (target <= 0.5); then the sweep overhead on the local cluster
# (SLURM_CONF set): seconds from a trial's end to the next trial's command and start (target <= 2 s).
set -u
S=${LOOM_BUILDDIR:-.}/loom-sweep
[ -x "$S" ] || { echo "sweep_figures: loom-sweep not built, skipped"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/branin.sh" <<'SH'
awk -v x="$1" -v y="$2" 'BEGIN { pi = atan2(0, -1); b = 5.1 / (4 * pi * pi); c = 5 / pi; t = 1 / (8 * pi)
  printf "{\"value\": %.9f}\n", (y - b * x * x + c * x - 6) ^ 2 + 10 * (1 - t) * cos(x) + 10 }' >"$3"
SH
spec() {  # METHOD SEED PARALLEL
  printf 'command: bash %s/branin.sh {x1} {x2} {metrics_file}\nmetric: value\nmethod: %s\nseed: %s\ntrials: 24\nparallel: %s\nparameters:\n  x1: {type: float, min: -5, max: 10}\n  x2: {type: float, min: 0, max: 15}\n' \
    "$tmp" "$1" "$2" "$3"
}
best() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['best']['value'])" "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for method in bayes random; do
  for seed in 1 2 3 4 5; do
    spec $method $seed 1 >"$tmp/$method-$seed.yaml"
    "$S" --spec "$tmp/$method-$seed.yaml" --dir "$tmp/$method-$seed" --executor local >/dev/null 2>&1 || echo "sweep_figures: $method seed $seed failed"
    best "$tmp/$method-$seed/results.json"
  done >"$tmp/$method.best"
done
b=$(median <"$tmp/bayes.best")
r=$(median <"$tmp/random.best")
echo "sweep: branin, 24 trials, median best of 5 seeds: loom-sweep bayes $b, random search (peer) $r," \
  "ratio $(awk -v b="$b" -v r="$r" 'BEGIN { printf "%.2f", r / b }')x; optimum 0.398, target <= 0.5:" \
  "$(awk -v b="$b" 'BEGIN { print (b <= 0.5 ? "met" : "missed") }')"
echo "sweep: bayes per seed: $(tr '\n' ' ' <"$tmp/bayes.best")| random: $(tr '\n' ' ' <"$tmp/random.best")"
if [ -n "${SLURM_CONF:-}" ] && sinfo -h >/dev/null 2>&1; then
  spec bayes 1 2 >"$tmp/cluster.yaml"
  "$S" --spec "$tmp/cluster.yaml" --dir "$tmp/cluster" 2>/dev/null | grep -E "from a trial's end" | sed 's/^/sweep (slurm array, 24 trials, 2 at a time): /'
else
  echo "sweep: overhead on Slurm skipped (no SLURM_CONF)"
fi
