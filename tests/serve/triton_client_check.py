"""triton_client_check.py — Triton's own Python client (PyPI tritonclient) against loom-serve, over
HTTP and gRPC: the server's extensions, the model configuration of a model with a config.pbtxt
and of one without, the statistics after a known load, the errors for what is not there, and the
everyday calls (metadata, readiness, the repository index, infer with binary and JSON tensors,
async_infer, the gRPC stream).

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

# The client's everyday calls: metadata, readiness, the repository index, infer with binary tensors
# (its default) and JSON, async_infer and the gRPC stream, all answering the graph's own numbers
# (Gemm with the seeded weights of serve_triton.sh, then Relu).
rng = np.random.default_rng(7)
w, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
want = np.maximum(x @ w + b, 0)
for proto, mod in (("http", httpclient), ("grpc", grpcclient)):
    c = clients[proto]
    check(f"{proto}: server live and ready, plain ready", c.is_server_live() and c.is_server_ready() and c.is_model_ready("plain"))
    md = c.get_model_metadata("plain", **({"as_json": True} if proto == "grpc" else {}))
    check(f"{proto}: plain's metadata names x and y", md["inputs"][0]["name"] == "x" and md["outputs"][0]["name"] == "y", md)
    index = c.get_model_repository_index(**({"as_json": True} if proto == "grpc" else {}))
    index = index["models"] if proto == "grpc" else index
    states = {(m["name"], m.get("version", "")): m.get("state", "") for m in index}
    check(f"{proto}: the repository index has plain READY and bad_dims UNAVAILABLE",
          states.get(("plain", "1")) == "READY" and states.get(("bad_dims", "1")) == "UNAVAILABLE", states)
    for binary in ((True, False) if proto == "http" else (True,)):
        t = mod.InferInput("x", [3, 4], "FP32")
        t.set_data_from_numpy(x, **({"binary_data": binary} if proto == "http" else {}))
        outs = [mod.InferRequestedOutput("y", **({"binary_data": binary} if proto == "http" else {}))]
        got = c.infer("plain", [t], outputs=outs).as_numpy("y")
        check(f"{proto}: infer ({'binary' if binary else 'JSON'} tensors) answers the graph's numbers",
              got is not None and np.allclose(got, want, atol=1e-5), got)
    t = mod.InferInput("x", [3, 4], "FP32")
    t.set_data_from_numpy(x)
    if proto == "http":
        got = c.async_infer("plain", [t]).get_result().as_numpy("y")
    else:
        import queue
        answers = queue.Queue()
        c.async_infer("plain", [t], callback=lambda result, error: answers.put((result, error)))
        result, error = answers.get(timeout=30)
        got = None if error else result.as_numpy("y")
    check(f"{proto}: async_infer answers the same", got is not None and np.allclose(got, want, atol=1e-5), got)

import queue  # noqa: E402
stream = queue.Queue()
clients["grpc"].start_stream(callback=lambda result, error: stream.put((result, error)))
for i in range(3):
    t = grpcclient.InferInput("x", [3, 4], "FP32")
    t.set_data_from_numpy(x * (i + 1))
    clients["grpc"].async_stream_infer("plain", [t], request_id=str(i))
got = [stream.get(timeout=30) for _ in range(3)]
clients["grpc"].stop_stream()
check("grpc: the stream answers each request in order, with its own rows",
      all(e is None and r.get_response().id == str(i) and np.allclose(r.as_numpy("y"), np.maximum((x * (i + 1)) @ w + b, 0), atol=1e-4)
          for i, (r, e) in enumerate(got)), [(e, r and r.get_response().id) for r, e in got])

sys.exit(1 if failures else 0)
