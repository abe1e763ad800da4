#!/usr/bin/python3
"""gpt_parity.py — loom-train's character-level GPT against the same model in PyTorch 1.13.

loom-train trains a few steps on a text and exports model.h5; PyTorch builds the module below,
loads the weights with load_state_dict(strict=True) (the names and layouts are PyTorch's), and
for one batch the C++ side (parity_tool gpt) and PyTorch compute logits, loss and every
gradient. The largest differences are printed and must be within fp32 tolerance, for each of
attention's two paths (full: the T x T softmax kept; flash: recomputed tile by tile).
With DEVICE cuda (tests/gpu/run.sh, on the GPU machine) loom-train trains on the GPU, and
parity_tool and PyTorch both compute on the GPU (TF32 off: fp32 GEMMs on both sides).
Usage: gpt_parity.py LOOM_TRAIN PARITY_TOOL TEXT WORKDIR [cpu|cuda]
"""
import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
from torch import nn

loom_train, tool, text_path, work = sys.argv[1:5]
device = sys.argv[5] if len(sys.argv) > 5 else "cpu"
torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
os.makedirs(work, exist_ok=True)
model_path = os.path.join(work, "gpt.h5")
subprocess.run([loom_train, "--model", "gpt", "--data", "text:" + text_path, "--context", "32", "--n-layer", "2",
                "--n-head", "4", "--n-embd", "32", "--global-batch", "8", "--steps", "20", "--optimizer", "adamw",
                "--lr", "0.003", "--seed", "4", "--export", model_path, "--log-every", "1000", "--device", device], check=True)


class Attn(nn.Module):
    def __init__(self, c, h, hs):  # hs: each head's width (a pruned model's head_size)
        super().__init__()
        self.h, self.hs = h, hs
        self.c_attn = nn.Linear(c, 3 * h * hs)
        self.c_proj = nn.Linear(h * hs, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(self.h * self.hs, dim=2)
        q, k, v = [z.view(b, t, self.h, self.hs).transpose(1, 2) for z in (q, k, v)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1), float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(b, t, self.h * self.hs))


class Mlp(nn.Module):
    def __init__(self, c, inner):
        super().__init__()
        self.c_fc = nn.Linear(c, inner)
        self.c_proj = nn.Linear(inner, c)

    def forward(self, x):
        return self.c_proj(nn.functional.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, h, hs, inner):
        super().__init__()
        self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(c), Attn(c, h, hs), nn.LayerNorm(c), Mlp(c, inner)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        v, t, c, h = cfg["vocab"], cfg["context"], cfg["embd"], cfg["heads"]
        hs, inner = cfg.get("head_size") or c // h, cfg.get("inner") or 4 * c
        self.wte, self.wpe = nn.Embedding(v, c), nn.Embedding(t, c)
        self.h = nn.ModuleList([Block(c, h, hs, inner) for _ in range(cfg["layers"])])
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, v, bias=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


with h5py.File(model_path, "r") as f:
    cfg = json.loads(f.attrs["model.config"])
    state = {k: torch.from_numpy(np.array(v)) for k, v in f["params"].items()}
model = Gpt(cfg)
model.load_state_dict(state, strict=True)
model.to(device)

index = {b: i for i, b in enumerate(cfg["vocab_bytes"])}  # byte-level tokens
text = open(text_path, "rb").read()
ids = np.array([index[b] for b in text[:5000]], dtype=np.int32)
b, t = 6, cfg["context"]
starts = np.arange(b) * 97 + 11
tokens = np.stack([ids[s:s + t] for s in starts])
targets = np.stack([ids[s + 1:s + t + 1] for s in starts])
tokens.astype(np.int32).tofile(os.path.join(work, "tokens.bin"))
targets.astype(np.int32).tofile(os.path.join(work, "targets.bin"))
logits = model(torch.from_numpy(tokens).long().to(device))
loss = nn.functional.cross_entropy(logits.reshape(-1, cfg["vocab"]),
                                   torch.from_numpy(targets).long().reshape(-1).to(device))
loss.backward()


def compare(attention):
    out = os.path.join(work, attention)
    os.makedirs(out, exist_ok=True)
    subprocess.run([tool, "gpt", model_path, str(b), work, out, device, attention], check=True)
    worst = {}
    c_logits = np.fromfile(os.path.join(out, "logits.bin"), dtype=np.float32).reshape(b * t, -1)
    worst["logits"] = float(np.abs(c_logits - logits.detach().cpu().numpy().reshape(b * t, -1)).max())
    worst["loss"] = abs(float(open(os.path.join(out, "loss.txt")).read()) - loss.item())
    for name, p in model.named_parameters():
        g = np.fromfile(os.path.join(out, f"grad_{name}.bin"), dtype=np.float32).reshape(p.shape)
        ref = p.grad.cpu().numpy()
        worst[f"grad {name}"] = float(np.abs(g - ref).max() / (np.abs(ref).max() + 1e-12))
    grads = {k: v for k, v in worst.items() if k.startswith("grad")}
    for k in ("logits", "loss"):
        print(f"gpt_parity ({device}, {attention} attention): largest difference {k}: {worst[k]:.3g}")
    top = max(grads, key=grads.get)
    print(f"gpt_parity ({attention}): largest relative gradient difference over {len(grads)} tensors: {grads[top]:.3g} ({top})")
    return worst["logits"] < 1e-4 and worst["loss"] < 1e-5 and grads[top] < 1e-3


results = [compare(a) for a in ("full", "flash")]
ok = all(results)
print("gpt_parity: " + ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
