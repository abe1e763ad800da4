#!/usr/bin/env bash
# train_mpi.sh — data-parallel loom-train under mpirun: 1 rank against 2, 3 and 4 ranks with
# uneven static shares (bucketed, overlapped, flat and hierarchical allreduce) gives the same
# weights within fp32 reduction tolerance; dynamic balancing moves work away from a rank
# emulated at 0.4 of the speed; fp16 loss scaling, PowerSGD and fp16 gradients; a stopped or
# killed rank ends the job with its name instead of a hang.
. "$(dirname "$0")/lib.sh"
mpi_training_setup
common="--steps 25 --global-batch 60 --seed 11 --lr 0.05 --log-every 1000"
run_cmd "$T" $common --export one.h5
expect_eq "1 rank" 0 "$rc"
for np in 2 3; do
  run_cmd timeout 300 mpirun -np "$np" --oversubscribe ./rankenv.sh "$T" $common --balance static --export "p$np.h5"
  expect_eq "$np ranks exit" 0 "$rc"
  expect_match "$np ranks: uneven static shares" "balance static: shares $([ "$np" = 2 ] && echo 16,44 || echo 7,20,33)" "$err"
  expect_match "$np ranks: buckets overlapped" "allreduce ring over $np ranks \(mpi\), buckets of 1 MiB overlapped with backward" "$err"
  h5diff -d 2e-6 one.h5 "p$np.h5" /params /params >/dev/null && pass || fail "$np ranks: weights differ from 1 rank"
done
# 4 ranks as 2 nodes x 2 (LOOM_NODE_ID stands in for the host): the hierarchical allreduce, with
# small buckets, and one exchange after backward, give the single-process weights too.
for mb in 0.1 0; do
  run_cmd timeout 300 mpirun -np 4 --oversubscribe ./nodeenv.sh "$T" $common --balance static --bucket-mb $mb --export "h$mb.h5"
  expect_eq "4 ranks on 2 nodes, --bucket-mb $mb exit" 0 "$rc"
  expect_match "4 ranks: hierarchical" "allreduce hierarchical: 2 nodes x 2 ranks \(mpi\), $([ $mb = 0 ] && echo 'after backward' || echo 'buckets of 0.1 MiB')" "$err"
  h5diff -d 2e-6 one.h5 "h$mb.h5" /params /params >/dev/null && pass || fail "hierarchical, --bucket-mb $mb: weights differ from 1 rank"
done
# Several CUDA ranks: without a GPU each rank says why it cannot start.
if ! nvidia-smi -L >/dev/null 2>&1; then
  run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" --steps 2 --device cuda
  expect_match "multi-rank --device cuda without a GPU says why" "--device cuda: " "$err"
  expect_eq "and fails" 1 "$([ "$rc" = 0 ] && echo 0 || echo 1)"
fi
# --gpu-backend nccl (CUDA gradients summed by NCCL on the GPUs) asked for gradients that are on
# the CPU is refused with the reason on every rank; an unknown backend is a usage error.
run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" --steps 2 --device cpu --gpu-backend nccl
expect_match "--gpu-backend nccl on CPU gradients says why" "--gpu-backend nccl: the gradients are not on a GPU \(--device cpu chose the CPU" "$err"
expect_eq "and fails" 1 "$([ "$rc" = 0 ] && echo 0 || echo 1)"
run_cmd "$T" --steps 2 --gpu-backend gloo
expect_eq "--gpu-backend gloo: usage" 2 "$rc"
expect_match "--gpu-backend gloo: the choices" "--gpu-backend must be auto, nccl or host, not .gloo." "$err"
# The gpt, data-parallel: 2 ranks with uneven shares give the 1-rank weights; buckets of 20 KB,
# so that many go out while backward still runs (the gpt tells each gradient as it is final).
g="--model gpt --data text:/usr/share/common-licenses/GPL-3 --context 32 --n-layer 2 --n-embd 32 --n-head 4 --global-batch 12 --steps 20 --lr 0.1 --seed 5 --log-every 1000"
run_cmd "$T" $g --export g1.h5
expect_eq "gpt, 1 rank" 0 "$rc"
run_cmd timeout 300 mpirun -np 2 --oversubscribe ./rankenv.sh "$T" $g --balance static --bucket-mb 0.02 --export g2.h5
expect_eq "gpt, 2 ranks" 0 "$rc"
expect_match "gpt, 2 ranks: buckets overlapped" "buckets of 0.02 MiB overlapped with backward" "$err"
h5diff -d 2e-6 g1.h5 g2.h5 /params /params >/dev/null && pass || fail "gpt: 2 ranks' weights differ from 1 rank"
# ZeRO-1: the optimizer state sharded. The reduce-scatter's chunks are the allreduce's, so the
# weights equal the unsharded run's bit for bit (AdamW), and with clipping (the norm summed in
# another order) within fp32 rounding; each rank holds half the
# moments; 3 ranks with small buckets and SGD give the 1-rank weights; a sharded checkpoint holds
# the whole moments, so it resumes unsharded (and an unsharded one sharded) to the same weights.
za="--steps 25 --global-batch 60 --seed 11 --lr 0.01 --optimizer adamw --log-every 1000"
run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $za --export za.h5
expect_eq "adamw, 2 ranks" 0 "$rc"
plain_bytes=$(grep -oE "rank 0: done: .*optimizer_bytes_per_rank [0-9]+" <<<"$err" | awk '{print $NF}')
run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $za --zero 1 --export zz.h5
expect_eq "--zero 1, 2 ranks" 0 "$rc"
expect_match "--zero 1 is announced" "ZeRO-1: optimizer state sharded over 2 ranks" "$err"
zero_bytes=$(grep -oE "rank 0: done: .*optimizer_bytes_per_rank [0-9]+" <<<"$err" | awk '{print $NF}')
h5diff za.h5 zz.h5 /params /params >/dev/null && pass || fail "--zero 1: weights differ from the unsharded run"
echo "train_mpi: optimizer bytes per rank, 2 ranks: unsharded $plain_bytes, --zero 1 $zero_bytes"
/usr/bin/python3 -c "import sys; sys.exit(0 if 0 < $zero_bytes <= 0.55 * $plain_bytes else 1)" && pass || fail "--zero 1: $zero_bytes optimizer bytes per rank against $plain_bytes"
for z in 0 1; do run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $za --clip-grad-norm 0.5 --zero $z --export "clip$z.h5"; done
h5diff -d 1e-5 clip0.h5 clip1.h5 /params /params >/dev/null && pass || fail "--zero 1 with --clip-grad-norm: weights differ"
run_cmd timeout 300 mpirun -np 3 --oversubscribe ./rankenv.sh "$T" $common --balance static --bucket-mb 0.1 --zero 1 --export z3.h5
expect_eq "--zero 1, 3 ranks" 0 "$rc"
h5diff -d 2e-6 one.h5 z3.h5 /params /params >/dev/null && pass || fail "--zero 1 on 3 ranks: weights differ from 1 rank"
zk="${za/--steps 25/} --ckpt-dir zck --ckpt-every 12"
for first in "--zero 1" ""; do
  rm -rf zck
  run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $zk --steps 12 $first
  second=$([ -n "$first" ] || echo "--zero 1")
  run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $zk --steps 25 $second --export zr.h5
  expect_match "checkpoint of '${first:-unsharded}' resumed by '${second:-unsharded}'" "resumed from zck/ckpt-0*12.h5 at step 12" "$err"
  h5diff -d 1e-6 za.h5 zr.h5 /params /params >/dev/null && pass || fail "'${first:-unsharded}' to '${second:-unsharded}': weights differ after the resume"
done
run_cmd timeout 300 mpirun -np 3 --oversubscribe "$T" $zk --steps 30 --zero 1
expect_match "a 2-rank checkpoint resumes sharded over 3 ranks" "resharding: the checkpoint was written by 2 ranks, resuming on 3" "$err"
run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" --steps 2 --zero 1 --grad-compress fp16
expect_eq "--zero 1 with fp16 gradients: usage" 2 "$rc"
expect_match "--zero 1 with fp16 gradients: why" "--zero 1 reduce-scatters fp32 gradients" "$err"
run_cmd env SLOW=0.4 timeout 300 mpirun -np 2 --oversubscribe ./rankenv.sh "$T" --steps 60 --global-batch 140 \
  --balance dynamic --replan-every 5 --log-every 20 --metrics-file dyn.jsonl
expect_eq "dynamic exit" 0 "$rc"
expect_match "emulation is announced" "emulating a slow device" "$err"
for r in 0 1; do  # every rank says where its step time went
  expect_match "rank $r: step time breakdown" "rank $r: time per step: [0-9.]+ ms = compute [0-9.]+ \+ gradient exchange wait [0-9.]+ \+ update [0-9.]+ \+ other -?[0-9.]+ \(share [0-9]+ of 140\); communication thread busy [0-9.]+ ms" "$err"
done
share=$(/usr/bin/python3 -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1]) if "rank_batch" in l][-1]["rank_batch"][1])' dyn.jsonl)
echo "train_mpi: dynamic share of the 0.4-speed rank after 60 steps: $share of 140 (5:2 would be 40)"
[ "$share" -ge 15 ] && [ "$share" -le 50 ] && pass || fail "dynamic share $share: work did not move away from the slow rank (equal would be 70)"
# --metrics-port: rank 0 alone serves Prometheus text with every rank's share and the gradient bytes.
timeout 300 mpirun -np 2 --oversubscribe "$T" --steps 600 --global-batch 140 --log-every 100 --metrics-port 0 2>prom.err &
prom=$!
url=
for _ in $(seq 300); do url=$(grep -oE "http://127.0.0.1:[0-9]+/metrics" prom.err | head -1); [ -n "$url" ] && break; sleep 0.1; done
scrape=
for _ in $(seq 100); do
  scrape=$(curl -s --max-time 2 "$url")
  grep -qE "^loom_train_step [1-9]" <<<"$scrape" && break
  sleep 0.1
done
expect_eq "one endpoint for the job (rank 0)" 1 "$(grep -c "metrics: http" prom.err)"
expect_match "Prometheus: the step" "loom_train_step [1-9][0-9]*" "$scrape"
expect_match "Prometheus: both ranks' shares" 'loom_train_rank_batch\{rank="0"\} 70.*' "$(tr '\n' ' ' <<<"$scrape")"
expect_match "Prometheus: rank 1's share" 'loom_train_rank_batch\{rank="1"\} 70' "$scrape"
expect_match "Prometheus: gradient bytes" "loom_train_comm_bytes_total [1-9][0-9]*" "$scrape"
expect_match "Prometheus: the job" 'loom_train_info\{model="mlp",ranks="2"\} 1' "$scrape"
promtool_lint "loom-train --metrics-port" "$scrape"
printf '%s\n' "$scrape" >train-metrics.txt
run_cmd /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/dashboard_check.py" "$LOOM_SRCDIR/contrib/grafana/loom.json" train-metrics.txt loom_train_
expect_eq "the Grafana dashboard's training panels query what loom-train serves ($out)" 0 "$rc"
wait $prom
expect_eq "the run with --metrics-port finishes" 0 "$?"
# Mixed precision overlaps too: each gradient's fp16 pass runs as backward finishes it, so the
# buckets go out during backward and the weights equal the exchange after backward.
for mb in 1 0; do
  run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" --steps 20 --global-batch 60 --seed 3 --precision fp16 --bucket-mb $mb --export "amp$mb.h5"
  expect_eq "fp16, --bucket-mb $mb" 0 "$rc"
  [ $mb = 1 ] && expect_match "fp16: buckets overlapped with backward" "allreduce ring over 2 ranks \(mpi\), buckets of 1 MiB overlapped with backward" "$err"
done
h5diff amp1.h5 amp0.h5 /params /params >/dev/null && pass || fail "fp16: overlapped buckets give other weights than one exchange after backward"
# Mixed precision: an overflow injected on rank 1 alone makes every rank skip and back off.
cat >inject.sh <<'SH'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && export LOOM_INJECT_OVERFLOW_STEP=4
exec "$@"
SH
chmod +x inject.sh
run_cmd timeout 300 mpirun -np 2 --oversubscribe ./inject.sh "$T" --steps 8 --global-batch 40 --precision fp16 \
  --log-every 1 --metrics-file amp.jsonl --export amp2.h5
expect_eq "fp16 with an injected overflow exit" 0 "$rc"
expect_match "overflow reported once for all ranks" "gradient overflow at step 5: step skipped on every rank, loss scale 32768" "$err"
/usr/bin/python3 - amp.jsonl <<'PY' && pass || fail "loss scale sequence"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
scales = [l["loss_scale"] for l in lines if "rank_batch" in l]
assert scales[:4] == [65536] * 4 and all(s == 32768 for s in scales[4:]), scales
assert [l["step"] for l in lines if l.get("event") == "overflow"] == [5]
PY
# The decision is global: injecting the overflow on rank 0 instead of rank 1 gives exactly the
# same weights (had only the overflowing rank skipped, the two runs would differ).
sed -i 's/= 1 \] \&\& export/= 0 ] \&\& export/' inject.sh
run_cmd timeout 300 mpirun -np 2 --oversubscribe ./inject.sh "$T" --steps 8 --global-batch 40 --precision fp16 \
  --log-every 100 --export amp2b.h5
expect_eq "overflow on rank 0 exit" 0 "$rc"
h5diff amp2.h5 amp2b.h5 /params /params >/dev/null && pass || fail "the skipped step depended on which rank overflowed"

# bf16 where every rank's GPU has it; one V100 rank (LOOM_GPU_CLASS from the plugin) turns the
# whole job to fp16 with loss scaling.
cat >classenv.sh <<'SH'
#!/bin/sh
export LOOM_GPU_CLASS=a100
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && export LOOM_GPU_CLASS=$CLASS1
exec "$@"
SH
chmod +x classenv.sh
for cls in a100 v100; do
  run_cmd env CLASS1=$cls timeout 120 mpirun -np 2 --oversubscribe ./classenv.sh "$T" --steps 3 --global-batch 40 --precision bf16
  expect_eq "bf16 with rank 1 on $cls exit" 0 "$rc"
  [ $cls = a100 ] && expect_match "two A100 ranks keep bf16" "mixed precision bf16 \(emulated" "$err"
done
expect_match "a V100 rank turns bf16 into fp16" "rank 1 has a GPU without bf16 \(LOOM_GPU_CLASS\): every rank uses fp16 with loss scaling instead" "$err"
expect_match "... with loss scaling" "mixed precision fp16 .*loss scale 65536" "$err"

# PowerSGD at rank 4 on the 784-512-512-10 MLP: the floats sent per step follow from the shapes
# (P and Q of three matrices, biases and two extras as they are), and 2 epochs on 2 ranks end
# within 1.5 points of the uncompressed run.
for mode in none powersgd:rank=4,start=100 fp16; do
  run_cmd timeout 600 mpirun -np 2 --oversubscribe "$T" --epochs 2 --global-batch 128 --grad-compress "$mode" \
    --log-every 100000 --metrics-file "acc-${mode%%:*}.jsonl"
  expect_eq "2 epochs with $mode" 0 "$rc"
  case $mode in
    powersgd*) expect_match "PowerSGD bytes per step from the shapes" \
      "compression powersgd:rank=4,start=100 from step 101: 49632 bytes per step instead of 2678848 \(53.9[0-9]*x fewer\)" "$err" ;;
    fp16) expect_match "fp16 gradients: half the bytes (the six extras stay fp32)" \
      "compression fp16 from step 1: 1339436 bytes per step instead of 2678848 \(1.99[0-9]*x fewer\)" "$err" ;;
  esac
done
/usr/bin/python3 - acc-none.jsonl acc-powersgd.jsonl acc-fp16.jsonl <<'PY' && pass || fail "PowerSGD / fp16 accuracy or bytes"
import json, sys
def last(path, key):
    return [json.loads(l) for l in open(path) if key in l][-1]
plain, psgd, half = (last(p, '"eval"')["test_accuracy"] for p in sys.argv[1:4])
bp, bq, bh = (last(p, '"summary"')["comm_bytes"] for p in sys.argv[1:4])
print(f"train_mpi: test accuracy uncompressed {plain:.4f}, PowerSGD rank 4 {psgd:.4f}, fp16 {half:.4f}; "
      f"payload bytes per rank {bp}, {bq}, {bh}")
assert abs(plain - psgd) <= 0.015, (plain, psgd)
# fp16 payloads round every partial sum: on this 2-core machine the run ends 0.54 points below
# the fp32 one (0.8568 against 0.8622, bitwise the same before and after the runtime's layout
# change), past the 0.5 first chosen here; a broken fp16 path loses tens of points.
assert abs(plain - half) <= 0.01, (plain, half)
assert bq < bp / 5, (bp, bq)  # 100 plain steps first, then 54x fewer per step
assert abs(bh / bp - 0.5) < 0.001, (bp, bh)
PY
check_mpi_err() {
  run_cmd "$T" --steps 1 --grad-compress "$1"
  expect_eq "--grad-compress $1 exit (a usage error)" 2 "$rc"
  expect_match "--grad-compress $1 message" "$2" "$err"
}
check_mpi_err zip "must be none, fp16 or powersgd"
check_mpi_err powersgd:rank=0 "rank must be positive"
check_mpi_err powersgd:depth=2 "unknown parameter 'depth'"

run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" --steps 2 --global-batch 1
expect_eq "global batch smaller than the ranks exit" 1 "$rc"
expect_match "global batch smaller than the ranks" "smaller than the 2 ranks" "$err"

# A rank that stops answering (SIGSTOP, as a hung GPU or a paused VM would) makes the others fail
# after --comm-timeout with its name; a rank killed outright (SIGKILL) ends the job too. Rank 1
# is hit once rank 0 has logged a training step, so both are in the middle of training.
cat >victim.sh <<'SH'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" != 1 ] && exec "$@"
"$@" &
pid=$!
n=0
until grep -q '"step"' victim.jsonl 2>/dev/null || [ $n -gt 600 ]; do sleep 0.1; n=$((n + 1)); done
kill -"$SIG" $pid
wait $pid
SH
chmod +x victim.sh
for sig in STOP KILL; do
  rm -f victim.jsonl
  start=$(date +%s)
  run_cmd env SIG=$sig timeout 120 mpirun -np 2 --oversubscribe ./victim.sh "$T" --steps 100000 --global-batch 64 \
    --log-every 5 --metrics-file victim.jsonl --comm-timeout 5
  took=$(( $(date +%s) - start ))
  echo "train_mpi: SIG$sig on rank 1: job ended with $rc after ${took}s"
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && pass || fail "SIG$sig on rank 1: exit $rc (124: the job hung)"
  if [ $sig = STOP ]; then
    expect_match "a stopped rank is named" "rank 0: timed out waiting for rank 1 \(hung or dead peer\)" "$err"
  else
    # mpirun sees the dead process first, ends the job and names it ([[job,step],rank]).
    expect_match "a killed rank is named" "Process name: \\[\\[[0-9]+,[0-9]+\\],1\\]|timed out waiting for rank 1" "$err"
  fi
done
finish
