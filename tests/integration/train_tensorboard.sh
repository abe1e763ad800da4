#!/usr/bin/env bash
# train_tensorboard.sh — loom-train --tensorboard on 2 ranks of uneven static shares: TensorBoard's
# own reader (PyPI's tensorboard) reads every step's and evaluation's scalar equal to the metrics
# file, with the learning rate and the time breakdown beside them; a damaged record fails the
# reader's CRC check; a folder that cannot be made is refused with the path named.
. "$(dirname "$0")/lib.sh"
mpi_training_setup
peer_venv tensorboard tensorboard
run_cmd timeout 300 mpirun -np 2 --oversubscribe ./rankenv.sh "$T" --layers 784,32,10 --steps 20 --global-batch 32 \
  --log-every 5 --balance static --tensorboard tb --metrics-file m.jsonl
expect_eq "loom-train --tensorboard, 2 ranks" 0 "$rc"
expect_match "the event file is announced" "tensorboard: tb/events.out.tfevents\\.[0-9]+\\..*\\.loom" "$err"
expect_eq "rank 0 alone writes one event file" 1 "$(ls tb | wc -l)"
run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/train/tensorboard_check.py" tb m.jsonl
echo "$out" | sed 's/^/  /'
expect_eq "TensorBoard's reader: the metrics file's values, and the CRC check" 0 "$rc"
expect_match "TensorBoard's reader: each rank's share" "values of the metrics file read back" "$out"
touch afile
run_cmd "$T" --layers 784,32,10 --steps 2 --tensorboard afile/tb
expect_ne "--tensorboard under a file: refused" 0 "$rc"
expect_match "--tensorboard under a file: the folder named" "afile/tb: cannot create the TensorBoard folder" "$err"
finish
