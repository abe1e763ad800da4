"""triton_client_check.py — Triton's own Python client (PyPI tritonclient) against loom-serve, over
HTTP and gRPC: the server's extensions, the model configuration of a model with a config.pbtxt
and of one without, the statistics after a known load, and the errors for what is not there (the
everyday calls are triton_everyday.py's).

Usage: python triton_client_check.py HOST:HTTP_PORT HOST:GRPC_PORT
Prints one line per check ("ok: ..." or "FAIL: ...") and exits 1 when any failed.
"""
import sys
import urllib.error
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

http_url, grpc_url = sys.argv[1], sys.argv[2]
failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok else f" ({detail})"))
    failures += 0 if ok else 1


def refused(what, call, want):
    try:
        call()
        check(what, False, "no error")
    except InferenceServerException as e:
        check(what, want in str(e), str(e))


clients = {"http": httpclient.InferenceServerClient(http_url), "grpc": grpcclient.InferenceServerClient(grpc_url)}


def config(proto, name, version=""):
    c = clients[proto]
    if proto == "grpc":
        return c.get_model_config(name, version, as_json=True)["config"]
    return c.get_model_config(name, version)


def stats(proto, name, version=""):
    c = clients[proto]
    if proto == "grpc":
        return c.get_inference_statistics(name, version, as_json=True)["model_stats"]
    return c.get_inference_statistics(name, version)["model_stats"]


def as_int(v):  # gRPC's JSON writes 64-bit integers as strings, as protobuf's JSON does
    return int(v)


for proto in ("http", "grpc"):
    meta = clients[proto].get_server_metadata(**({"as_json": True} if proto == "grpc" else {}))
    ext = set(meta["extensions"])
    check(f"{proto}: extensions list model_configuration, statistics, model_repository, binary_tensor_data",
          {"model_configuration", "statistics", "model_repository", "binary_tensor_data"} <= ext, sorted(ext))

    tab = config(proto, "tab")
    check(f"{proto}: tab's config.pbtxt max_batch_size 8", as_int(tab.get("max_batch_size", 0)) == 8, tab)
    inp = tab["input"][0]
    check(f"{proto}: tab's input x, TYPE_FP32, dims [4] without the batch dimension",
          inp["name"] == "x" and inp["data_type"] == "TYPE_FP32" and [as_int(d) for d in inp["dims"]] == [4], inp)
    out = tab["output"][0]
    check(f"{proto}: tab's output y completed from the graph, dims [3]",
          out["name"] == "y" and [as_int(d) for d in out["dims"]] == [3], out)
    db = tab.get("dynamic_batching", {})
    check(f"{proto}: tab's dynamic_batching as written (delay 100 us, preferred 4)",
          as_int(db.get("max_queue_delay_microseconds", 0)) == 100 and [as_int(p) for p in db.get("preferred_batch_size", [])] == [4], db)
    check(f"{proto}: tab's instance_group count 2", as_int(tab["instance_group"][0]["count"]) == 2, tab.get("instance_group"))
    check(f"{proto}: tab's parameters kept", tab.get("parameters", {}).get("note", {}).get("string_value") == "from Triton", tab.get("parameters"))
    check(f"{proto}: tab's platform as Triton writes it", tab.get("platform") == "onnxruntime_onnx", tab.get("platform"))
    refused(f"{proto}: tab version 1 is not served (version_policy latest 1)", lambda: config(proto, "tab", "1"), "unknown version '1'")

    plain = config(proto, "plain")
    check(f"{proto}: plain (no config.pbtxt) derived: max_batch_size = the server's 32",
          as_int(plain.get("max_batch_size", 0)) == 32, plain)
    check(f"{proto}: plain's dims [4] and [3], dynamic batching on",
          [as_int(d) for d in plain["input"][0]["dims"]] == [4] and [as_int(d) for d in plain["output"][0]["dims"]] == [3]
          and "dynamic_batching" in plain, plain)
    refused(f"{proto}: config of an unknown model names it", lambda: config(proto, "nosuch"), "nosuch")
    refused(f"{proto}: statistics of an unknown model name it", lambda: stats(proto, "nosuch"), "nosuch")
    refused(f"{proto}: statistics of an unknown version name it", lambda: stats(proto, "plain", "7"), "unknown version '7'")

# 20 requests of 3 rows to plain (no other traffic): 20 successes, 60 inferences.
x = np.arange(12, dtype=np.float32).reshape(3, 4)
for i in range(20):
    if i % 2:
        t = grpcclient.InferInput("x", [3, 4], "FP32")
        t.set_data_from_numpy(x)
        clients["grpc"].infer("plain", [t])
    else:
        t = httpclient.InferInput("x", [3, 4], "FP32")
        t.set_data_from_numpy(x)
        clients["http"].infer("plain", [t])
for proto in ("http", "grpc"):
    s = stats(proto, "plain")
    check(f"{proto}: plain has one version's statistics", len(s) == 1 and s[0]["version"] == "1", s)
    s = s[0]
    inf = s["inference_stats"]
    check(f"{proto}: success.count 20", as_int(inf["success"]["count"]) == 20, inf["success"])
    check(f"{proto}: inference_count 60 (rows)", as_int(s["inference_count"]) == 60, s["inference_count"])
    ex = as_int(s["execution_count"])
    check(f"{proto}: execution_count between 2 and 20", 2 <= ex <= 20, ex)
    check(f"{proto}: batch_stats account for every execution",
          sum(as_int(b["compute_infer"]["count"]) for b in s["batch_stats"]) == ex, s["batch_stats"])
    check(f"{proto}: queue and compute_infer timed", as_int(inf["compute_infer"]["ns"]) > 0 and as_int(inf["queue"]["count"]) == 20, inf)
    check(f"{proto}: last_inference is a time in milliseconds", as_int(s["last_inference"]) > 1_700_000_000_000, s["last_inference"])
    every = stats(proto, "")
    check(f"{proto}: statistics of every model list plain and tab", {m["name"] for m in every} >= {"plain", "tab"},
          [m["name"] for m in every])

metrics = urllib.request.urlopen(f"http://{http_url}/metrics").read().decode()
check("/metrics: nv_inference_count of plain is the same 60", 'nv_inference_count{model="plain",version="1"} 60' in metrics,
      [l for l in metrics.splitlines() if l.startswith("nv_inference_count")])
try:
    urllib.request.urlopen(f"http://{http_url}/v2/models/nosuch/stats")
    check("HTTP status of statistics for an unknown model", False, "200")
except urllib.error.HTTPError as e:
    check("HTTP status of statistics for an unknown model is 404", e.code == 404, e.code)

sys.exit(1 if failures else 0)
