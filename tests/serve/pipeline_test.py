"""pipeline_test.py — an InferencePipeline over three real loom-serve services (the seed's
multimodal case, examples/multimodal/: models exported by PyTorch), served by a fourth loom-serve:
answers equal to PyTorch end to end and to the three services called one after another, over
REST and gRPC (grpcio), concurrent callers each with their own answer, the caller's deadline
kept, a step that is down named in the error; bad pipeline specs refused at load with one error.
The pipeline starts before its steps (on Slurm they are replica jobs that start in any order):
not ready, with the step named, until they answer; a step that goes away makes it not ready
again, and the server stays up.

usage: pipeline_test.py LOOM_SERVE SRC_DIR WORK_DIR
"""
import concurrent.futures as cf
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import torch

serve, src, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
os.environ["LOOM_SERVICES_DIR"] = os.path.join(work, "services")  # service: steps are looked up here
sys.path.insert(0, os.path.join(src, "examples", "multimodal"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models as mm  # noqa: E402
from kserve_py import Checks, kserve_messages, start_server  # noqa: E402

pb = kserve_messages(f"{src}/serve/proto", work)
import grpc  # noqa: E402

check = Checks()


procs = []


def start(name, args, grpc_port=0):
    p, addrs, text = start_server([serve, "--http-port", "0", "--grpc-port", str(grpc_port)] + args,
                                  os.path.join(work, name + ".log"))
    procs.append(p)
    return p, addrs, text


def pipeline_spec(path, ports, edit=lambda s: s):
    text = open(os.path.join(src, "examples", "multimodal", "pipeline.yaml")).read()
    for old, new in zip(("127.0.0.1:9101", "127.0.0.1:9201", "127.0.0.1:9301"), ports):
        text = text.replace(old, new)
    open(path, "w").write(edit(text))
    return path


model = mm.export(os.path.join(work, "repo"))
try:
    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def index(http_addr):
        req = urllib.request.Request(f"http://{http_addr}/v2/repository/index", data=b"{}", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return {e["name"]: e for e in json.loads(r.read())}

    def wait_ready(http_addr, want, seconds=20):
        for _ in range(seconds * 10):
            if (get(f"http://{http_addr}/v2/health/ready")[0] == 200) == want:
                return True
            time.sleep(0.1)
        return False

    # The pipeline first, its steps after it.
    grpc_ports = [free_port() for _ in range(3)]
    ports = [f"127.0.0.1:{q}" for q in grpc_ports]
    spec = pipeline_spec(os.path.join(work, "pipeline.yaml"), ports)
    pipe, (http, gaddr), log = start("pipeline", ["--spec", spec])
    check(http is not None, f"the pipeline server did not start before its steps: {log}")
    check("pipeline multimodal from" in log and "steps text" in log, "the log does not list the pipeline's steps")
    check("is not ready yet" in log and "step 'text'" in log, f"the log does not say the pipeline waits for its steps: {log}")
    base = f"http://{http}/v2/models"
    st, _ = get(f"http://{http}/v2/health/ready")
    check(st == 503, f"ready before its steps: {st}")
    st, r = get(f"{base}/multimodal/ready")
    check(st == 400 and r.get("ready") is False, f"the pipeline's own readiness before its steps: {st} {r}")
    e = index(http).get("multimodal", {})
    check(e.get("state") == "UNAVAILABLE" and "step 'text'" in e.get("reason", ""), f"the index before the steps: {e}")
    services = {}
    for name, q in zip(("text", "image", "fusion"), grpc_ports):
        p, addr, _ = start(name, ["--model-repository", os.path.join(work, "repo")], grpc_port=q)
        services[name] = (p, addr)
    check(wait_ready(http, True), "the pipeline did not become ready once its steps answered")
    st, r = get(f"{base}/multimodal/ready")
    check(st == 200 and r.get("ready") is True, f"the pipeline's own readiness once its steps answer: {st} {r}")
    check(index(http).get("multimodal", {}).get("state") == "READY", "the index does not say READY")

    def post(url, body):
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def as_json(name, t):
        dt = "INT64" if t.dtype == torch.int64 else "FP32"
        return {"name": name, "datatype": dt, "shape": list(t.shape), "data": t.flatten().tolist()}

    def rest(url, feeds):
        st, r = post(url, {"inputs": [as_json(k, v) for k, v in feeds.items()]})
        if st != 200:
            return st, r, None
        o = r["outputs"][0]
        return st, r, np.array(o["data"], np.float32).reshape(o["shape"])

    def stub(addr):
        ch = grpc.insecure_channel(addr)
        return ch.unary_unary("/inference.GRPCInferenceService/ModelInfer", request_serializer=pb.ModelInferRequest.SerializeToString,
                              response_deserializer=pb.ModelInferResponse.FromString)

    infer = stub(gaddr)

    def grpc_call(call, model_name, feeds, timeout=60):
        req = pb.ModelInferRequest(model_name=model_name)
        for k, v in feeds.items():
            req.inputs.add(name=k, datatype="INT64" if v.dtype == torch.int64 else "FP32", shape=list(v.shape))
            req.raw_input_contents.append(v.numpy().tobytes())
        r = call(req, timeout=timeout)
        o = r.outputs[0]
        return np.frombuffer(r.raw_output_contents[0], np.float32).reshape(list(o.shape))

    st, meta = urllib.request.urlopen(f"{base}/multimodal").status, json.loads(urllib.request.urlopen(f"{base}/multimodal").read())
    check([i["name"] for i in meta["inputs"]] == ["input_ids", "attention_mask", "image"], f"metadata inputs {meta}")
    check([(o["name"], o["datatype"]) for o in meta["outputs"]] == [("logits", "FP32")], f"metadata outputs {meta}")
    for batch in (1, 3):
        ids, mask, image = mm.example_inputs(batch=batch, seed=batch)
        feeds = {"input_ids": ids, "attention_mask": mask, "image": image}
        with torch.no_grad():
            want = model(ids, mask, image).numpy()
        st, r, got = rest(f"{base}/multimodal/infer", feeds)
        check(st == 200 and got is not None and np.abs(got - want).max() <= 1e-4 * max(1, np.abs(want).max()),
              f"REST batch {batch}: {st} {r if st != 200 else np.abs(got - want).max()}")
        got = grpc_call(infer, "multimodal", feeds)
        check(np.abs(got - want).max() <= 1e-4 * max(1, np.abs(want).max()), f"gRPC batch {batch} differs from PyTorch")
        # The same three services called one after another by this client.
        t = grpc_call(stub(ports[0]), "text-encoder", {"input_ids": ids, "attention_mask": mask})
        i = grpc_call(stub(ports[1]), "image-encoder", {"image": image})
        f = grpc_call(stub(ports[2]), "fusion", {"text": torch.from_numpy(t.copy()), "image": torch.from_numpy(i.copy())})
        check(np.array_equal(f, got), f"batch {batch}: the pipeline differs from the three calls one after another")
    many = [mm.example_inputs(batch=1, seed=50 + k) for k in range(12)]
    with cf.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda x: grpc_call(infer, "multimodal", dict(zip(("input_ids", "attention_mask", "image"), x))), many))
    with torch.no_grad():
        check(all(np.abs(a - model(*x).numpy()).max() < 1e-4 for a, x in zip(answers, many)), "a concurrent caller got a wrong answer")
    # The same requests on one ModelStreamInfer stream (Triton's streaming extension): answered
    # in order, each as the unary call answers it (up to rounding: they may be batched with
    # others); one naming no model gets its error, in turn.
    stream = grpc.insecure_channel(gaddr).stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer", request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelStreamInferResponse.FromString)

    def stream_requests():
        for k, x in enumerate(many[:6]):
            req = pb.ModelInferRequest(model_name="nope" if k == 3 else "multimodal", id=f"s{k}")
            for name, v in zip(("input_ids", "attention_mask", "image"), x):
                req.inputs.add(name=name, datatype="INT64" if v.dtype == torch.int64 else "FP32", shape=list(v.shape))
                req.raw_input_contents.append(v.numpy().tobytes())
            yield req

    got = list(stream(stream_requests(), timeout=60))
    check(len(got) == 6 and "nope" in got[3].error_message, f"stream: {len(got)} answers, the 4th: {got[3] if len(got) > 3 else None}")
    for k, r in enumerate(got):
        if k == 3 or r.error_message:
            continue
        o = r.infer_response
        a = np.frombuffer(o.raw_output_contents[0], np.float32).reshape(list(o.outputs[0].shape))
        check(o.id == f"s{k}" and np.abs(a - answers[k]).max() < 1e-5, f"stream answer {k}: id {o.id}, differs from the unary call")
    # Bad requests to the pipeline: named, 400.
    ids, mask, image = mm.example_inputs()
    st, r = post(f"{base}/multimodal/infer", {"inputs": [as_json("input_ids", ids), as_json("attention_mask", mask)]})
    check(st == 400 and "missing input 'image'" in r.get("error", ""), f"missing input: {st} {r}")
    st, r = post(f"{base}/multimodal/infer", {"inputs": [as_json("input_ids", ids.float()), as_json("attention_mask", mask),
                                                         as_json("image", image)]})
    check(st == 400 and "must be INT64" in r.get("error", ""), f"wrong datatype: {st} {r}")
    # The caller's deadline bounds the hops. A fusion step that holds each request 2 s for its
    # batch to fill, a 300 ms deadline: the caller gets DEADLINE_EXCEEDED, and the step itself
    # answers the request as timed out instead of computing it (the deadline travelled with it).
    # (A deadline shorter than the hops is no test: gRPC keeps deadlines in whole milliseconds and
    # three loopback hops of these models can finish within one.)
    slow_port = free_port()
    _, (slow_step, _), _ = start("slow-fusion", ["--model-repository", os.path.join(work, "repo"), "--max-queue-delay-us", "2000000"],
                                 grpc_port=slow_port)
    slow_spec = pipeline_spec(os.path.join(work, "slow.yaml"), ports[:2] + [f"127.0.0.1:{slow_port}"])
    _, (slow_http, slow_grpc), _ = start("slow-pipeline", ["--spec", slow_spec])
    check(wait_ready(slow_http, True), "the pipeline over the slow step did not become ready")
    t0 = time.monotonic()
    try:
        grpc_call(stub(slow_grpc), "multimodal", {"input_ids": ids, "attention_mask": mask, "image": image}, timeout=0.3)
        check(False, "a 300 ms deadline was met by a step that waits 2 s")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - t0 < 1.5,
              f"deadline: {e.code()} after {time.monotonic() - t0:.2f} s")
    fused = {}
    for _ in range(50):
        fused = get(f"http://{slow_step}/v2/models/fusion/stats")[1].get("model_stats", [{}])[0].get("inference_stats", {})
        if fused.get("fail", {}).get("count"):
            break
        time.sleep(0.1)
    check(fused.get("fail", {}).get("count") == 1 and fused.get("success", {}).get("count") == 0,
          f"the slow step did not answer the request as timed out: {fused}")
    # Bad specs: one clear error at load, exit status 1.
    def refused(what, edit, message):
        path = pipeline_spec(os.path.join(work, f"bad-{len(what)}.yaml"), ports, edit)
        p = subprocess.run([serve, "--spec", path, "--http-port", "0", "--grpc-port", "0"], capture_output=True, text=True, timeout=60)
        check(p.returncode == 1 and message in p.stderr, f"{what}: status {p.returncode}, {p.stderr.strip()[:300]}")

    refused("a source that names no tensor", lambda s: s.replace("text.embedding", "nope.embedding"), "names no known tensor (no step 'nope'")
    refused("a cycle", lambda s: s.replace("request.input_ids", "fusion.logits"), "form a cycle")
    # What only the steps' metadata can tell: the server starts, not ready, and says why.
    def not_ready(what, edit, message):
        path = pipeline_spec(os.path.join(work, f"unready-{len(what)}.yaml"), ports, edit)
        p, (h, _), text = start(f"unready-{len(what)}", ["--spec", path])
        try:
            reason = index(h).get("multimodal", {}).get("reason", "") if h else ""
            check(h is not None and get(f"http://{h}/v2/health/ready")[0] == 503 and message in reason,
                  f"{what}: {reason or text[-300:]}")
            st, r, _ = rest(f"http://{h}/v2/models/multimodal/infer", {"input_ids": ids, "attention_mask": mask, "image": image})
            check(st == 503 and message in r.get("error", ""), f"{what}: infer answered {st} {r}")
        finally:
            p.terminate()
            p.wait(timeout=30)

    not_ready("an unreachable url", lambda s: s.replace(ports[2], "127.0.0.1:1"), "step 'fusion' (model fusion at 127.0.0.1:1) cannot be reached")
    not_ready("an input the model lacks", lambda s: s.replace("{text: text.embedding", "{txt: text.embedding"), "the model has no input 'txt'")
    not_ready("an output the step lacks", lambda s: s.replace("image: image.embedding}", "image: image.features}"), "has no output 'features'")
    refused("a url that is not gRPC", lambda s: s.replace(f"grpc://{ports[0]}", f"http://{ports[0]}"), "must be grpc://host:port")
    refused("a service that no controller announced", lambda s: s.replace(f"url: grpc://{ports[2]}", "service: no-such-service"),
            "step 'fusion': service no-such-service is not announced in " + os.environ["LOOM_SERVICES_DIR"])
    refused("both url and service", lambda s: s.replace(f"url: grpc://{ports[2]}", f"url: grpc://{ports[2]}\n      service: x"),
            "spec.steps[2] has both url and service")
    refused("a service name with a slash", lambda s: s.replace(f"url: grpc://{ports[2]}", "service: ../etc"),
            "spec.steps[2].service '../etc' is not a service name")
    refused("an unknown field", lambda s: s.replace("      model: fusion", "      model: fusion\n      retries: 3"), "unknown field spec.steps[2].retries")

    # A step that is down: the error names it, and the server keeps answering.
    services["image"][0].send_signal(signal.SIGTERM)
    services["image"][0].wait(timeout=30)
    st, r, _ = rest(f"{base}/multimodal/infer", {"input_ids": ids, "attention_mask": mask, "image": image})
    check(st == 503 and "step 'image' (model image-encoder at " in r.get("error", ""), f"a step down over REST: {st} {r}")
    try:
        grpc_call(infer, "multimodal", {"input_ids": ids, "attention_mask": mask, "image": image})
        check(False, "the pipeline answered with a step down")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.UNAVAILABLE and "step 'image'" in e.details(), f"a step down over gRPC: {e}")
    check(wait_ready(http, False, 10), "the pipeline still says ready with a step down")
    check("step 'image'" in index(http).get("multimodal", {}).get("reason", ""), "the index does not name the step that is down")
    check(pipe.poll() is None, "the pipeline server exited")
    # The step comes back on its port: ready again.
    p, _, _ = start("image-again", ["--model-repository", os.path.join(work, "repo")], grpc_port=grpc_ports[1])
    check(wait_ready(http, True), "the pipeline did not become ready again when its step came back")
    st, r, got = rest(f"{base}/multimodal/infer", {"input_ids": ids, "attention_mask": mask, "image": image})
    check(st == 200, f"after the step came back: {st} {r}")

finally:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()

check.done("pipeline")
