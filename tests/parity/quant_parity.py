#!/usr/bin/python3
"""quant_parity.py — loom-compress against PyTorch 1.13 (Debian's python3-torch).

1. loom-train trains a small MLP; loom-compress quantizes it and prunes it.
2. Every int8 weight of the INT8 file equals torch.quantize_per_channel(w, scale, zero_point,
   axis 0, torch.qint8).int_repr() for the float weights and the file's own scales: exactly.
3. The scales are PyTorch's PerChannelMinMaxObserver (qint8, per_channel_symmetric) scales.
4. PyTorch rebuilds the pruned file from h5py (load_state_dict, strict) and its test accuracy
   equals what loom-compress eval reports.
Usage: quant_parity.py LOOM_TRAIN LOOM_COMPRESS WORKDIR
"""
import gzip
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch

loom_train, loom_compress, work = sys.argv[1:4]
data = "/usr/share/datasets/fashion-mnist"
os.makedirs(work, exist_ok=True)
fp32, int8, pruned = (os.path.join(work, n) for n in ("fp32.h5", "int8.h5", "pruned.h5"))
subprocess.run([loom_train, "--layers", "784,64,32,10", "--steps", "300", "--seed", "3", "--export", fp32,
                "--log-every", "1000"], check=True, stdout=subprocess.DEVNULL)
subprocess.run([loom_compress, "quantize", fp32, "-o", int8, "--calib-samples", "500"], check=True,
               stdout=subprocess.DEVNULL)
subprocess.run([loom_compress, "prune", fp32, "-o", pruned, "--sparsity", "0.4"], check=True, stdout=subprocess.DEVNULL)

failures = []
with h5py.File(fp32, "r") as f, h5py.File(int8, "r") as q:
    for name in f["params"]:
        if not name.endswith(".weight"):
            assert q["params"][name].dtype == np.float32, f"{name}: biases stay float32"
            continue
        w = torch.from_numpy(np.array(f["params"][name]))
        ds = q["params"][name]
        assert ds.dtype == np.int8, f"{name} is {ds.dtype}"
        scale = torch.from_numpy(np.array(ds.attrs["scale"], dtype=np.float64))
        zp = int(ds.attrs["zero_point"])
        ref = torch.quantize_per_channel(w, scale, torch.full((w.shape[0],), zp, dtype=torch.int64), 0, torch.qint8)
        got = torch.from_numpy(np.array(ds))
        diff = (ref.int_repr() != got).sum().item()
        print(f"{name}: {w.numel()} weights, {diff} differ from torch.quantize_per_channel")
        if diff:
            failures.append(name)
        obs = torch.ao.quantization.PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                                             qscheme=torch.per_channel_symmetric)
        obs(w)
        tscale, tzp = obs.calculate_qparams()
        rel = ((tscale.double() - scale).abs() / scale).max().item()
        print(f"{name}: largest relative difference from PyTorch's observer scales {rel:.2e}")
        if rel > 1e-6 or tzp.abs().max().item() != 0:
            failures.append(name + " scales")


def images():
    with gzip.open(os.path.join(data, "t10k-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(os.path.join(data, "t10k-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


with h5py.File(pruned, "r") as f:
    cfg = json.loads(f.attrs["model.config"])
    state = {k: torch.from_numpy(np.array(v)) for k, v in f["params"].items()}
widths = cfg["layers"]
layers = []
for i in range(len(widths) - 1):
    layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
    if i + 2 < len(widths):
        layers.append(torch.nn.ReLU())
model = torch.nn.Sequential(*layers)
model.load_state_dict({f"{2 * (int(k[2:].split('.')[0]) - 1)}.{k.split('.')[1]}": v for k, v in state.items()}, strict=True)
x, y = images()
with torch.no_grad():
    acc = (model(x).argmax(1) == y).float().mean().item()
report = json.loads(subprocess.run([loom_compress, "eval", pruned, "--format", "json"], check=True,
                                   capture_output=True, text=True).stdout)
print(f"pruned {widths}: PyTorch test accuracy {acc:.4f}, loom-compress eval {report['test_accuracy']:.4f}")
if abs(acc - report["test_accuracy"]) > 1e-4:
    failures.append("pruned accuracy")
if widths[1] != round(64 * 0.6) or widths[2] != round(32 * 0.6):
    failures.append(f"pruned widths {widths}")
if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
