#!/usr/bin/python3
"""gemm_peer.py — Loom's GPU GEMMs against torch.matmul at a GPT's shapes, on the same GPU.

Runs gemm_cuda_bench (Loom: fp32 cublasSgemm, fp16/bf16 tensor cores on fp32 operands, INT8
through cuBLASLt), then times PyTorch at the same shapes and prints one table with the ratios:
  fp32  torch.matmul on fp32 tensors, TF32 off
  fp16  torch.matmul on fp16 tensors (the GEMM alone) and under autocast on fp32 tensors
        (the cast included, as mixed-precision training runs it)
  bf16  likewise
  int8  torch._int_mm (int8 x int8 -> int32)
Each time is the median of 7 timings of repeated calls, with CUDA events. Writes the joined rows
as JSON to OUT_JSON when given.
Usage: gemm_peer.py GEMM_CUDA_BENCH [OUT_JSON] [bench options...]
"""
import json
import subprocess
import sys

import torch

bench, out_json = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
extra = sys.argv[3:]
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

rows = [json.loads(l) for l in subprocess.run([bench] + extra, check=True, capture_output=True, text=True).stdout.splitlines()
        if l.startswith("{")]


def median_ms(fn, flops):
    inner = max(1, int(2e11 / flops))
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / inner)
    return sorted(times)[len(times) // 2]


g = torch.Generator(device="cuda").manual_seed(1)
print(f"GEMMs Y[m,n] = X[m,k] W[n,k]^T on {torch.cuda.get_device_name()}, torch {torch.__version__}, "
      f"cuBLAS {torch.backends.cuda.preferred_blas_library() if hasattr(torch.backends.cuda, 'preferred_blas_library') else ''}")
print(f"{'layer':12} {'m':>6} {'n':>6} {'k':>6} {'prec':5} {'loom TFLOP/s':>12} {'torch':>8} {'ratio':>6} "
      f"{'autocast':>8} {'ratio':>6}")
for r in rows:
    m, n, k, p = r["m"], r["n"], r["k"], r["precision"]
    flops = 2.0 * m * n * k
    if p == "int8":
        x = torch.randint(-127, 128, (m, k), dtype=torch.int8, device="cuda", generator=g)
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda", generator=g)
        wt = w.t()
        try:
            r["torch_ms"] = median_ms(lambda: torch._int_mm(x, wt), flops)
        except RuntimeError as e:  # _int_mm's shape rules
            r["torch_ms"], r["torch_error"] = None, str(e).splitlines()[0]
    else:
        dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[p]
        x = torch.rand((m, k), device="cuda", generator=g) * 2 - 1
        w = torch.rand((n, k), device="cuda", generator=g) * 2 - 1
        xl, wl = x.to(dt), w.to(dt)
        r["torch_ms"] = median_ms(lambda: torch.matmul(xl, wl.t()), flops)
        if p != "fp32":
            def cast():
                with torch.autocast("cuda", dtype=dt):
                    return torch.matmul(x, w.t())
            r["autocast_ms"] = median_ms(cast, flops)
    tf = lambda ms: flops / (ms * 1e-3) / 1e12 if ms else float("nan")
    r["torch_tflops"] = tf(r["torch_ms"])
    r["ratio"] = r["torch_ms"] / r["ms"] if r["torch_ms"] else None  # > 1: Loom faster
    ac = r.get("autocast_ms")
    r["autocast_ratio"] = ac / r["ms"] if ac else None
    print(f"{r['layer']:12} {m:6} {n:6} {k:6} {p:5} {r['tflops']:12.1f} {r['torch_tflops']:8.1f} "
          f"{(r['ratio'] or float('nan')):6.2f} {(tf(ac) if ac else float('nan')):8.1f} {(r['autocast_ratio'] or float('nan')):6.2f}"
          + (f"  ({r['torch_error']})" if r.get("torch_error") else "") + ("" if p != "int8" else
                                                                        f"  cuBLASLt: {r['cublaslt']}"))
if out_json:
    json.dump(rows, open(out_json, "w"), indent=1)
