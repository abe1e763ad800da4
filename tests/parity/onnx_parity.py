"""onnx_parity.py — loom-serve serving models exported by PyTorch's own exporter.

The six families of onnx_models.py at opsets 13, 14 and 17 with a dynamic batch, and again
as PyTorch 2's default exporter writes them (where LOOM_EXPORT_PYTHON names a Python with it), in one model
repository (Triton's layout, model.onnx), served by a real loom-serve and called over REST (JSON
and the binary extension) and gRPC (grpcio with messages protoc generates from loom-serve's own
.proto): every answer equal to PyTorch's (relative error <= 1e-4) at batch 1, at batch 3 in one
request, and batched across concurrent clients; the metadata names the graph's inputs and
outputs. Beside them, models that must not load (truncated, an operator outside the set, another
domain, opset 21, a ConvTranspose weight ONNX's shape inference would read past, an initializer that contradicts its use, a header claiming 2^34 elements) are
not ready with the reason in the log while the rest keep serving; bad requests (wrong datatype,
rank, a 2 GiB+ shape claim) are 400 naming the input.

usage: onnx_parity.py LOOM_SERVE PROTO_DIR WORK_DIR
"""
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serve"))
import onnx_models as om  # noqa: E402
from kserve_py import Checks, kserve_messages  # noqa: E402

serve, proto_dir, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
pb = kserve_messages(proto_dir, work)
import grpc  # noqa: E402

check = Checks()


OPSETS = (13, 14, 17)
NP = {"FP32": np.float32, "INT64": np.int64, "INT32": np.int32, "BOOL": np.bool_, "UINT8": np.uint8}
KS = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32"}

# The repository: good models, and models that must not load.
repo = os.path.join(work, "repo")
refs = {}
for fam in ("mlp", "resnet", "bert", "gpt2", "unet", "rnn"):
    for opset in OPSETS:
        name = f"{fam}-{opset}"
        os.makedirs(f"{repo}/{name}/1", exist_ok=True)
        model = om.export(fam, f"{repo}/{name}/1/model.onnx", opset)
        onnx.checker.check_model(onnx.load(f"{repo}/{name}/1/model.onnx"))
        refs[name] = (fam, model)


# As a user of PyTorch 2 exports them: torch.onnx.export with no opset named (the dynamo
# exporter: opset 20, IR 10, Gelu, opset 18's reductions, the weights in a .data file beside the
# model), run by the Python that LOOM_EXPORT_PYTHON names; the references come from the same
# weights here (onnx_models.py builds them from a fixed seed, alike in both PyTorches).
DEFAULT = ("mlp", "resnet", "bert", "gpt2", "unet", "rnn")
if os.environ.get("LOOM_EXPORT_PYTHON"):
    out = os.path.join(work, "default")
    subprocess.run([os.environ["LOOM_EXPORT_PYTHON"], os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx_models.py"),
                    out, "default", *DEFAULT], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for fam in DEFAULT:
        name = f"{fam}-default"
        os.makedirs(f"{repo}/{name}/1", exist_ok=True)
        shutil.copy(f"{out}/{fam}.onnx", f"{repo}/{name}/1/model.onnx")
        shutil.copy(f"{out}/{fam}.onnx.data", f"{repo}/{name}/1/{fam}.onnx.data")
        refs[name] = (fam, om.build(fam)[0])
else:
    print("onnx_parity: SKIP (part): PyTorch 2's default exporter: LOOM_EXPORT_PYTHON names no Python with it", file=sys.stderr)
    DEFAULT = ()


def bad_model(name, graph, opset=17):
    os.makedirs(f"{repo}/{name}/1", exist_ok=True)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    with open(f"{repo}/{name}/1/model.onnx", "wb") as f:
        f.write(m.SerializeToString())


x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
w_ok = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], np.ones(12, np.float32))
bad_model("unknown-op", helper.make_graph([helper.make_node("FancyGemm", ["x", "w"], ["y"], name="fancy")], "g",
                                         [x_info], [y_info], [w_ok]))
bad_model("other-domain", helper.make_graph([helper.make_node("FusedGemm", ["x", "w"], ["y"], name="fg",
                                                              domain="com.microsoft")], "g", [x_info], [y_info], [w_ok]))
bad_model("opset-21", helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                                        [x_info], [y_info], [w_ok]), opset=21)
w_bad = helper.make_tensor("w", TensorProto.FLOAT, [3, 5], np.ones(15, np.float32))  # Gemm needs [3, 4]
bad_model("contradiction", helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                                             [x_info], [y_info], [w_bad]))
huge = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 17, 1 << 17], raw_data=bytes(16))  # 2^34 elements
bad_model("huge-claim", helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                                          [x_info], [y_info], [huge]))
# ConvTranspose with a weight of rank 1: ONNX's own shape inference would read past it.
convt_x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 4, 4])
convt_y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 8, 8])
w_flat = helper.make_tensor("w", TensorProto.FLOAT, [8], np.ones(8, np.float32))
bad_model("convt-flat-weight", helper.make_graph([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], "g",
                                                 [convt_x], [convt_y], [w_flat]))
# External data: the same MLP with its weights in a file beside it (onnx.save's own layout), and
# one whose location climbs out of its folder.
ext = onnx.load(f"{repo}/mlp-17/1/model.onnx")
os.makedirs(f"{repo}/mlp-external/1", exist_ok=True)
onnx.save_model(ext, f"{repo}/mlp-external/1/model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                location="weights.bin", size_threshold=0)
refs["mlp-external"] = refs["mlp-17"]
escape = onnx.load(f"{repo}/mlp-external/1/model.onnx", load_external_data=False)
for t in escape.graph.initializer:
    for kv in t.external_data:
        if kv.key == "location":
            kv.value = "../../mlp-external/1/weights.bin"
os.makedirs(f"{repo}/external-escape/1", exist_ok=True)
with open(f"{repo}/external-escape/1/model.onnx", "wb") as f:
    f.write(escape.SerializeToString())
os.makedirs(f"{repo}/external-link/1", exist_ok=True)
os.symlink(os.path.abspath(f"{repo}/mlp-external/1/weights.bin"), f"{repo}/external-link/1/weights.bin")
shutil.copy(f"{repo}/mlp-external/1/model.onnx", f"{repo}/external-link/1/model.onnx")
os.makedirs(f"{repo}/truncated/1", exist_ok=True)
blob = open(f"{repo}/bert-17/1/model.onnx", "rb").read()
open(f"{repo}/truncated/1/model.onnx", "wb").write(blob[: len(blob) // 2])

# The seed's bert-serving InferenceService (examples/), pointed at the exported BERT.
example = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(proto_dir))), "examples", "bert-serving.yaml")).read()
spec = os.path.join(work, "bert-serving.yaml")
open(spec, "w").write(example.replace("file:///models/bert-serving/1/model.onnx", f"file://{repo}/bert-17/1/model.onnx"))
refs["bert-serving"] = refs["bert-17"]
# KServe's own InferenceService format (examples/kserve-inferenceservice.yaml), storageUri the folder.
example = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(proto_dir))), "examples",
                            "kserve-inferenceservice.yaml")).read()
kspec = os.path.join(work, "kserve.yaml")
open(kspec, "w").write(example.replace("name: bert-serving", "name: bert-kserve")
                       .replace("file:///models/bert-serving/1", f"file://{repo}/bert-17/1"))
refs["bert-kserve"] = refs["bert-17"]

log = open(os.path.join(work, "serve.log"), "w+")
proc = subprocess.Popen([serve, "--model-repository", repo, "--spec", spec, "--spec", kspec, "--http-port", "0", "--grpc-port", "0",
                         "--max-queue-delay-us", "20000", "--max-batch-size", "16"], stderr=log)
try:
    text = ""
    for _ in range(1200):
        text = open(log.name).read()
        if "listening:" in text or proc.poll() is not None:
            break
        time.sleep(0.05)
    http = re.search(r"http ([0-9.]+:[0-9]+)", text).group(1)
    gaddr = re.search(r"grpc ([0-9.]+:[0-9]+)", text).group(1)
    base = f"http://{http}/v2/models"

    def post(url, body, headers=None):
        req = urllib.request.Request(url, data=body, headers=headers or {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), dict(e.headers)

    def get(url):
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    # KServe's fields Loom does not act on are named, in one warning.
    check(re.search(r"kserve.yaml: fields loom-serve does not act on, ignored: metadata.namespace, metadata.annotations, "
                    r"spec.predictor.model.resources.requests.cpu", text) is not None, "no warning naming KServe's ignored fields")
    # The load-time passes ran: constants folded, and BERT's GELU, bias and attention fused.
    for name in ("bert-13", "bert-17", "gpt2-17", "resnet-17"):
        m = re.search(rf"loaded model {name} version 1 .*onnx opset \d+, (\d+) nodes, (\d+) folded, (\d+) fused", text)
        check(m is not None and int(m.group(2)) > 0 and int(m.group(3)) > 0, f"{name}: no folding or fusion in the log")

    # Models that must not load: not ready, with the reason (the operator's domain and name).
    reasons = {"unknown-op": "ai.onnx:FancyGemm", "other-domain": "com.microsoft:FusedGemm", "opset-21": "opset 21",
               "contradiction": "fails on zeros at batch 1: Gemm", "convt-flat-weight": "weight must have the input's rank", "huge-claim": "2^33 elements", "truncated": "not an ONNX model",
               "external-escape": "outside the model's folder", "external-link": "resolves outside the model's folder"}
    for name, why in reasons.items():
        st, _ = get(f"{base}/{name}/ready")
        check(st != 200, f"{name} reported ready")
        check(re.search(rf"{name}.*{re.escape(why)}", text) is not None, f"the log does not say why {name} failed ({why})")

    channel = grpc.insecure_channel(gaddr)
    infer_rpc = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=pb.ModelInferRequest.SerializeToString,
                                    response_deserializer=pb.ModelInferResponse.FromString)
    meta_rpc = channel.unary_unary("/inference.GRPCInferenceService/ModelMetadata",
                                   request_serializer=pb.ModelMetadataRequest.SerializeToString,
                                   response_deserializer=pb.ModelMetadataResponse.FromString)

    def feeds_of(fam, batch, seed):
        g = torch.Generator().manual_seed(seed)
        if fam == "mlp":
            return {"input": torch.randn(batch, 1, 28, 28, generator=g)}
        if fam in ("resnet", "unet"):
            return {"image": torch.randn(batch, 3, 16, 16, generator=g)}
        if fam == "rnn":
            return {"x": torch.randn(batch, 7, 6, generator=g)}
        if fam == "bert":
            ids = torch.randint(0, 100, (batch, 9), generator=g)
            mask = torch.ones(batch, 9, dtype=torch.long)
            mask[0, 5:] = 0
            return {"input_ids": ids, "attention_mask": mask}
        return {"input_ids": torch.randint(0, 96, (batch, 7), generator=g)}

    def reference(model, feeds):
        with torch.no_grad():
            r = model(*feeds.values())
        return [t.numpy() for t in (r if isinstance(r, tuple) else (r,))]

    def close(got, want):
        return got.shape == want.shape and float(np.abs(got - want).max()) <= 1e-4 * max(1.0, float(np.abs(want).max()))

    def rest_json(name, feeds):
        body = {"inputs": [{"name": k, "datatype": KS[v.numpy().dtype], "shape": list(v.shape),
                            "data": v.numpy().flatten().tolist()} for k, v in feeds.items()]}
        st, data, _ = post(f"{base}/{name}/infer", json.dumps(body).encode())
        if st != 200:
            return st, data, None
        outs = json.loads(data)["outputs"]
        return st, data, [np.array(o["data"], NP[o["datatype"]]).reshape(o["shape"]) for o in outs]

    def rest_binary(name, feeds):
        raw = [v.numpy().tobytes() for v in feeds.values()]
        head = {"inputs": [{"name": k, "datatype": KS[v.numpy().dtype], "shape": list(v.shape),
                            "parameters": {"binary_data_size": len(r)}} for (k, v), r in zip(feeds.items(), raw)],
                "parameters": {"binary_data_output": True}}
        h = json.dumps(head).encode()
        st, data, hd = post(f"{base}/{name}/infer", h + b"".join(raw),
                            {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(h))})
        if st != 200:
            return st, data, None
        n = int(hd["Inference-Header-Content-Length"])
        outs, at, res = json.loads(data[:n])["outputs"], n, []
        for o in outs:
            size = o["parameters"]["binary_data_size"]
            res.append(np.frombuffer(data[at:at + size], NP[o["datatype"]]).reshape(o["shape"]))
            at += size
        return st, data, res

    def grpc_infer(name, feeds):
        req = pb.ModelInferRequest(model_name=name)
        for k, v in feeds.items():
            req.inputs.add(name=k, datatype=KS[v.numpy().dtype], shape=list(v.shape))
            req.raw_input_contents.append(v.numpy().tobytes())
        r = infer_rpc(req, timeout=60)
        return [np.frombuffer(c, NP[o.datatype]).reshape(list(o.shape)) for o, c in zip(r.outputs, r.raw_output_contents)]

    worst = {}
    for name, (fam, model) in refs.items():
        st, meta = get(f"{base}/{name}")
        check(st == 200 and meta.get("platform") == "loom-onnx", f"{name}: metadata {st} {meta}")
        ins = [(i["name"], i["datatype"], i["shape"][0]) for i in meta.get("inputs", [])]
        want_ins = [(k, KS[v.numpy().dtype], -1) for k, v in feeds_of(fam, 1, 0).items()]
        check(ins == want_ins, f"{name}: metadata inputs {ins}, want {want_ins}")
        check([o["name"] for o in meta.get("outputs", [])] == om.OUTPUTS[fam], f"{name}: metadata outputs {meta.get('outputs')}")
        gm = meta_rpc(pb.ModelMetadataRequest(name=name), timeout=30)
        check([(t.name, t.datatype) for t in gm.inputs] == [(a, b) for a, b, _ in want_ins], f"{name}: gRPC metadata {gm}")
        for how, call, batch in (("REST JSON", rest_json, 1), ("REST binary", rest_binary, 3), ("gRPC", None, 2)):
            feeds = feeds_of(fam, batch, batch)
            want = reference(model, feeds)
            if call is None:
                got = grpc_infer(name, feeds)
            else:
                st, data, got = call(name, feeds)
                check(st == 200, f"{name} {how}: status {st} {data[:300]}")
                if st != 200:
                    continue
            check(len(got) == len(want), f"{name} {how}: {len(got)} outputs")
            for g, w in zip(got, want):
                ok = close(g.astype(np.float32), w)
                check(ok, f"{name} {how} batch {batch}: differs from PyTorch by {float(np.abs(g - w).max()) if g.shape == w.shape else g.shape}")
                if g.shape == w.shape:
                    worst[name] = max(worst.get(name, 0.0), float(np.abs(g - w).max() / max(1.0, np.abs(w).max())))
        # Eight clients at once, one row each: batched across requests, each its own answer.
        many = [feeds_of(fam, 1, 100 + i) for i in range(8)]
        with cf.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda f: grpc_infer(name, f) if fam in ("bert", "mlp") else rest_binary(name, f)[2], many))
        for f, got in zip(many, answers):
            check(got is not None and all(close(g.astype(np.float32), w) for g, w in zip(got, reference(model, f))),
                  f"{name}: a concurrent request got another's answer or a wrong one")

    # The batcher joined the concurrent clients' rows (the segmenter's upsampling and transposed
    # convolutions and the tagger's recurrent layers proven to keep them apart).
    metrics = urllib.request.urlopen(f"http://{http}/metrics", timeout=30).read().decode()
    for name in ("bert-17", "unet-13", "unet-17", "rnn-13", "rnn-17") + tuple(f"{f}-default" for f in DEFAULT):
        sums = re.findall(rf'loom_serve_batch_size_sum\{{model="{name}"\}} ([0-9.e+]+)', metrics)
        counts = re.findall(rf'loom_serve_batch_size_count\{{model="{name}"\}} ([0-9.e+]+)', metrics)
        check(sums and counts and float(sums[0]) > float(counts[0]), f"{name} never ran a batch of several requests: {sums} {counts}")

    # Bad requests: 400 naming the input; the server keeps serving.
    ids = {"name": "input_ids", "datatype": "INT64", "shape": [1, 4], "data": [1, 2, 3, 4]}
    mask = {"name": "attention_mask", "datatype": "INT64", "shape": [1, 4], "data": [1, 1, 1, 1]}
    cases = [
        ("wrong datatype", [dict(ids, datatype="FP32", data=[1.0, 2.0, 3.0, 4.0]), mask], "input 'input_ids' must be INT64, not FP32"),
        ("wrong rank", [dict(ids, shape=[4]), mask], "must have shape [-1, -1] (rank 2)"),
        ("rows differ", [ids, dict(mask, shape=[2, 2])], "has 2 rows"),
        ("sequences differ", [ids, dict(mask, shape=[1, 5], data=[1] * 5)],
         "input 'attention_mask' dimension 1 ('sequence') is 5, but input 'input_ids' has it 4"),
        ("missing input", [ids], "missing input 'attention_mask'"),
        ("unknown input", [ids, mask, dict(ids, name="token_type_ids")], "unexpected input 'token_type_ids'"),
    ]
    for what, inputs, msg in cases:
        st, data, _ = post(f"{base}/bert-17/infer", json.dumps({"inputs": inputs}).encode())
        check(st == 400 and msg in data.decode(), f"{what}: {st} {data[:200]}")
    h = json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1 << 20, 1 << 20],
                                "parameters": {"binary_data_size": 32}},
                               {"name": "attention_mask", "datatype": "INT64", "shape": [1 << 20, 1 << 20],
                                "parameters": {"binary_data_size": 32}}]}).encode()
    st, data, _ = post(f"{base}/bert-17/infer", h + bytes(64),
                       {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(h))})
    check(st == 400 and b"2^31" in data, f"a 2^40-element claim: {st} {data[:200]}")
    st, data, _ = post(f"{base}/bert-17/infer", json.dumps({"inputs": [ids, mask], "outputs": [{"name": "nope"}]}).encode())
    check(st == 400 and b"unknown output 'nope'" in data, f"unknown output: {st} {data[:200]}")
    st, data, _ = post(f"{base}/bert-17/infer", json.dumps({"inputs": [ids, mask], "outputs": [{"name": "pooler_output"}]}).encode())
    check(st == 200 and [o["name"] for o in json.loads(data)["outputs"]] == ["pooler_output"], f"one output asked for: {data[:200]}")
    try:
        grpc_infer("bert-17", {"input_ids": torch.ones(1, 4), "attention_mask": torch.ones(1, 4, dtype=torch.long)})
        check(False, "gRPC took FP32 ids")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "must be INT64" in e.details(), f"gRPC wrong datatype: {e}")
    st, _ = get(f"{base}/mlp-17/ready")
    check(st == 200, "mlp-17 stopped serving after the bad requests")
    check(proc.poll() is None, "loom-serve exited")
    print("onnx_parity: worst relative error per model:", ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items())))
finally:
    proc.terminate()
    proc.wait(timeout=60)

check.done("onnx_parity")
