"""onnx_hf_exports.py — Hugging Face transformers models as users export them with PyTorch 2
(torch.onnx.export(model, (), kwargs=inputs, dynamic_shapes=..., dynamo=True): opset 20, the
weights in a .data file), run by Loom's executor (tests/parity/onnx_run) at two batch sizes and
two sequence lengths, each answer equal to PyTorch's own (relative error <= 1e-4). Those whose
requests the load check proves independent are then served by a real loom-serve to 12 concurrent
clients: each answer PyTorch's, and the requests joined into shared runs.

Small random configurations of BERT, DistilBERT, GPT-2, Llama (grouped-query attention, RoPE,
RMSNorm, SiLU), ViT and T5's encoder. Prints what onnx_run says of each (whether its requests are
batched, and why not). Runs under a Python with PyPI's torch, onnxscript and transformers.

usage: onnx_hf_exports.py ONNX_RUN WORK_DIR LOOM_SERVE
"""
import concurrent.futures as cf
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import urllib.request
import warnings

import numpy as np
import onnx
import torch
import transformers as tf
from torch.export import Dim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "serve"))
from kserve_py import start_server  # noqa: E402

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
onnx_run, work, serve = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
torch.manual_seed(0)
small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
MODELS = {
    "bert": lambda: tf.BertModel(tf.BertConfig(vocab_size=100, **small)),
    "distilbert": lambda: tf.DistilBertModel(tf.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64)),
    "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=100, num_key_value_heads=2, max_position_embeddings=64, **small)),
    "vit": lambda: tf.ViTModel(tf.ViTConfig(image_size=32, patch_size=8, **small)),
    "t5-encoder": lambda: tf.T5EncoderModel(tf.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)),
}


def feeds(name, batch, seq, g):
    if name == "vit":
        return {"pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}
    f = {"input_ids": torch.randint(0, 100, (batch, seq), generator=g)}
    if name in ("bert", "distilbert"):
        f["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
        f["attention_mask"][0, seq // 2:] = 0
    return f


def first_output(r):
    return (r.logits if hasattr(r, "logits") else r.last_hidden_state).numpy()


failed = 0
batched = {}  # name -> the PyTorch model, for those proven independent
for name, make in MODELS.items():
    model = make().eval()
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    g = torch.Generator().manual_seed(1)
    example = feeds(name, 2, 9, g)
    b, s = Dim("batch", min=1, max=64), Dim("sequence", min=2, max=60)
    shapes = {k: ({0: b, 1: s} if v.dim() == 2 else {0: b}) for k, v in example.items()}
    path = os.path.join(work, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (), path, kwargs=example, dynamic_shapes=shapes, dynamo=True)
    said = ""
    for batch, seq in ((1, 5), (3, 12)):
        f = feeds(name, batch, seq, g)
        with torch.no_grad():
            want = first_output(model(**f))
        out = os.path.join(work, f"{name}-{batch}")
        os.makedirs(out, exist_ok=True)
        specs = []
        for k, v in f.items():
            v.numpy().tofile(f"{out}/{k}.in")
            specs.append(f"{k}:{'float32' if v.dtype == torch.float32 else 'int64'}:{'x'.join(map(str, v.shape))}:{out}/{k}.in")
        r = subprocess.run([onnx_run, path, out, *specs], capture_output=True, text=True)
        text = (r.stdout + r.stderr).strip()
        said = said or next((line for line in text.splitlines() if "rows:" in line), "")
        # The graph's first output is the model's first: logits or last_hidden_state.
        first = onnx.load(path, load_external_data=False).graph.output[0].name
        if r.returncode != 0 or not os.path.exists(f"{out}/{first}.bin"):
            print(f"FAIL: {name} at batch {batch}: {text[-400:]}")
            failed += 1
            continue
        got = np.fromfile(f"{out}/{first}.bin", dtype=np.float32)
        err = float(np.abs(got - want.ravel()).max()) / max(1.0, float(np.abs(want).max())) if got.size == want.size else None
        if err is None or err > 1e-4:
            print(f"FAIL: {name} at batch {batch}, sequence {seq}: {'shape ' + str(got.size) if err is None else f'error {err:.1e}'}")
            failed += 1
    print(f"onnx_hf_exports: {name}: {said}")
    if said.endswith("rows: independent"):
        batched[name] = model
        os.makedirs(f"{work}/repo/{name}/1", exist_ok=True)
        shutil.copy(path, f"{work}/repo/{name}/1/model.onnx")
        shutil.copy(path + ".data", f"{work}/repo/{name}/1/{name}.onnx.data")


def infer(http, name, f):
    inputs = [{"name": k, "datatype": "FP32" if v.dtype == torch.float32 else "INT64", "shape": list(v.shape),
               "data": v.numpy().ravel().tolist()} for k, v in f.items()]
    req = urllib.request.Request(f"http://{http}/v2/models/{name}/infer", data=json.dumps({"inputs": inputs}).encode(),
                                 headers={"Content-Type": "application/json"})
    o = json.loads(urllib.request.urlopen(req, timeout=60).read())["outputs"][0]
    return np.array(o["data"], np.float32).reshape(o["shape"])


proc, (http, _), text = start_server([serve, "--model-repository", f"{work}/repo", "--http-port", "0", "--grpc-port", "0",
                                      "--max-queue-delay-us", "20000"], f"{work}/serve.log")
try:
    for name, model in batched.items():
        g = torch.Generator().manual_seed(7)
        many = [{k: v[:1] for k, v in feeds(name, 1, 11, g).items()} for _ in range(12)]
        with cf.ThreadPoolExecutor(12) as pool:
            got = list(pool.map(lambda f: infer(http, name, f), many))
        for f, y in zip(many, got):
            with torch.no_grad():
                want = first_output(model(**f))
            if y.shape != want.shape or float(np.abs(y - want).max()) > 1e-4 * max(1.0, float(np.abs(want).max())):
                print(f"FAIL: {name}: a concurrent request's answer differs from PyTorch's")
                failed += 1
                break
        metrics = urllib.request.urlopen(f"http://{http}/metrics", timeout=30).read().decode()
        rows = re.search(rf'loom_serve_batch_size_sum\{{model="{name}"\}} ([0-9.e+]+)', metrics)
        runs = re.search(rf'loom_serve_batch_size_count\{{model="{name}"\}} ([0-9.e+]+)', metrics)
        joined = rows and runs and float(rows.group(1)) > float(runs.group(1))
        print(f"onnx_hf_exports: {name}: 12 concurrent requests in {runs.group(1) if runs else '?'} runs")
        if not joined:
            print(f"FAIL: {name}: concurrent requests never shared a run")
            failed += 1
finally:
    proc.terminate()
    proc.wait()
print(f"onnx_hf_exports: {len(MODELS)} models, {failed} failures")
sys.exit(1 if failed else 0)
