"""Reads loom-train's --tensorboard folder with TensorBoard's own reader (PyPI's tensorboard) and
checks it against the run's --metrics-file: every step line's loss, samples/s, loss scale, bytes
sent and each rank's share, and every evaluation, is a scalar at the same step with the same
value (float32). Then a copy with one byte flipped: the reader's CRC check stops at the damaged
record. Prints one line per check; exits 1 on any failure.

    python tensorboard_check.py TB_DIR METRICS.jsonl
"""
import glob
import json
import logging
import os
import shutil
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import event_file_loader

folder, metrics = sys.argv[1], sys.argv[2]
acc = ea.EventAccumulator(folder, size_guidance={ea.SCALARS: 0})
acc.Reload()
scalars = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
fails, checked = [], 0


def same(tag, step, want):
    global checked
    got = scalars.get(tag, {}).get(step)
    if got is None or abs(got - want) > 1e-6 * max(1.0, abs(want)):
        fails.append(f"{tag} at step {step}: {got} in the event file, {want} in the metrics file")
    checked += 1


for line in open(metrics):
    m = json.loads(line)
    if "loss" in m and "event" not in m:
        for key, tag in (("loss", "train/loss"), ("samples_per_s", "train/samples_per_s"),
                         ("loss_scale", "train/loss_scale"), ("comm_bytes", "train/comm_bytes")):
            same(tag, m["step"], m[key])
        for r, share in enumerate(m["rank_batch"]):
            same(f"shares/rank{r}", m["step"], share)
    elif m.get("event") == "eval":
        same("eval/test_accuracy", m["step"], m["test_accuracy"])
        same("eval/test_loss", m["step"], m["test_loss"])
for tag in ("train/learning_rate", "time/compute_ms", "time/exchange_wait_ms", "time/update_ms", "checkpoint/write_s"):
    if not scalars.get(tag):
        fails.append(f"no {tag}")
print(f"tensorboard: {checked} values of the metrics file read back by TensorBoard's reader "
      f"({len(scalars)} tags)")

# One flipped byte in the last record's data: the reader stops there, saying its CRC failed.
path = glob.glob(os.path.join(folder, "events.out.tfevents.*"))[0]
damaged = os.path.join(tempfile.mkdtemp(), os.path.basename(path))
shutil.copy(path, damaged)
data = bytearray(open(damaged, "rb").read())
data[-8] ^= 0x20
open(damaged, "wb").write(data)
said = []
logging.getLogger("tensorboard").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: said.append(r.getMessage())})())
logging.getLogger("tensorboard").setLevel(logging.DEBUG)
whole = sum(1 for _ in event_file_loader.RawEventFileLoader(path).Load())
kept = sum(1 for _ in event_file_loader.RawEventFileLoader(damaged).Load())
crc = any("crc32" in s for s in said)
print(f"tensorboard: a damaged copy: {kept} of {whole} records read, CRC failure reported: {crc}")
if not (kept == whole - 1 and crc):
    fails.append("the damaged record was not caught by the reader's CRC check")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
