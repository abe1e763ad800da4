"""ort_time.py — ONNX Runtime's best time for one model, the peer of the executor's benchmarks
(ort_figures.sh, serve_kserve_figures.sh): inputs shaped as loom-bench infer shapes them (the
first free dimension the batch, the others the sequence), floats uniform in [0, 1), integer ids
below the vocabulary, masks all ones (boolean ones all false: PyTorch's key padding masks).

Usage: python ort_time.py MODEL.onnx BATCH SEQ THREADS VOCAB REPS   prints milliseconds
"""
import sys
import time

import numpy as np
import onnxruntime as ort

path, batch, seq, threads, vocab, reps = sys.argv[1], *map(int, sys.argv[2:7])
so = ort.SessionOptions()
so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(1)
feeds = {}
for i in s.get_inputs():
    shape = [batch if k == 0 else (d if isinstance(d, int) else seq) for k, d in enumerate(i.shape)]
    if i.type == "tensor(float)":
        feeds[i.name] = rng.random(shape, dtype=np.float32)
    elif i.type == "tensor(bool)":  # PyTorch's key_padding_mask: nothing padded
        feeds[i.name] = np.zeros(shape, bool)
    else:
        feeds[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, vocab, shape)
for _ in range(3):
    s.run(None, feeds)
best = 1e9
for _ in range(reps):
    t = time.perf_counter()
    s.run(None, feeds)
    best = min(best, time.perf_counter() - t)
print(f"{best * 1e3:.3f}")
