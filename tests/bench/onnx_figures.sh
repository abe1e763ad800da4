#!/usr/bin/env bash
# onnx_figures.sh — the figures of issue 14, measured side by side in one run on this machine:
# the 784-512-512-10 MLP served from its ONNX export against the same model from HDF5 (target
# >= 0.95x rows/s), and a small BERT (d 256, 4 layers, 4 heads) exported by torch.onnx.export at
# batch 32, sequence 128: loom's executor against PyTorch's eager forward on the same threads
# (target >= 1.0x), with the GEMM roofline (loom-bench gemm's sgemm on the FFN's shape).
# Usage: LOOM_BUILDDIR=_build LOOM_SRCDIR=. tests/bench/onnx_figures.sh   (about two minutes on 2 cores)
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(dirname "$0")/../..}
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-onnx-figures.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "== the 784-512-512-10 MLP: ONNX (loom-compress convert) against HDF5, one thread (target >= 0.95x)"
"$B/loom-train" --layers 784,512,512,10 --steps 50 --global-batch 128 --export "$work/mlp.h5" --log-every 100000 >/dev/null 2>&1
"$B/loom-compress" convert "$work/mlp.h5" "$work/mlp.onnx" >/dev/null
for b in 1 32 256; do "$B/loom-bench" infer --onnx "$work/mlp.onnx" --model "$work/mlp.h5" --batch "$b" --threads 1 --reps 50; done
echo "== small BERT, batch 32, sequence 128 (target >= 1.0x PyTorch eager on the same threads)"
# PyTorch's Linear layers are OpenBLAS's sgemm here: the kernels for this CPU, as Loom's own
# programs choose them (OpenBLAS 0.3.21 takes a CPU it does not know for a Prescott).
peer_env=$("$B/loom-bench" peer-env)
[ -n "$peer_env" ] && echo "PyTorch peer: $peer_env" && export "${peer_env?}"
for threads in 1 2; do
  # PyTorch's best on these cores: intra-op threads and its BLAS's own threads both set.
  torch_ms=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads /usr/bin/python3 - "$S/tests/parity" "$work" "$threads" <<'PY' 2>/dev/null
import math, os, sys, time
import torch
sys.path.insert(0, sys.argv[1])
import onnx_models as om
torch.manual_seed(0)
torch.set_num_threads(int(sys.argv[3]))
m = om.Bert(vocab=1000, d=256, heads=4, layers=4, maxlen=128).eval()
ids, mask = torch.randint(0, 1000, (32, 128)), torch.ones(32, 128, dtype=torch.long)
path = os.path.join(sys.argv[2], "bert.onnx")
if not os.path.exists(path):
    torch.onnx.export(m, (ids, mask), path, opset_version=17, input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"},
                                    "last_hidden_state": {0: "b"}, "pooler_output": {0: "b"}})
with torch.no_grad():
    m(ids, mask)
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        m(ids, mask)
        best = min(best, time.perf_counter() - t)
print("%.1f" % (best * 1e3))
PY
  )
  loom=$("$B/loom-bench" infer --onnx "$work/bert.onnx" --batch 32 --seq 128 --int-max 1000 --threads "$threads" --reps 5 --format json)
  loom_ms=$(echo "$loom" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["onnx_ms"])')
  gemm=$("$B/loom-bench" gemm --m 4096 --n 1024 --k 256 --threads "$threads" --reps 5 --format json)
  /usr/bin/python3 - "$threads" "$torch_ms" "$loom_ms" "$gemm" <<'PY'
import json, sys
threads, torch_ms, loom_ms, gemm = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
# FLOPs of the GEMMs: per layer Q, K, V, O (4 x 2 B T d d), the FFN (2 x 2 B T d 4d), attention (2 x 2 B h T T dk).
B, T, d, h, L = 32, 128, 256, 4, 4
flops = L * (4 * 2 * B * T * d * d + 2 * 2 * B * T * d * 4 * d + 2 * 2 * B * h * T * T * (d // h))
sg = gemm["sgemm_gflops"]
print(f"bert batch 32, {threads} thread(s): loom {loom_ms:.1f} ms, PyTorch eager {torch_ms:.1f} ms, ratio {torch_ms / loom_ms:.2f}x; "
      f"{flops / loom_ms / 1e6:.1f} GFLOP/s over the model's {flops / 1e9:.1f} GFLOP of GEMMs = "
      f"{flops / loom_ms / 1e6 / sg * 100:.0f}% of sgemm's {sg:.1f} GFLOP/s on 4096x1024x256")
PY
done
