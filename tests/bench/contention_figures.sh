#!/usr/bin/env bash
# contention_figures.sh — loom-train at --threads 2 beside a process that keeps one core busy
# (a shell loop), against --threads 1 beside the same process (the peer: what a user gets by
# giving up the second thread) and against libgomp's stock wait policy (GOMP_SPINCOUNT=300000,
# what loom-train ran with before it set a short spin). Best of REPS runs each; alone too.
set -euo pipefail
T=${LOOM_TRAIN:?set LOOM_TRAIN to the loom-train binary}
steps=${STEPS:-400}
reps=${REPS:-3}
rate() {  # best samples/s of $reps runs of: loom-train ARGS (environment from the caller)
  local best=0 r
  for _ in $(seq "$reps"); do
    r=$("$T" --steps "$steps" --global-batch 128 --log-every 1000000 "$@" 2>&1 | grep -oE "done: [0-9]+ steps, [0-9]+ samples/s" | grep -oE "[0-9]+ samples" | grep -oE "[0-9]+")
    [ "$r" -gt "$best" ] && best=$r
  done
  echo "$best"
}
alone2=$(rate --threads 2)
alone2_stock=$(GOMP_SPINCOUNT=300000 rate --threads 2)
alone1=$(rate --threads 1)
sh -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null' EXIT
sleep 0.3
b2=$(rate --threads 2)
b2_stock=$(GOMP_SPINCOUNT=300000 rate --threads 2)
b1=$(rate --threads 1)
b2_blas=$(rate --threads 2 --gemm openblas)
kill $busy
ratio() { /usr/bin/python3 -c "import sys; print(f'{$1 / $2:.2f}')"; }
echo "contention: MLP 784-512-512-10, batch 128, $steps steps, best of $reps, $(nproc) cores"
echo "  alone:        --threads 2 $alone2 samples/s (stock libgomp spin $alone2_stock), --threads 1 $alone1"
echo "  beside a busy process (one core taken):"
echo "    --threads 2, loom's short spin (GOMP_SPINCOUNT=1000) $b2 samples/s -> $(ratio "$b2" "$b1")x of --threads 1 ($b1)"
echo "    --threads 2, libgomp's stock spin (300000)           $b2_stock samples/s -> $(ratio "$b2_stock" "$b1")x of --threads 1"
echo "    --threads 2, --gemm openblas                         $b2_blas samples/s -> $(ratio "$b2_blas" "$b1")x of --threads 1"
echo "  short spin against stock spin: alone $(ratio "$alone2" "$alone2_stock")x, beside the busy process $(ratio "$b2" "$b2_stock")x"
