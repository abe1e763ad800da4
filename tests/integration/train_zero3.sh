#!/usr/bin/env bash
# train_zero3.sh — loom-train --zero 3 under mpirun: parameters, gradients and optimizer state
# sharded, each layer gathered as it is used. On 2 and 4 ranks (4 oversubscribed), with uneven
# static and dynamic shares, recompute and fp16, the gpt's weights after 40 steps are those of the
# unsharded run (relative norm difference <= 1e-5 per tensor); the mlp's too. A 4-rank --zero 3
# checkpoint resumes on 2 ranks with --zero 1 and on 1 rank with --zero 0 to the uninterrupted
# run's weights. Model-state bytes per rank are a quarter on 4 ranks, and the peak memory of a
# 227 MB gpt's ranks falls below ZeRO-1's; --shard-by memory cuts the parts by LOOM_DEVICE_MEMORY. Bad input: PowerSGD or fp16 gradients, --qat, ranks
# that disagree on --zero, a checkpoint of another model.
. "$(dirname "$0")/lib.sh"
mpi_training_setup
# The largest relative difference ||a - b|| / ||b|| over the tensors of /params; fails above $3.
cat >close.py <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert set(a["params"]) == set(b["params"]), "different parameters"
worst = max(np.linalg.norm(a["params"][k][()] - b["params"][k][()]) / max(np.linalg.norm(b["params"][k][()]), 1e-30)
            for k in b["params"])
print(f"{worst:.3g}")
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
PY
close() {  # close WHAT A.h5 B.h5
  local d
  d=$(/usr/bin/python3 close.py "$2" "$3" 1e-5) && pass || fail "$1: weights differ from the unsharded run (relative $d)"
  echo "train_zero3: $1: relative difference $d"
}
/usr/bin/python3 -c "
import random; random.seed(1)
w = 'the cat sat on a mat dog ran far away and then slept'.split()
open('t.txt', 'w').write(' '.join(random.choice(w) for _ in range(30000)))"
g="--model gpt --data text:t.txt --context 32 --n-layer 2 --n-embd 32 --n-head 4 --lr 0.1 --global-batch 12 --steps 40 --seed 3 --log-every 1000 --threads 1"
run_cmd "$T" $g --export one.h5
expect_eq "gpt, 1 rank" 0 "$rc"
run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $g --zero 3 --export z2.h5 --metrics-file z2.jsonl
expect_eq "gpt --zero 3, 2 ranks" 0 "$rc"
expect_match "--zero 3 is announced" "ZeRO-3: parameters, gradients and optimizer state sharded over 2 ranks; each layer's parameters allgathered" "$err"
close "2 ranks" z2.h5 one.h5
# --shard-by memory: parts in proportion to LOOM_DEVICE_MEMORY (2:1): the same weights, and rank 0
# holds 2/3 of the state where the even run's holds 1/2.
mem() { echo "-np 1 -x LOOM_DEVICE_MEMORY=$1 $T $g --zero 3 --shard-by memory --export zm.h5 --metrics-file zm.jsonl"; }
run_cmd timeout 300 mpirun --oversubscribe $(mem 42949672960) : $(mem 21474836480)
expect_eq "gpt --zero 3 --shard-by memory, 2 ranks of memory 2:1" 0 "$rc"
expect_match "--shard-by memory is announced" "sharded over 2 ranks in parts by device memory \(2:1, LOOM_DEVICE_MEMORY\)" "$err"
close "--shard-by memory 2:1" zm.h5 one.h5
held() { /usr/bin/python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["param_bytes_per_rank"])' "$1"; }
expect_eq "--shard-by memory: rank 0 holds 4/3 of the even part ($(held zm.jsonl) against $(held z2.jsonl))" 1 \
  "$(awk -v a="$(held zm.jsonl)" -v b="$(held z2.jsonl)" 'BEGIN { print (a / b > 1.32 && a / b < 1.34) ? 1 : 0 }')"
run_cmd timeout 300 mpirun --oversubscribe -np 1 -x LOOM_DEVICE_MEMORY=42949672960 $T $g --zero 3 --shard-by memory : \
  -np 1 $T $g --zero 3 --shard-by memory
expect_ne "--shard-by memory without LOOM_DEVICE_MEMORY on a rank" 0 "$rc"
expect_match "--shard-by memory: the rank without it named" "rank 1 has no positive LOOM_DEVICE_MEMORY" "$err"
run_cmd "$T" $g --zero 1 --shard-by memory
expect_eq "--shard-by memory needs --zero 3: a usage error" 2 "$rc"
run_cmd "$T" $g --zero 3 --export z1.h5
expect_match "--zero 3 on one rank: nothing to shard" "--zero 3 on one rank: there is nothing to shard" "$err"
h5diff z1.h5 one.h5 /params /params >/dev/null && pass || fail "--zero 3 on one rank: weights differ"
run_cmd "$T" $g --clip-grad-norm 0.5 --export one_clip.h5
for extra in "--balance static" "--balance dynamic --replan-every 5 --clip-grad-norm 0.5"; do
  run_cmd env SLOW=0.5 timeout 300 mpirun -np 4 --oversubscribe ./rankenv.sh "$T" $g --zero 3 $extra --export z4.h5 --metrics-file z4.jsonl
  expect_eq "gpt --zero 3, 4 ranks, $extra" 0 "$rc"
  close "4 ranks, $extra" z4.h5 "$([[ $extra == *clip* ]] && echo one_clip.h5 || echo one.h5)"
done
expect_match "4 ranks: dynamic shares re-planned" "re-planned shares" "$err"
# 4 ranks as 2 nodes x 2 (LOOM_NODE_ID stands in for the host): the gathers and reduce-scatters
# go inside each node and across the nodes, as the hierarchical allreduce does; ZeRO-1's too.
for z in 1 3; do
  run_cmd timeout 300 mpirun -np 4 --oversubscribe ./nodeenv.sh "$T" $g --balance static --zero $z --export "hier$z.h5"
  expect_eq "--zero $z, 2 nodes x 2 ranks" 0 "$rc"
  close "--zero $z, 2 nodes x 2 ranks" "hier$z.h5" one.h5
done
expect_match "--zero 3 across nodes is hierarchical" "as backward finishes it; hierarchical: 2 nodes x 2 ranks \(mpi\)" "$err"
# Mixed precision and recompute: the same fp16/bf16 rounding, loss scaling and recomputed blocks as
# the unsharded run on the same ranks.
for p in fp16 bf16; do
  for z in 0 3; do
    run_cmd timeout 300 mpirun -np 4 --oversubscribe ./rankenv.sh "$T" $g --balance static --zero $z --recompute --precision $p --export "${p}_$z.h5"
    expect_eq "--zero $z --recompute --precision $p, 4 ranks" 0 "$rc"
  done
  close "4 ranks, --recompute --precision $p" "${p}_3.h5" "${p}_0.h5"
done
# fp16 gradients: each layer's reduce-scatter in fp16, as the unsharded run's allreduce sums them.
for z in 0 3; do
  run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $g --zero $z --grad-compress fp16 --export "g16_$z.h5"
  expect_eq "--zero $z --grad-compress fp16, 2 ranks" 0 "$rc"
done
expect_match "--zero 3 says its gradients travel in fp16" "its gradients reduce-scattered in fp16 as backward finishes it" "$err"
close "2 ranks, --grad-compress fp16" g16_3.h5 g16_0.h5
# AdamW: on 2 ranks the sums are the same as the unsharded run's (one addition each).
for z in 0 3; do run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $g --optimizer adamw --lr 0.003 --zero $z --export "adam_$z.h5"; done
close "AdamW, 2 ranks" adam_3.h5 adam_0.h5
# The mlp on 3 ranks with uneven shares.
m="--steps 25 --global-batch 60 --seed 11 --lr 0.05 --log-every 1000"
run_cmd "$T" $m --export m1.h5
run_cmd timeout 300 mpirun -np 3 --oversubscribe ./rankenv.sh "$T" $m --balance static --zero 3 --export m3.h5
expect_eq "mlp --zero 3, 3 ranks" 0 "$rc"
close "mlp, 3 ranks" m3.h5 m1.h5
# Model-state bytes per rank: parameters, gradients and moments each a quarter on 4 ranks.
run_cmd timeout 300 mpirun -np 4 --oversubscribe "$T" $g --metrics-file z0.jsonl
/usr/bin/python3 - z0.jsonl z4.jsonl <<'PY' && pass || fail "--zero 3: the summary's bytes per rank are not a quarter of the unsharded run's"
import json, sys
s0, s3 = ([json.loads(l) for l in open(f) if '"summary"' in l][-1] for f in sys.argv[1:3])
keys = ["param_bytes_per_rank", "grad_bytes_per_rank", "optimizer_bytes_per_rank"]
state0, state3 = (sum(s[k] for k in keys) for s in (s0, s3))
print(f"train_zero3: model-state bytes per rank on 4 ranks: unsharded {state0}, --zero 3 {state3} ({state3 / state0:.3f}x)")
sys.exit(0 if all(0 < s3[k] <= 0.26 * s0[k] for k in keys) and s3["peak_memory_bytes"] > 0 else 1)
PY
# Stopped at step 20 on 4 ranks with --zero 3; resumed on 2 with --zero 1 and on 1 with --zero 0.
k="$g --ckpt-every 20"
run_cmd timeout 300 mpirun -np 4 --oversubscribe "$T" ${k/--steps 40/--steps 20} --zero 3 --ckpt-dir ck2
expect_eq "--zero 3 to step 20" 0 "$rc"
cp -r ck2 ck1
run_cmd timeout 300 mpirun -np 4 --oversubscribe "$T" $g --zero 3 --export full.h5
run_cmd timeout 300 mpirun -np 2 --oversubscribe "$T" $k --zero 1 --ckpt-dir ck2 --resume auto --export r2.h5
expect_match "resumed on 2 ranks with --zero 1" "resharding: the checkpoint was written by 4 ranks, resuming on 2" "$err"
close "4 ranks --zero 3 resumed on 2 ranks --zero 1" r2.h5 full.h5
run_cmd timeout 300 "$T" $k --ckpt-dir ck1 --resume auto --export r1.h5
expect_match "resumed on 1 rank with --zero 0" "resumed from ck1/ckpt-0000000020.h5 at step 20" "$err"
close "4 ranks --zero 3 resumed on 1 rank --zero 0" r1.h5 full.h5
# Bad input.
run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" $g --zero 3 --grad-compress powersgd
expect_eq "--zero 3 with PowerSGD: usage" 2 "$rc"
expect_match "--zero 3 with PowerSGD: why" "--zero 3 reduce-scatters each layer's gradients \(fp32, or fp16 with --grad-compress fp16\): it does not combine with --grad-compress powersgd" "$err"
run_cmd "$T" --steps 2 --zero 3 --qat
expect_match "--zero 3 with --qat: why" "--zero 3 does not combine with --qat" "$err"
run_cmd "$T" --steps 2 --zero 2
expect_match "--zero 2: why" "--zero must be 0, 1 \(the optimizer state sharded\) or 3" "$err"
run_cmd "$T" --steps 2 --offload optimizer
expect_match "--offload optimizer without a sharded optimizer: why" "--offload optimizer moves the sharded optimizer state to host memory: it needs --zero 1 or 3" "$err"
run_cmd "$T" --steps 2 --zero 1 --offload disk
expect_match "--offload disk: refused" "--offload" "$err"
expect_eq "--offload disk: usage" 2 "$rc"
run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" $g --steps 2 --zero 3 --offload optimizer
expect_match "--offload optimizer on CPU ranks says there is nothing to move" "the ranks train on the CPU, where the optimizer state is in host memory already" "$err"
cat >disagree.sh <<'SH'
#!/bin/sh
[ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && exec "$@" --zero 1
exec "$@" --zero 3
SH
chmod +x disagree.sh
run_cmd timeout 60 mpirun -np 2 --oversubscribe ./disagree.sh "$T" $g
expect_match "ranks that disagree on --zero: named" "the ranks disagree on --zero: rank 1 has 1, rank 0 has 3" "$err"
expect_ne "and the job fails" 0 "$rc"
run_cmd timeout 60 mpirun -np 2 --oversubscribe "$T" ${g/--n-embd 32/--n-embd 48} --zero 3 --ckpt-dir ck1 --resume auto
expect_match "a checkpoint of another model is refused" "checkpoint of another configuration" "$err"
expect_ne "and the job fails" 0 "$rc"
# Peak memory per rank at 4 ranks for a gpt of 56.8M parameters (227 MB): ZeRO-1 against ZeRO-3.
# Rank 0 also evaluates (a forward over 64 windows): the other ranks' peak is the training's.
big="--model gpt --data text:t.txt --context 32 --n-layer 8 --n-embd 768 --n-head 12 --optimizer adamw --lr 0.0003 --global-batch 8 --steps 3 --seed 3 --log-every 1000 --threads 1"
for z in 1 3; do
  run_cmd timeout 600 mpirun -np 4 --oversubscribe ./peakof.sh "peak$z" "$T" $big --zero $z
  expect_eq "227 MB gpt, --zero $z, 4 ranks" 0 "$rc"
  peak[$z]=$(cat "peak$z".[123] | sort -n | tail -1)  # the largest but rank 0's
done
echo "train_zero3: peak memory of the non-evaluating ranks, 227 MB gpt on 4 ranks: --zero 1 ${peak[1]} KB, --zero 3 ${peak[3]} KB"
[ "${peak[3]:-0}" -gt 0 ] && [ "${peak[3]}" -lt "${peak[1]:-0}" ] && pass || fail "--zero 3 does not lower the peak memory per rank below ZeRO-1's"
finish
