"""loom-sweep --tensorboard read back by TensorBoard's own reader and its HParams plugin's
protobufs: each trial of RESULTS.json is a run TB_DIR/trial-N whose session start holds the
trial's parameters (numbers, and a choice as its text), whose metric scalar is the trial's value,
and whose session end says it succeeded. Prints one line; exits 1 on a mismatch.

    python tensorboard sweep_tensorboard_check.py TB_DIR RESULTS.json METRIC
"""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

folder, results, metric = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
fails, seen = [], 0
for t in results["trials"]:
    acc = ea.EventAccumulator(os.path.join(folder, f"trial-{t['id']}"), size_guidance={ea.SCALARS: 0})
    acc.Reload()
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"]).session_end_info
    for name, want in t["params"].items():
        v = start.hparams[name]
        got = v.string_value if isinstance(want, str) else v.number_value
        if (got != want) if isinstance(want, str) else abs(got - want) > 1e-9 * max(1, abs(want)):
            fails.append(f"trial {t['id']}: {name} {got!r}, results.json {want!r}")
    ok = t["state"] == "ok"
    if end.status != (api_pb2.STATUS_SUCCESS if ok else api_pb2.STATUS_FAILURE):
        fails.append(f"trial {t['id']}: status {end.status}")
    if ok:
        value = acc.Scalars(metric)[0].value
        if abs(value - t["value"]) > 1e-5 * max(1, abs(t["value"])):
            fails.append(f"trial {t['id']}: {metric} {value} in TensorBoard, {t['value']} in results.json")
    seen += 1
print(f"sweep tensorboard: {seen} trials as HParams sessions" + ("" if not fails else ": " + "; ".join(fails[:5])))
sys.exit(1 if fails or not seen else 0)
