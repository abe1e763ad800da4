"""onnx_hf_exports.py — Hugging Face transformers models as users export them with PyTorch 2
(torch.onnx.export(model, (), kwargs=inputs, dynamic_shapes=..., dynamo=True): opset 20, the
weights in a .data file), run by Loom's executor (tests/parity/onnx_run) at two batch sizes and
two sequence lengths, each answer equal to PyTorch's own (relative error <= 1e-4).

Small random configurations of BERT, DistilBERT, GPT-2, Llama (grouped-query attention, RoPE,
RMSNorm, SiLU), ViT and T5's encoder. Prints what onnx_run says of each (whether its requests are
batched, and why not). Runs under a Python with PyPI's torch, onnxscript and transformers.

usage: onnx_hf_exports.py ONNX_RUN WORK_DIR
"""
import logging
import os
import subprocess
import sys
import warnings

import numpy as np
import onnx
import torch
import transformers as tf
from torch.export import Dim

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
onnx_run, work = sys.argv[1:3]
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
print(f"onnx_hf_exports: {len(MODELS)} models, {failed} failures")
sys.exit(1 if failed else 0)
