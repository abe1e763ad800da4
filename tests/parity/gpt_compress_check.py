#!/usr/bin/python3
"""gpt_compress_check.py — loom-compress's gpt files against PyTorch 1.13 (Debian's python3-torch).

  int8 FLOAT.h5 INT8.h5     every int8 weight equals torch.quantize_per_channel(w, scale, 0, axis 0,
                            qint8).int_repr() for the float weights; the scales are PyTorch's
                            PerChannelMinMaxObserver's (qint8, per_channel_symmetric); the rest
                            of the file is the float model's, unchanged
  eval MODEL.h5 TEXT JSON   PyTorch's loss and next-token accuracy over the windows loom-compress
                            eval scores (context T, one after another, bytes outside the
                            vocabulary left out) equal the JSON it printed; MODEL may be pruned
                            (head_size, inner), float or int8-weights (the dequantized weights)
  agree A B                 the share of positions where two greedy continuations agree (printed)
The PyTorch module is tests/parity/gpt_parity.py's.
"""
import json
import math
import os
import sys

import h5py
import numpy as np
import torch
from torch import nn

src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_parity.py")).read()
exec(src[src.index("class Attn"):src.index("\nwith h5py.File")])


def state_of(f):
    state = {}
    for k, ds in f["params"].items():
        a = np.array(ds)
        if a.dtype == np.int8:  # int8-weights files run as their dequantized float model
            a = a.astype(np.float32) * np.array(ds.attrs["scale"], dtype=np.float32)[:, None]
        state[k] = torch.from_numpy(a)
    return state


def check_int8(fp32, int8):
    bad = []
    with h5py.File(fp32, "r") as f, h5py.File(int8, "r") as q:
        for name in f["params"]:
            ds = q["params"][name]
            w = torch.from_numpy(np.array(f["params"][name]))
            if ds.dtype != np.int8:
                same = np.array_equal(np.array(ds), w.numpy())
                print(f"{name}: float, {'equal to' if same else 'DIFFERENT from'} the float model's")
                if not same:
                    bad.append(name)
                continue
            scale = torch.from_numpy(np.array(ds.attrs["scale"], dtype=np.float64))
            ref = torch.quantize_per_channel(w, scale, torch.zeros(w.shape[0], dtype=torch.int64), 0, torch.qint8)
            diff = (ref.int_repr() != torch.from_numpy(np.array(ds))).sum().item()
            obs = torch.ao.quantization.PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                                                 qscheme=torch.per_channel_symmetric)
            obs(w)
            tscale, tzp = obs.calculate_qparams()
            rel = ((tscale.double() - scale).abs() / scale).max().item()
            print(f"{name}: int8, {diff} of {w.numel()} differ from torch.quantize_per_channel; scales within {rel:.1e} of "
                  "PerChannelMinMaxObserver's")
            if diff or rel > 1e-6 or tzp.abs().max().item() != 0 or int(ds.attrs["zero_point"]) != 0:
                bad.append(name)
    return bad


def check_eval(model, text, got):
    with h5py.File(model, "r") as f:
        cfg = json.loads(f.attrs["model.config"])
        state = state_of(f)
    m = Gpt(cfg)
    m.load_state_dict(state, strict=True)
    index = {b: i for i, b in enumerate(cfg["vocab_bytes"])}
    ids = [index[b] for b in open(text, "rb").read() if b in index]
    t = cfg["context"]
    windows = (len(ids) - 1) // t
    x = torch.tensor([ids[w * t:(w + 1) * t] for w in range(windows)])
    y = torch.tensor([ids[w * t + 1:(w + 1) * t + 1] for w in range(windows)])
    with torch.no_grad():
        logits = torch.cat([m(x[i:i + 16]) for i in range(0, windows, 16)])
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    acc = (logits.argmax(-1) == y).double().mean().item()
    print(f"{model}: PyTorch loss {loss:.5f} accuracy {acc:.5f} on {windows * t} tokens; loom-compress eval loss "
          f"{got['loss']:.5f} accuracy {got['accuracy']:.5f} on {got['tokens']}")
    ok = abs(loss - got["loss"]) < 1e-3 * max(1.0, loss) and abs(acc - got["accuracy"]) < 2e-3 and got["tokens"] == windows * t
    return [] if ok else [model]


cmd = sys.argv[1]
if cmd == "int8":
    bad = check_int8(sys.argv[2], sys.argv[3])
elif cmd == "eval":
    bad = check_eval(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
elif cmd == "agree":
    a, b = sys.argv[2].encode(), sys.argv[3].encode()
    n = max(len(a), len(b), 1)
    same = sum(1 for i in range(min(len(a), len(b))) if a[i] == b[i])
    prefix = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    print(f"{same / n:.3f} {prefix}")
    bad = []
else:
    sys.exit(f"unknown command {cmd}")
if bad:
    sys.exit("FAIL: " + ", ".join(bad))
