#!/usr/bin/env bash
# train_tensorboard.sh — loom-train --tensorboard on 2 ranks of uneven static shares: TensorBoard's
# own reader (PyPI's tensorboard) reads every step's and evaluation's scalar equal to the metrics
# file, with the learning rate and the time breakdown beside them; a damaged record fails the
# reader's CRC check; a folder that cannot be made is refused with the path named.
. "$(dirname "$0")/lib.sh"
mpi_training_setup
peer_venv tensorboard tensorboard
run_cmd timeout 300 mpirun -np 2 --oversubscribe ./rankenv.sh "$T" --layers 784,32,10 --steps 20 --global-batch 32 \
  --log-every 5 --balance static --tensorboard tb --metrics-file m.jsonl --ckpt-dir ck --ckpt-every 10
expect_eq "loom-train --tensorboard, 2 ranks" 0 "$rc"
expect_match "the event file is announced" "tensorboard: tb/events.out.tfevents\\.[0-9]+\\..*\\.loom" "$err"
expect_eq "rank 0 alone writes one event file" 1 "$(ls tb | wc -l)"
run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/train/tensorboard_check.py" tb m.jsonl
echo "$out" | sed 's/^/  /'
expect_eq "TensorBoard's reader: the metrics file's values, and the CRC check" 0 "$rc"
expect_match "TensorBoard's reader: each rank's share" "values of the metrics file read back" "$out"
# loom.torch.log_to: a training script's own SummaryWriter (Debian's PyTorch, PyPI's tensorboard)
# gets each rank's share and this rank's compute and exchange seconds beside the script's loss.
lib=$LOOM_BUILDDIR/runtime/python/.libs/libloomtorch.so
if [ -f "$lib" ] && tbt=$(LOOM_PEER_SYSTEM_SITE=1 "$LOOM_SRCDIR/contrib/peer-venv.sh" tensorboard-torch "numpy<2" tensorboard 2>peer.err) &&
   "$tbt/bin/python" -c 'import torch.utils.tensorboard' 2>>peer.err; then
  export LOOM_TORCH_LIB=$lib PYTHONPATH=$LOOM_SRCDIR/runtime/python:$LOOM_SRCDIR/tests/torch
  run_cmd timeout 300 mpirun -np 2 --oversubscribe -x PYTHONPATH -x LOOM_TORCH_LIB ./rankenv.sh "$tbt/bin/python" \
    "$LOOM_SRCDIR/tests/torch/train.py" --steps 6 --tensorboard tt
  expect_eq "loom.torch.log_to: the script on 2 ranks" 0 "$rc"
  run_cmd "$tbt/bin/python" - tt "$(tail -1 <<<"$out")" <<'PY'
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
s = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
shares = json.loads(sys.argv[2])["shares"]
assert [v for _, v in s["loom/shares/rank0"]] == [shares[0]] * 6 and [v for _, v in s["loom/shares/rank1"]] == [shares[1]] * 6, s
assert [k for k, _ in s["loom/compute_s"]] == list(range(1, 7)) and all(v > 0 for _, v in s["loom/compute_s"]), s
assert len(s["loom/exchange_s"]) == 6 and len(s["train/loss"]) == 6, s
print("log_to:", sorted(s))
PY
  expect_eq "loom.torch.log_to: shares and seconds beside the script's loss ($out $err)" 0 "$rc"
else
  echo "SKIP (part): no Python with Debian's PyTorch and PyPI's tensorboard: $(tail -2 peer.err)"
fi
touch afile
run_cmd "$T" --layers 784,32,10 --steps 2 --tensorboard afile/tb
expect_ne "--tensorboard under a file: refused" 0 "$rc"
expect_match "--tensorboard under a file: the folder named" "afile/tb: cannot create the TensorBoard folder" "$err"
finish
