"""triton_everyday.py — Triton's own Python client (PyPI tritonclient) making the everyday calls on
one model, over HTTP and gRPC, against loom-serve or the controller's router in front of replicas:
server liveness, readiness and metadata, the model's metadata, readiness, configuration and
statistics, the repository index, infer with binary tensors (the client's default) and with JSON,
async_infer, and the gRPC stream; with a token, every call carries it and a call without it is
refused as Triton's clients see a refusal.

Usage: python triton_everyday.py HOST:HTTP_PORT HOST:GRPC_PORT MODEL ROWS [--token T] [--want X.npy Y.npy]
The input is the model's one input, ROWS rows of its width. Answers are held to Y for input X
when given (the graph's own numbers), else to the HTTP JSON answer: every path must agree with it.
Prints one line per check ("ok: ..." or "FAIL: ...") and exits 1 when any failed.
"""
import argparse
import queue

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ap = argparse.ArgumentParser()
ap.add_argument("http")
ap.add_argument("grpc")
ap.add_argument("model")
ap.add_argument("rows", type=int)
ap.add_argument("--token")
ap.add_argument("--want", nargs=2, metavar=("X", "Y"))
args = ap.parse_args()
failures = 0


def check(what, ok, detail=""):
    global failures
    print(("ok: " if ok else "FAIL: ") + what + ("" if ok else f" ({detail})"))
    failures += 0 if ok else 1


def headers():  # a new dict each call: the HTTP client adds to the one it is given
    return {"authorization": "Bearer " + args.token} if args.token else None


mods = {"http": httpclient, "grpc": grpcclient}
clients = {"http": httpclient.InferenceServerClient(args.http), "grpc": grpcclient.InferenceServerClient(args.grpc)}
js = {"http": {}, "grpc": {"as_json": True}}  # the gRPC client answers protobuf messages unless asked for JSON
M = args.model

meta = clients["http"].get_model_metadata(M, headers=headers())
inp, out = meta["inputs"][0], meta["outputs"][0]
if args.want:
    x, want = np.load(args.want[0]), np.load(args.want[1])
else:
    width = int(inp["shape"][-1])
    x = ((np.arange(args.rows * width) % 7) / 7).astype(np.float32).reshape(args.rows, width)
    want = None


def tensor(proto, data, binary=True):
    t = mods[proto].InferInput(inp["name"], list(data.shape), inp["datatype"])
    t.set_data_from_numpy(data, **({"binary_data": binary} if proto == "http" else {}))
    return t


def infer(proto, data, binary=True):
    outs = [mods[proto].InferRequestedOutput(out["name"], **({"binary_data": binary} if proto == "http" else {}))]
    return clients[proto].infer(M, [tensor(proto, data, binary)], outputs=outs, headers=headers()).as_numpy(out["name"])


reference = infer("http", x, binary=False)
if want is None:
    want = reference
check("http: infer (JSON tensors) answers" + (" the graph's numbers" if args.want else ""),
      reference is not None and reference.shape[0] == x.shape[0] and np.allclose(reference, want, atol=1e-5), reference)

for proto in ("http", "grpc"):
    c = clients[proto]
    check(f"{proto}: server live and ready, {M} ready",
          c.is_server_live(headers=headers()) and c.is_server_ready(headers=headers()) and c.is_model_ready(M, headers=headers()))
    ext = set(c.get_server_metadata(headers=headers(), **js[proto])["extensions"])
    check(f"{proto}: server metadata lists binary_tensor_data, model_repository, model_configuration, statistics",
          {"binary_tensor_data", "model_repository", "model_configuration", "statistics"} <= ext, sorted(ext))
    md = c.get_model_metadata(M, headers=headers(), **js[proto])
    check(f"{proto}: {M}'s metadata names {inp['name']} and {out['name']}",
          md["inputs"][0]["name"] == inp["name"] and md["outputs"][0]["name"] == out["name"], md)
    index = c.get_model_repository_index(headers=headers(), **js[proto])
    index = index.get("models", []) if proto == "grpc" else index
    check(f"{proto}: the repository index has {M} READY",
          any(m["name"] == M and m.get("state") == "READY" for m in index), index)
    cfg = c.get_model_config(M, headers=headers(), **js[proto])
    cfg = cfg["config"] if proto == "grpc" else cfg
    check(f"{proto}: {M}'s configuration names its input and batches",
          cfg["input"][0]["name"] == inp["name"] and int(cfg.get("max_batch_size", 0)) >= x.shape[0], cfg)
    got = infer(proto, x)
    check(f"{proto}: infer (binary tensors) answers the same", got is not None and np.allclose(got, want, atol=1e-5), got)
    if proto == "http":
        got = c.async_infer(M, [tensor(proto, x)], headers=headers()).get_result().as_numpy(out["name"])
    else:
        answers = queue.Queue()
        c.async_infer(M, [tensor(proto, x)], callback=lambda result, error: answers.put((result, error)), headers=headers())
        result, error = answers.get(timeout=30)
        got = None if error else result.as_numpy(out["name"])
    check(f"{proto}: async_infer answers the same", got is not None and np.allclose(got, want, atol=1e-5), got)
    s = c.get_inference_statistics(M, headers=headers(), **js[proto])["model_stats"]
    check(f"{proto}: {M}'s statistics count successes",
          len(s) >= 1 and s[0]["name"] == M and int(s[0]["inference_stats"]["success"].get("count", 0)) >= 1, s)

# The gRPC stream: three requests, answered in order, each with its own rows.
stream = queue.Queue()
clients["grpc"].start_stream(callback=lambda result, error: stream.put((result, error)), headers=headers())
for i in range(3):
    clients["grpc"].async_stream_infer(M, [tensor("grpc", x * (i + 1))], request_id=str(i))
got = [stream.get(timeout=30) for _ in range(3)]
clients["grpc"].stop_stream()
expected = [infer("http", x * (i + 1)) for i in range(3)]
check("grpc: the stream answers each request in order, with its own rows",
      all(e is None and r.get_response().id == str(i) and np.allclose(r.as_numpy(out["name"]), expected[i], atol=1e-4)
          for i, (r, e) in enumerate(got)), [(e, r and r.get_response().id) for r, e in got])

if args.token:
    for proto, want_status in (("http", "401"), ("grpc", "StatusCode.UNAUTHENTICATED")):
        try:
            clients[proto].infer(M, [tensor(proto, x)])
            check(f"{proto}: without the token, refused", False, "answered")
        except InferenceServerException as e:
            check(f"{proto}: without the token, refused ({want_status})", e.status() == want_status, e.status())

raise SystemExit(1 if failures else 0)
