"""onnx_contrib.py — models with ONNX Runtime's own operators (domain com.microsoft), as ORT's
transformer optimizer writes them and as ORT defines each, for tests/parity/onnx_contrib_parity.sh.
Runs under a Python with onnxruntime, onnx and numpy (a peer environment, never Loom's dependency).

  onnx_contrib.py make WORK      ORT's optimizer over WORK/<family>/float.onnx (written beforehand by
                                 onnx_models.py) into ortopt.onnx, and one small model per operator
                                 case in WORK/cases/<case>/, each with its inputs (raw files) and an
                                 `inputs` line for tests/parity/onnx_run
  onnx_contrib.py compare WORK   ORT's answers against what onnx_run wrote in <model dir>/loom/
  onnx_contrib.py serve WORK LOOM_SERVE
                                 the optimized BERT through loom-serve: 12 concurrent one-row
                                 requests, each ORT's answer for that row alone, joined into shared runs
"""
import collections
import concurrent.futures as cf
import json
import logging
import os
import re
import shutil
import sys
import urllib.error
import urllib.request
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
MS = "com.microsoft"
NP = {"float32": np.float32, "int64": np.int64, "int32": np.int32, "bool": np.bool_}
FAMILIES = {"bert": "bert", "gpt2": "gpt2", "encoder": "bert"}
rng = np.random.default_rng(5)


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def save_case(work, name, op, feeds, consts, outputs, attrs=None, inputs_order=None, shapes=None, folder="cases"):
    """One node of `op`; inputs_order lists its operand names ('' for an absent one), each a feed
    (a graph input) or a constant (an initializer). The outputs' shapes are ORT's unless given."""
    d = os.path.join(work, folder, name)
    os.makedirs(d, exist_ok=True)
    order = inputs_order or list(feeds) + list(consts)
    elem = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}
    g_in = [helper.make_tensor_value_info(k, elem[v.dtype.type], list(v.shape)) for k, v in feeds.items()]
    g_out = [helper.make_tensor_value_info(o, TensorProto.INT32 if o == "mask_index" else TensorProto.FLOAT, None)
             for o in outputs if o]
    node = helper.make_node(op, order, outputs, domain=MS, name=name, **(attrs or {}))
    graph = helper.make_graph([node], name, g_in, g_out, [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    # The outputs' shapes as ORT computes them (ONNX's checker wants a shape on each graph output).
    results = [np.zeros(s, np.float32) for s in shapes] if shapes else session(model.SerializeToString()).run(None, feeds)
    del model.graph.output[:]
    for o, r in zip([o for o in outputs if o], results):
        model.graph.output.append(helper.make_tensor_value_info(o, elem[r.dtype.type], list(r.shape)))
    onnx.save(model, os.path.join(d, "model.onnx"))
    write_feeds(d, feeds)


def write_feeds(d, feeds):
    specs = []
    for k, v in feeds.items():
        v.tofile(os.path.join(d, f"{k}.in"))
        specs.append(f"{k}:{v.dtype.name}:{'x'.join(map(str, v.shape))}:{os.path.join(d, k + '.in')}")
    with open(os.path.join(d, "inputs"), "w") as f:
        f.write(" ".join(specs) + "\n")


def read_feeds(d):
    feeds = {}
    for spec in open(os.path.join(d, "inputs")).read().split():
        name, dt, shape, path = spec.split(":")
        feeds[name] = np.fromfile(path, NP[dt]).reshape([int(x) for x in shape.split("x")])
    return feeds


def attention_cases(work):
    x, w, b = f32(2, 5, 16), f32(16, 48, scale=0.3), f32(48, scale=0.1)
    raw = np.ones((2, 5), np.int32)
    raw[0, 3:] = 0
    base = dict(feeds={"x": x}, consts={"w": w, "b": b}, outputs=["y"], attrs={"num_heads": 4})

    def att(name, mask=None, order_extra=(), attrs=None, feeds_extra=None, consts=None, outputs=None, **kw):
        feeds = dict(base["feeds"], **(feeds_extra or {}))
        if mask is not None:
            feeds["mask"] = mask
        order = ["x", "w", "b", "mask" if mask is not None else "", *order_extra]
        while order and order[-1] == "":
            order.pop()
        save_case(work, name, "Attention", feeds, dict(base["consts"], **(consts or {})), outputs or ["y"],
                  dict(base["attrs"], **(attrs or {})), order)

    att("attention")
    att("attention-raw-mask", raw)
    att("attention-end-positions", np.array([3, 5], np.int32))
    att("attention-start-end", np.array([4, 5, 1, 0], np.int32))
    att("attention-3d-mask", (rng.random((2, 5, 5)) > 0.3).astype(np.int32))
    att("attention-causal", raw, attrs={"unidirectional": 1})
    save_case(work, "attention-qkv-sizes", "Attention", {"x": x}, {"w": f32(16, 40, scale=0.3), "b": f32(40)}, ["y"],
              {"num_heads": 2, "qkv_hidden_sizes": [16, 16, 8], "scale": 0.3}, ["x", "w", "b"])
    att("attention-bias", raw, order_extra=["", "ab"], feeds_extra={"ab": f32(1, 4, 5, 5)}, attrs={"mask_filter_value": -1000.0})
    att("attention-present", outputs=["y", "present"])


def multi_head_cases(work):
    q, k, v = f32(2, 5, 16), f32(2, 7, 16), f32(2, 7, 8)
    pad = np.ones((2, 7), np.int32)
    pad[1, 4:] = 0
    bias = f32(40, scale=0.1)
    save_case(work, "mha", "MultiHeadAttention", {"q": q, "k": k, "v": v}, {"b": bias}, ["y"], {"num_heads": 4},
              ["q", "k", "v", "b"])
    save_case(work, "mha-padding", "MultiHeadAttention", {"q": q, "k": k, "v": v, "pad": pad}, {"b": bias}, ["y"],
              {"num_heads": 4}, ["q", "k", "v", "b", "pad"])
    save_case(work, "mha-lengths-bias", "MultiHeadAttention",
              {"q": q, "k": k, "v": v, "len": np.array([7, 2], np.int32), "ab": f32(2, 1, 5, 7)}, {}, ["y", "pk", "pv"],
              {"num_heads": 2, "scale": 0.5}, ["q", "k", "v", "", "len", "ab"])
    save_case(work, "mha-causal", "MultiHeadAttention", {"q": q, "k": f32(2, 5, 16), "v": f32(2, 5, 16)}, {}, ["y"],
              {"num_heads": 4, "unidirectional": 1}, ["q", "k", "v"])


def norm_cases(work):
    ids = rng.integers(0, 30, (2, 6)).astype(np.int32)
    seg = rng.integers(0, 2, (2, 6)).astype(np.int32)
    mask = np.ones((2, 6), np.int32)
    mask[1, 4:] = 0
    tables = {"word": f32(30, 16), "pos": f32(10, 16), "segt": f32(2, 16), "gamma": f32(16), "beta": f32(16)}
    save_case(work, "embed", "EmbedLayerNormalization", {"ids": ids, "seg": seg, "mask": mask}, tables, ["y", "mask_index"],
              {"epsilon": 1e-5}, ["ids", "seg", "word", "pos", "segt", "gamma", "beta", "mask"])
    t2 = {k: v for k, v in tables.items() if k != "segt"}
    save_case(work, "embed-positions", "EmbedLayerNormalization", {"ids": ids, "pids": np.array([[5, 4, 3, 2, 1, 0]], np.int32)},
              t2, ["y", "", "sum"], {}, ["ids", "", "word", "pos", "", "gamma", "beta", "", "pids"])
    x, s = f32(2, 5, 16), f32(2, 5, 16)
    g, b, bias = f32(16), f32(16), f32(16)
    save_case(work, "skip-norm", "SkipLayerNormalization", {"x": x, "s": s}, {"g": g, "b": b, "bias": bias},
              ["y", "", "", "sum"], {"epsilon": 1e-5}, ["x", "s", "g", "b", "bias"])
    save_case(work, "skip-norm-2d-skip", "SkipLayerNormalization", {"x": x, "s": f32(5, 16)}, {"g": g}, ["y"], {}, ["x", "s", "g"])
    save_case(work, "skip-rms-norm", "SkipSimplifiedLayerNormalization", {"x": x, "s": s}, {"g": g, "bias": bias},
              ["y", "", "", "sum"], {"epsilon": 1e-6}, ["x", "s", "g", "bias"])


def gelu_cases(work):
    x, bias = f32(2, 5, 16, scale=2), f32(16)
    save_case(work, "gelu", "Gelu", {"x": x}, {}, ["y"])
    save_case(work, "bias-gelu", "BiasGelu", {"x": x}, {"b": bias}, ["y"])
    save_case(work, "fast-gelu", "FastGelu", {"x": x}, {"b": bias}, ["y"])
    save_case(work, "fast-gelu-nobias", "FastGelu", {"x": x}, {}, ["y"])
    save_case(work, "quick-gelu", "QuickGelu", {"x": x}, {}, ["y"], {"alpha": 1.2})
    save_case(work, "fused-matmul", "FusedMatMul", {"a": f32(2, 3, 8, 5), "b": f32(2, 3, 6, 8)}, {}, ["y"],
              {"transA": 1, "transB": 1, "alpha": 0.5})
    save_case(work, "fused-matmul-weight", "FusedMatMul", {"a": f32(4, 7)}, {"w": f32(7, 3)}, ["y"], {"alpha": 2.0})


def bad_cases(work):
    """Models Loom refuses, each naming what it does not run: an operator of ORT's domain it does not
    have, an Attention given a past state, a mask of a type the operator does not take."""
    x, w = f32(2, 5, 16), f32(16, 48)
    save_case(work, "unknown-op", "Inverse", {"x": f32(2, 3, 3)}, {}, ["y"], folder="bad")
    save_case(work, "past-state", "Attention", {"x": x, "past": f32(2, 2, 4, 3, 4)}, {"w": w}, ["y", "present"],
              {"num_heads": 4}, ["x", "w", "", "", "past"], folder="bad")
    save_case(work, "int64-mask", "Attention", {"x": x, "mask": np.ones((2, 5), np.int64)}, {"w": w}, ["y"], {"num_heads": 4},
              ["x", "w", "", "mask"], shapes=[(2, 5, 16)], folder="bad")
    ids = np.array([[1, 2, 99]], np.int32)
    save_case(work, "id-outside", "EmbedLayerNormalization", {"ids": ids}, {"word": f32(30, 16), "pos": f32(10, 16),
              "gamma": f32(16), "beta": f32(16)}, ["y"], {}, ["ids", "", "word", "pos", "", "gamma", "beta"],
              shapes=[(1, 3, 16)], folder="bad")


def optimize(work):
    from onnxruntime.transformers import optimizer
    for fam, kind in FAMILIES.items():
        m = optimizer.optimize_model(f"{work}/{fam}/float.onnx", model_type=kind, num_heads=4, hidden_size=32, opt_level=0)
        m.save_model_to_file(f"{work}/{fam}/ortopt.onnx")
        ops = collections.Counter(n.op_type for n in onnx.load(f"{work}/{fam}/ortopt.onnx").graph.node if n.domain == MS)
        print(f"{fam}/ortopt.onnx: ORT's optimizer wrote {', '.join(f'{k} x{v}' for k, v in sorted(ops.items()))}")


def make(work):
    optimize(work)
    for cases in (attention_cases, multi_head_cases, norm_cases, gelu_cases, bad_cases):
        cases(work)


def session(path):
    o = ort.SessionOptions()
    o.intra_op_num_threads = 2
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def compare(work):
    dirs = [f"{work}/{fam}" for fam in FAMILIES] + sorted(f"{work}/cases/{c}" for c in os.listdir(f"{work}/cases"))
    bad = 0
    for d in dirs:
        model = f"{d}/ortopt.onnx" if os.path.exists(f"{d}/ortopt.onnx") else f"{d}/model.onnx"
        s = session(model)
        for o, ref in zip(s.get_outputs(), s.run(None, read_feeds(d))):
            path = f"{d}/loom/{o.name}.bin"
            got = np.fromfile(path, ref.dtype) if os.path.exists(path) else None
            if got is None or got.size != ref.size:
                print(f"{d}: {o.name} DIFFERENT (missing or {None if got is None else got.size} values for {ref.size})")
                bad += 1
                continue
            err = float(np.max(np.abs(got.reshape(ref.shape) - ref), initial=0)) / max(1.0, float(np.max(np.abs(ref), initial=0)))
            ok = err <= 1e-4
            bad += not ok
            print(f"{os.path.relpath(d, work)}: {o.name} {'same' if ok else 'DIFFERENT'} {err:.1e}")
    return bad


def serve(work, loom_serve):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serve"))
    from kserve_py import start_server
    os.makedirs(f"{work}/repo/bert/1", exist_ok=True)
    shutil.copy(f"{work}/bert/ortopt.onnx", f"{work}/repo/bert/1/model.onnx")
    s = session(f"{work}/repo/bert/1/model.onnx")
    proc, (http, _), _ = start_server([loom_serve, "--model-repository", f"{work}/repo", "--http-port", "0", "--grpc-port", "0",
                                       "--max-queue-delay-us", "20000"], f"{work}/serve.log")
    bad = 0
    try:
        many = []
        for i in range(12):
            mask = np.ones((1, 12), np.int64)
            mask[0, 12 - i % 5:] = 0  # right padding, as ORT's fused mask reads it
            many.append({"input_ids": rng.integers(0, 100, (1, 12)).astype(np.int64), "attention_mask": mask})

        def infer(f):
            body = {"inputs": [{"name": k, "datatype": "INT64", "shape": list(v.shape), "data": v.ravel().tolist()} for k, v in f.items()]}
            req = urllib.request.Request(f"http://{http}/v2/models/bert/infer", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            o = json.loads(urllib.request.urlopen(req, timeout=60).read())["outputs"][0]
            return np.array(o["data"], np.float32).reshape(o["shape"])

        with cf.ThreadPoolExecutor(12) as pool:
            got = list(pool.map(infer, many))
        for f, y in zip(many, got):
            want = s.run(None, f)[0]
            if y.shape != want.shape or float(np.abs(y - want).max()) > 1e-4 * max(1.0, float(np.abs(want).max())):
                print("FAIL: a concurrent request's answer differs from ORT's for its row alone")
                bad += 1
                break
        # An id past the embedding table: a 400 naming the node, and the server goes on.
        try:
            infer({"input_ids": np.full((1, 12), 1000, np.int64), "attention_mask": np.ones((1, 12), np.int64)})
            print("FAIL: an input id past the table was answered")
            bad += 1
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            print(f"served: an id past the table: {e.code} {text[:160]}")
            if e.code != 400 or "EmbedLayerNormalization" not in text or "outside its table" not in text:
                bad += 1
        if float(np.abs(infer(many[0]) - got[0]).max()) != 0:
            print("FAIL: the server's answer changed after a refused request")
            bad += 1
        metrics = urllib.request.urlopen(f"http://{http}/metrics", timeout=30).read().decode()
        rows = re.search(r'loom_serve_batch_size_sum\{model="bert"\} ([0-9.e+]+)', metrics)
        runs = re.search(r'loom_serve_batch_size_count\{model="bert"\} ([0-9.e+]+)', metrics)
        print(f"served: 12 concurrent requests in {runs.group(1) if runs else '?'} runs")
        if not (rows and runs and float(rows.group(1)) > float(runs.group(1))):
            print("FAIL: concurrent requests never shared a run")
            bad += 1
    finally:
        proc.terminate()
        proc.wait()
    return bad


if __name__ == "__main__":
    mode, work = sys.argv[1], sys.argv[2]
    if mode == "make":
        make(work)
    elif mode == "compare":
        sys.exit(1 if compare(work) else 0)
    else:
        sys.exit(1 if serve(work, sys.argv[3]) else 0)
