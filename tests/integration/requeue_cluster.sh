#!/usr/bin/env bash
# requeue_cluster.sh — the real preemption path on the local cluster: examples/train-requeue.sbatch
# with a two-minute time limit and a 60 s --signal lead time. Slurm sends SIGUSR1 before the limit,
# loom-train checkpoints and exits 75, the script requeues the job, the requeued job resumes from
# the checkpoint, and the final weights equal those of an uninterrupted run, bit for bit.
. "$(dirname "$0")/lib.sh"
require_cluster
T=$LOOM_BUILDDIR/loom-train
[ -x "$T" ] || skip "loom-train not built"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
chmod 0755 "$LOOM_TMP"
# slurmctld checks time limits every 30 s (PERIODIC_TIMEOUT) and sends the --signal at the first
# check where now + lead + 30 s reaches the end time: with --time=2 --signal=USR1@60 that is between
# 30 and 60 s into each run, so every run trains for at least ~28 s and the first one is always
# stopped when the whole run takes ~70 s, and the job ends in at most three runs. (With
# --time=1 --signal=USR1@50 the signal came at the first check, 0-30 s in: CI saw eleven runs of
# ~5 s when the requeued starts fell just before a check.) The steps are sized to ~70 s by a
# short run first: 7000 steps took ~80 s on the machines this was written on and 37 s on a faster
# one, which then finished before any signal. Not more than ~70 s: each run past the second adds a
# run and a requeue (~50 s); CI once saw four runs and 190 s when the job ran at half the rate.
rate=$("$T" --steps 400 --global-batch 256 --seed 9 --lr 0.05 --log-every 1000 2>&1 |
  sed -n 's/.*done: [0-9]* steps, \([0-9]*\) samples\/s.*/\1/p')
steps=$(((${rate:-22000} * 70 / 256 + 499) / 500 * 500))
[ "$steps" -lt 5000 ] && steps=5000
[ "$steps" -gt 40000 ] && steps=40000
echo "requeue_cluster: $steps steps (${rate:-?} samples/s alone)"
args="--steps $steps --global-batch 256 --seed 9 --lr 0.05 --log-every 1000"
"$T" $args --export "$LOOM_TMP/ref.h5" 2>"$LOOM_TMP/ref.err" &
ref=$!
jid=$(LOOM_TRAIN=$T LOOM_CKPT_DIR=$LOOM_TMP/ckpt sbatch --parsable -n1 --gpus=1 --time=2 --signal=USR1@60 \
  -o "$LOOM_TMP/job.out" "$LOOM_SRCDIR/examples/train-requeue.sbatch" $args --export "$LOOM_TMP/job.h5")
expect_match "sbatch accepted the job" "^[0-9]+$" "$jid"
state=
# A requeued job waits until its old credential expires (the local cluster sets cred_expire=20;
# releasing it earlier makes Slurm kill it: "Job credential revoked").
# Worst case three runs of 60 s, each followed by ~30 s of waiting to start again.
for _ in $(seq 420); do
  info=$(scontrol show job "$jid" 2>/dev/null)
  state=$(grep -oE "JobState=[A-Z_]+" <<<"$info" | cut -d= -f2)
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 1
done
wait $ref
expect_eq "the job completed" COMPLETED "$state"
out=$(cat "$LOOM_TMP/job.out" 2>/dev/null)
expect_match "Slurm's warning signal stopped training with a checkpoint" "stopping at step [0-9]+ on a signal, checkpoint written" "$out"
expect_match "the job requeued itself" "loom-requeue: stopped with a checkpoint; requeueing job $jid" "$out"
expect_match "the requeued job started again" "restart [1-9]" "$out"
expect_match "and resumed from the checkpoint" "resumed from $LOOM_TMP/ckpt/ckpt-[0-9]+\.h5 at step [1-9]" "$out"
h5diff "$LOOM_TMP/ref.h5" "$LOOM_TMP/job.h5" /params /params >/dev/null && pass ||
  fail "the requeued job's final weights differ from an uninterrupted run"
echo "requeue_cluster: $(grep -cE 'restart [0-9]' <<<"$out") runs of job $jid; $(grep -oE 'stopping at step [0-9]+' <<<"$out" | tr '\n' ';')"
[ "$state" = COMPLETED ] || tail -30 "$LOOM_TMP/job.out" >&2
finish
