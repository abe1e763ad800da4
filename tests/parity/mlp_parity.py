#!/usr/bin/python3
"""mlp_parity.py — loom-train's MLP against PyTorch 1.13 (Debian's python3-torch), same weights.

1. loom-train trains a few steps on Fashion-MNIST and exports model.h5.
2. h5py reads it and PyTorch builds the same model with load_state_dict(strict=True): the names
   and layouts are PyTorch's.
3. For one batch, the C++ side (mlp_parity_tool) and PyTorch compute logits, loss and every
   gradient; the largest differences are printed and must be within fp32 tolerance.
4. PyTorch's test accuracy with the exported weights equals what loom-train reported.
With DEVICE cuda (tests/gpu/run.sh, on the GPU machine) loom-train trains on the GPU, and
parity_tool and PyTorch both compute on the GPU (TF32 off: fp32 GEMMs on both sides); there the
two GEMM libraries' sums may order differently, so a test image whose two best logits tie within
rounding may go either way: the count of right answers may differ by 2 of 10,000.
Usage: mlp_parity.py LOOM_TRAIN PARITY_TOOL WORKDIR [cpu|cuda [FASHION_MNIST_DIR]]
"""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch

loom_train, tool, work = sys.argv[1:4]
device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
data_dir = sys.argv[5] if len(sys.argv) > 5 else "/usr/share/datasets/fashion-mnist"
torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
os.makedirs(work, exist_ok=True)
model_path = os.path.join(work, "model.h5")
metrics = os.path.join(work, "metrics.jsonl")
subprocess.run([loom_train, "--steps", "60", "--global-batch", "64", "--lr", "0.05", "--seed", "5",
                "--export", model_path, "--metrics-file", metrics, "--log-every", "1000", "--device", device,
                "--data", "fashion-mnist:" + data_dir], check=True)


class Mlp(torch.nn.Module):
    def __init__(self, widths):
        super().__init__()
        self.n = len(widths) - 1
        for i in range(self.n):
            setattr(self, f"fc{i + 1}", torch.nn.Linear(widths[i], widths[i + 1]))

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"fc{i + 1}")(x)
            if i + 1 < self.n:
                x = torch.relu(x)
        return x


with h5py.File(model_path, "r") as f:
    assert f.attrs["loom.format"] in (b"model", "model"), f.attrs["loom.format"]
    cfg = json.loads(f.attrs["model.config"])
    state = {k: torch.from_numpy(np.array(v)) for k, v in f["params"].items()}
model = Mlp(cfg["layers"])
model.load_state_dict(state, strict=True)
model.to(device)


def read_idx(path):
    import gzip
    with gzip.open(path, "rb") as g:
        raw = g.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


scale = cfg["preprocess"]["scale"]
test_x = torch.from_numpy(read_idx(f"{data_dir}/t10k-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) * np.float32(scale))
test_y = torch.from_numpy(read_idx(f"{data_dir}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
test_x, test_y = test_x.to(device), test_y.to(device)

# One batch through both.
b = 96
x = test_x[:b].clone()
y = test_y[:b].clone()
x.cpu().numpy().tofile(os.path.join(work, "x.bin"))
y.to(torch.int32).cpu().numpy().tofile(os.path.join(work, "y.bin"))
subprocess.run([tool, "mlp", model_path, str(b), work, work, device], check=True)
logits = model(x)
loss = torch.nn.functional.cross_entropy(logits, y)
loss.backward()
worst = {}
c_logits = np.fromfile(os.path.join(work, "logits.bin"), dtype=np.float32).reshape(b, -1)
worst["logits"] = float(np.abs(c_logits - logits.detach().cpu().numpy()).max())
worst["loss"] = abs(float(open(os.path.join(work, "loss.txt")).read()) - loss.item())
for name, p in model.named_parameters():
    g = np.fromfile(os.path.join(work, f"grad_{name}.bin"), dtype=np.float32).reshape(p.shape)
    ref = p.grad.cpu().numpy()
    worst[f"grad {name}"] = float(np.abs(g - ref).max() / (np.abs(ref).max() + 1e-12))
ok = worst["logits"] < 1e-4 and worst["loss"] < 1e-5 and all(v < 1e-4 for k, v in worst.items() if k.startswith("grad"))
for k, v in worst.items():
    print(f"mlp_parity ({device}): largest difference {k}: {v:.3g}")

# Accuracy with the exported weights, against loom-train's own evaluation.
with torch.no_grad():
    correct = int((model(test_x).argmax(1) == test_y).sum().item())
    acc = correct / len(test_y)
reported = [json.loads(line) for line in open(metrics) if '"eval"' in line][-1]["test_accuracy"]
print(f"mlp_parity: test accuracy PyTorch {acc:.4f}, loom-train {reported:.4f}")
slack = 2 if device == "cuda" else 0  # see the docstring
ok = ok and abs(correct - round(reported * len(test_y))) <= slack  # the same number of test images right
print("mlp_parity: " + ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
