#!/usr/bin/env bash
# torch_dp.sh — loom.torch under real mpirun ranks, with Debian's PyTorch and torchvision: a plain
# training script (tests/torch/train.py) on 2 ranks with uneven static shares ends where one
# process on the same global batches ends (a ResNet-18 on Fashion-MNIST and a transformer LM);
# fp16 and PowerSGD payloads; dynamic shares that follow an emulated slow rank; and the faults:
# parameters that differ between ranks, an unused parameter, a hung rank, step() without
# backward(), a global batch smaller than the world. On the local cluster: srun --mpi=pmix.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || skip "mpirun missing"
lib=$LOOM_BUILDDIR/runtime/python/.libs/libloomtorch.so
[ -f "$lib" ] || skip "loom.torch not built (configure found no python3 or no runtime)"
/usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null || skip "python3-torch and python3-torchvision are needed"
export LOOM_TORCH_LIB=$lib PYTHONPATH=$LOOM_SRCDIR/runtime/python:$LOOM_SRCDIR/tests/torch
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
T=$LOOM_SRCDIR/tests/torch
P=/usr/bin/python3
cd "$LOOM_TMP" || exit 99
mpi() { timeout 300 mpirun -x PYTHONPATH -x LOOM_TORCH_LIB "$@"; }
# Two ranks of device weights 1 and 3 (as the plugin would set for a slow and a fast GPU).
uneven() { mpi -np 1 -x LOOM_DEVICE_WEIGHT=1 $P "$T/train.py" "$@" : -np 1 -x LOOM_DEVICE_WEIGHT=3 $P "$T/train.py" "$@"; }
field() { $P -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1" <<<"$out"; }

# In distcheck: the tarball's package and scripts work (the rest ran in make check of the same
# sources: contrib/check.sh).
if [ "${LOOM_DISTCHECK:-0}" = 1 ]; then
  run_cmd mpi -np 2 $P "$T/collectives_test.py"
  expect_eq "distcheck: collectives on 2 ranks ($out $(tail -3 <<<"$err"))" 0 "$rc"
  run_cmd mpi -np 2 $P "$T/train.py" --steps 3
  expect_eq "distcheck: 3 steps on 2 ranks ($(tail -3 <<<"$err"))" 0 "$rc"
  for f in resnet_fashion_mnist.py transformer_lm.py torch-hetero.sbatch torch-requeue.sbatch; do
    [ -f "$LOOM_SRCDIR/examples/torch/$f" ] && pass || fail "the tarball lacks examples/torch/$f"
  done
  finish
fi

# The checkout's root holds no folder that shadows PyTorch: `import torch` there is PyTorch.
run_cmd env -u PYTHONPATH sh -c "cd '$LOOM_SRCDIR' && $P -c 'import torch; print(torch.__version__, torch.__file__)'"
expect_eq "import torch from the checkout's root ($err)" 0 "$rc"
expect_no_match "import torch from the checkout's root is PyTorch, not a folder of Loom's" "^[^ ]* $LOOM_SRCDIR/" "$out"
# Either import order: loom.torch first loads PyTorch before its library (with PyPI's CUDA wheel the
# other way round lost NCCL's newer symbols); LOOM_TORCH_PYTHON names a Python with PyPI's PyTorch.
for py in $P ${LOOM_TORCH_PYTHON:-}; do
  run_cmd mpi -np 2 "$py" "$T/import_order.py"
  expect_eq "import loom.torch before torch with $py ($(tail -3 <<<"$err"))" 0 "$rc"
  expect_match "import order with $py: both ranks" "loaded before libloomtorch; allreduce ok on 2 ranks" "$out"
done
# 0. The collectives on tensors and objects, alone and on 2 and 3 ranks.
for np in 1 2 3; do
  run_cmd mpi -np $np $P "$T/collectives_test.py"
  expect_eq "collectives on $np rank(s) ($out $(tail -3 <<<"$err"))" 0 "$rc"
  expect_eq "collectives on $np rank(s): every rank's checks" "$np" "$(grep -o 'all collectives checks passed' <<<"$out" | wc -l)"
done

# fully_shard: state shares by memory (2:1, 2:1:1), batch shares by speed (1:3, 1:3:2), 30 steps =
# one process on the same global batches (SGD within 1e-5 relative; AdamW within 10x what another
# summation order makes); memory_stats in proportion; bf16 parameters with fp32 reduction;
# checkpoints across worlds; a rank that stops answering in a gather.
F=$T/fsdp_test.py
fsdp_ok() {  # WHAT NP: every rank printed its line without failures
  expect_eq "fully_shard, $1 ($(grep -o '"fails": \[[^]]*\]' <<<"$out" | sort -u | head -3) $(tail -2 <<<"$err"))" 0 "$rc"
  expect_eq "fully_shard, $1: every rank's checks" "$2" "$(grep -o '"fails": \[\]' <<<"$out" | wc -l)"
}
# Its checkpoint (after 15 steps) resumes on 3 ranks of other memory weights and shares, the
# momentum resharded; a checkpoint of another model is refused by name.
run_cmd mpi -np 1 -x LOOM_DEVICE_WEIGHT=1 $P "$F" --shard-weights 2,1 --checkpoint ck-fsdp --save-at 15 : \
  -np 1 -x LOOM_DEVICE_WEIGHT=3 $P "$F" --shard-weights 2,1 --checkpoint ck-fsdp --save-at 15
fsdp_ok "SGD, memory 2:1, shares 1:3" 2
echo "torch_dp: fully_shard SGD 2 ranks: $(head -1 <<<"$out" | cut -c1-160)"
run_cmd mpi -np 1 -x LOOM_DEVICE_WEIGHT=2 $P "$F" --shard-weights 1,1,3 --checkpoint ck-fsdp : \
  -np 2 -x LOOM_DEVICE_WEIGHT=1 $P "$F" --shard-weights 1,1,3 --checkpoint ck-fsdp
fsdp_ok "SGD resumed at step 15 on 3 ranks, memory 1:1:3, shares 2:1:1" 3
expect_match "fully_shard: resumed from the 2-rank checkpoint" "resumed from .*ckpt-0000000015.h5 \(step 15\)" "$err"
run_cmd mpi -np 2 $P "$F" --layers 3 --checkpoint ck-fsdp
expect_ne "fully_shard: a checkpoint of another model is refused" 0 "$rc"
expect_match "fully_shard: the other model's missing tensor named" "from a different model: it has no tensor blocks.2" "$err"
# (with the next block's gather prefetched on a thread: LOOM_FSDP_PREFETCH=1)
run_cmd mpi -x LOOM_FSDP_PREFETCH=1 -np 1 -x LOOM_DEVICE_WEIGHT=1 -x LOOM_DEVICE_MEMORY=42949672960 $P "$F" --optimizer adamw : \
  -np 1 -x LOOM_DEVICE_WEIGHT=3 -x LOOM_DEVICE_MEMORY=21474836480 $P "$F" --optimizer adamw : \
  -np 1 -x LOOM_DEVICE_WEIGHT=2 -x LOOM_DEVICE_MEMORY=21474836480 $P "$F" --optimizer adamw
fsdp_ok "AdamW, LOOM_DEVICE_MEMORY 2:1:1, shares 1:3:2" 3
run_cmd mpi -np 2 $P "$F" --bf16 --shard-weights 1,1 --tolerance 0.1 --steps 10
fsdp_ok "bf16 parameters, fp32 reduction" 2
# Dynamic shares: rank 1 slowed to 0.4 (LOOM_EMULATE_SPEED, layer by layer) gets less of each batch,
# and the weights stay one process's through the changes of shares, with gradients accumulated
# over 2 batches a step.
dyn="--balance dynamic --global-batch 24 --accumulate 2"
run_cmd mpi -np 1 $P "$F" $dyn : -np 1 -x LOOM_EMULATE_SPEED=0.4 $P "$F" $dyn
fsdp_ok "SGD, dynamic shares, rank 1 at speed 0.4, 2 batches a step" 2
shares=$($P -c 'import json, sys; l = json.loads(sys.stdin.readline()); print(*l["shares"], *l["last_shares"])' <<<"$out")
echo "torch_dp: fully_shard dynamic shares (first, last): $shares"
expect_eq "fully_shard, dynamic shares: from even to more on the fast rank ($shares)" 1 \
  "$(awk '{ print ($1 == $2 && $3 >= 2 * $4) ? 1 : 0 }' <<<"$shares")"
t0=$SECONDS
run_cmd mpi -np 2 -x LOOM_COMM_TIMEOUT=5 $P "$F" --stall-in-gather 3
expect_ne "fully_shard: a rank that stops in a gather: exit" 0 "$rc"
expect_match "fully_shard: the stopped rank named by the one that waited" "rank 0: timed out waiting for rank 1" "$err"
expect_eq "fully_shard: a stopped rank ends the job within the timeout (+15 s)" 1 "$([ $((SECONDS - t0)) -le 20 ] && echo 1 || echo 0)"
run_cmd mpi -np 1 -x LOOM_DEVICE_MEMORY=100 $P "$F" --steps 1 : -np 1 $P "$F" --steps 1
expect_ne "fully_shard: LOOM_DEVICE_MEMORY on one rank only is refused" 0 "$rc"
expect_match "fully_shard: the rank without LOOM_DEVICE_MEMORY named" "not on rank\(s\) \[1\]" "$err"

# 1. Uneven static shares = one process on the global batch (the update of each step is the
# same sum of per-sample gradients; only the order of additions differs).
for cfg in "transformer --global-batch 24 --lr 0.05 --momentum 0.9" "resnet --global-batch 16 --samples 256 --lr 0.001 --momentum 0"; do
  set -- $cfg
  m=$1
  run_cmd timeout 300 $P "$T/train.py" --model $cfg --out one-$m.pt --init-out init-$m.pt
  expect_eq "$m: one process exit ($err)" 0 "$rc"
  run_cmd uneven --model $cfg --out two-$m.pt
  expect_eq "$m: 2 ranks exit ($(tail -3 <<<"$err"))" 0 "$rc"
  expect_eq "$m: static shares from LOOM_DEVICE_WEIGHT 1 and 3" "$([ $m = resnet ] && echo '[5, 11]' || echo '[7, 17]')" "$(field shares)"
  run_cmd $P "$T/compare.py" two-$m.pt one-$m.pt init-$m.pt 1e-5
  echo "$m, 2 uneven ranks against 1 process: $out"
  expect_eq "$m: 2 uneven ranks = 1 process within 1e-5 ($out $err)" 0 "$rc"
done

# 2. fp16 payloads: the same within fp16's rounding; PowerSGD: a tenth of the bytes, and learning.
run_cmd uneven --model transformer --compression fp16 --out fp16.pt
expect_eq "fp16 exit" 0 "$rc"
run_cmd $P "$T/compare.py" fp16.pt one-transformer.pt init-transformer.pt 5e-5
echo "transformer, fp16 payloads against 1 process in fp32: $out"
expect_eq "fp16 within its rounding ($out $err)" 0 "$rc"
run_cmd uneven --model transformer --compression powersgd --steps 40
expect_eq "powersgd exit ($(tail -3 <<<"$err"))" 0 "$rc"
stats=$(field stats)
echo "transformer, PowerSGD rank 2 from step 5: $stats"
expect_eq "powersgd sends under a tenth of plain fp32" 1 \
  "$($P -c 'import ast, sys; s = ast.literal_eval(sys.argv[1]); print(int(10 * s["last_bytes"] < s["plain_bytes"]))' "$stats")"
expect_eq "powersgd learns" 1 "$($P -c 'import ast, sys; l = ast.literal_eval(sys.argv[1]); print(int(sum(l[-5:]) < sum(l[:5])))' "$(field losses)")"

# 3. Dynamic shares follow an emulated slow rank (speed 0.4): the slow rank's part of the batch
# ends near 0.4 / 1.4 of it.
run_cmd mpi -np 1 $P "$T/train.py" --balance dynamic --steps 60 --global-batch 64 --samples 2048 : \
  -np 1 -x LOOM_EMULATE_SPEED=0.4 $P "$T/train.py" --balance dynamic --steps 60 --global-batch 64 --samples 2048
expect_eq "dynamic exit" 0 "$rc"
echo "dynamic shares with rank 1 at speed 0.4: from $(field first_shares) to $(field shares)"
expect_eq "the slow rank's share near 0.4/1.4 of 64 (12..23)" 1 \
  "$($P -c 'import ast, sys; s = ast.literal_eval(sys.argv[1]); print(int(12 <= s[1] <= 23 and sum(s) == 64))' "$(field shares)")"

# 4. Faults: each a clear error on the rank that sees it, and no hang.
run_cmd mpi -np 2 $P "$T/train.py" --steps 3 --fault mismatch
expect_ne "differing parameters exit" 0 "$rc"
expect_eq "differing parameters named on both ranks" 2 \
  "$(grep -c "parameters differ at position 26: rank 0 has head.weight \[64, 64\].*rank 1 has head.weight \[65, 64\]" <<<"$err")"
run_cmd mpi -np 2 $P "$T/train.py" --steps 3 --fault unused
expect_eq "an unused parameter: the steps complete" 0 "$rc"
run_cmd mpi -np 2 $P "$T/train.py" --steps 4 --fault no-backward
expect_ne "step() without backward() exit" 0 "$rc"
expect_match "step() without backward() named" "step\(\) without backward\(\)" "$err"
run_cmd mpi -np 2 $P "$T/train.py" --steps 3 --global-batch 1
expect_ne "a global batch smaller than the world exit" 0 "$rc"
expect_match "a global batch smaller than the world named" "global_batch_size 1 is smaller than the world \(2 ranks\)" "$err"
t0=$SECONDS
run_cmd mpi -np 2 -x LOOM_COMM_TIMEOUT=5 $P "$T/train.py" --steps 6 --fault hang-at-3
expect_ne "a hung rank: exit" 0 "$rc"
expect_match "a hung rank: named by the rank that waited" "rank 0: timed out waiting for rank 1" "$err"
expect_eq "a hung rank: the job ends within the timeout (+15 s)" 1 "$([ $((SECONDS - t0)) -le 20 ] && echo 1 || echo 0)"

# 5. Checkpoints: SIGUSR1 on one rank stops every rank at the same step with a checkpoint and
# exit 75; the resumed run ends bitwise where the uninterrupted run ends; another world size
# resumes too; a damaged newest checkpoint is skipped; another model's checkpoint is refused.
ck="--steps 30 --ckpt-every 10"
run_cmd mpi -np 2 $P "$T/train.py" $ck --ckpt-dir full --out full.pt --init-out ck-init.pt
expect_eq "checkpointed run exit" 0 "$rc"
expect_eq "every 10 steps, 3 kept" "ckpt-0000000010.h5 ckpt-0000000020.h5 ckpt-0000000030.h5" "$(ls full | tr '\n' ' ' | sed 's/ $//')"
run_cmd mpi -np 2 $P "$T/train.py" $ck --ckpt-dir stopped --signal-at 13
expect_eq "SIGUSR1: exit 75 (REQUEUE)" 75 "$rc"
expect_match "SIGUSR1: stopped with a checkpoint" "stopping at step 15 \(signal SIGUSR1\); checkpoint .*ckpt-0000000015.h5; exit 75" "$err"
run_cmd "$LOOM_BUILDDIR/loom-train" --inspect stopped/ckpt-0000000015.h5
expect_match "loom-train --inspect verifies it" "Loom checkpoint, format version [0-9]+, every checksum verified" "$out"
cp -r stopped other-world
cp -r stopped damaged
head -c 4000 stopped/ckpt-0000000015.h5 >damaged/ckpt-0000000015.h5
run_cmd mpi -np 2 $P "$T/train.py" $ck --ckpt-dir stopped --out resumed.pt
expect_match "resumed from step 15" "resumed from .*ckpt-0000000015.h5 \(step 15\)" "$err"
run_cmd $P "$T/compare.py" resumed.pt full.pt ck-init.pt 0
expect_eq "stopped and resumed = never stopped, bitwise ($out)" 0 "$rc"
run_cmd timeout 300 $P "$T/train.py" $ck --ckpt-dir other-world --out one-rank.pt
expect_match "2 ranks' checkpoint resumed by 1" "resumed from .*ckpt-0000000015.h5" "$err"
run_cmd $P "$T/compare.py" one-rank.pt full.pt ck-init.pt 1e-5
expect_eq "resumed on another world size, within 1e-5 ($out)" 0 "$rc"
run_cmd mpi -np 2 $P "$T/train.py" $ck --ckpt-dir damaged --out from-10.pt
expect_match "a damaged checkpoint is skipped, named" "skipping .*ckpt-0000000015.h5" "$err"
expect_match "and the one before it taken" "resumed from .*ckpt-0000000010.h5 \(step 10\)" "$err"
run_cmd $P "$T/compare.py" from-10.pt full.pt ck-init.pt 0
expect_eq "resumed from step 10 = never stopped ($out)" 0 "$rc"
run_cmd timeout 300 $P "$T/train.py" --model resnet --samples 256 --global-batch 16 --steps 2 --ckpt-dir full
expect_ne "another model's checkpoint: exit" 0 "$rc"
expect_match "another model's checkpoint: the first tensor named" "ckpt-0000000030.h5 is from a different model: it has no tensor conv1.weight" "$err"
# Crafted checkpoints are data: a pickle that runs a command is never unpickled; wrong moment
# shapes, dtypes, steps and random states are refused by name.
run_cmd timeout 300 $P "$T/checkpoint_safety.py"
expect_eq "crafted checkpoints ($(tail -3 <<<"$err"))" 0 "$rc"
expect_match "crafted checkpoints: every check" "checkpoint safety: [0-9]+ checks passed" "$out"

# 6. The examples run as written (a few steps each).
E=$LOOM_SRCDIR/examples/torch
run_cmd mpi -np 2 $P "$E/transformer_lm.py" --steps 60 --ckpt-dir lm-ckpt
expect_eq "examples/torch/transformer_lm.py exit ($(tail -3 <<<"$err"))" 0 "$rc"
expect_match "transformer_lm.py reports its steps" "step 50 loss [0-9.]+ sent [0-9]+ of [0-9]+ bytes" "$out"
run_cmd env LOOM_CKPT_DIR=rn-ckpt timeout 300 mpirun -x PYTHONPATH -x LOOM_TORCH_LIB -x LOOM_CKPT_DIR -np 2 $P \
  "$E/resnet_fashion_mnist.py" --steps 2 --global-batch 16
expect_eq "examples/torch/resnet_fashion_mnist.py exit ($(tail -3 <<<"$err"))" 0 "$rc"
expect_match "resnet_fashion_mnist.py saves its model" "saved resnet18-fashion-mnist.pt" "$err"
expect_match "resnet_fashion_mnist.py: a short run shows its first and last step" \
  "epoch 0 step 1 loss [0-9.]+ shares .*epoch 0 step 2 loss [0-9.]+" "$(tr '\n' ' ' <<<"$out")"

# 7. Under Slurm: srun --mpi=pmix --loom-bind=ring on an A100 and a V100 (the local cluster's
# devices): the plugin's LOOM_DEVICE_WEIGHT (312, 125) sets the static shares, and the run is
# still the single process's; fully_shard with the plugin's memory; on two nodes where the cluster has them.
if [ "${LOOM_SKIP_CLUSTER_TESTS:-0}" != 1 ] && [ -n "${SLURM_CONF:-}" ] && sinfo -h >/dev/null 2>&1; then
  run_cmd timeout 300 srun -n2 --mpi=pmix --gres=gpu:a100:1,gpu:v100:1 --loom-bind=ring $P "$T/train.py" --out srun.pt
  expect_eq "srun --loom-bind=ring exit ($(tail -3 <<<"$err"))" 0 "$rc"
  expect_eq "srun: shares from the plugin's device weights 312 and 125" "[17, 7]" "$(field shares)"
  run_cmd $P "$T/compare.py" srun.pt one-transformer.pt init-transformer.pt 1e-5
  expect_eq "srun: an A100 and a V100 = 1 process within 1e-5 ($out)" 0 "$rc"
  # fully_shard under the plugin: the state split by its LOOM_DEVICE_MEMORY (40 and 32 GiB), the
  # batch by its LOOM_DEVICE_WEIGHT.
  run_cmd timeout 300 srun -n2 --mpi=pmix --gres=gpu:a100:1,gpu:v100:1 --loom-bind=ring $P "$F" --steps 10
  fsdp_ok "srun --loom-bind: an A100 and a V100" 2
  expect_match "srun: fully_shard's memory weights from the plugin" '"memory_weights": \[42949672960.0, 34359738368.0\], "shares": \[8, 4\]' "$out"
  if [ "$(sinfo -h -N -o %N | sort -u | wc -l)" -ge 2 ]; then
    run_cmd timeout 300 srun -N2 -n2 --mpi=pmix $P "$T/train.py" --steps 10
    expect_eq "srun -N2 exit ($(tail -3 <<<"$err"))" 0 "$rc"
    expect_match "srun -N2: a world of 2" '"world": 2' "$out"
  fi
fi
finish
