#!/usr/bin/env bash
# ort_figures.sh — the graph executor against ONNX Runtime, in one run: the ResNet, BERT, GPT-2
# and nn.TransformerEncoderLayer encoder of tests/parity/onnx_models.py (exported by
# torch.onnx.export, opset 17; sequence 16, their longest), the three transformers as ORT's
# transformer optimizer rewrites them (-ortopt), and the four quantized by onnxruntime.quantization
# (-dyn: quantize_dynamic, int8 weights; -qdq and -qop: quantize_static's QDQ and QOperator formats,
# calibrated on random inputs; the encoder's masked scores calibrate to an infinite range, so it
# has no static forms), at batch 1 and 32, on 1 and 2 threads (ORT's intra_op_num_threads the same,
# inter-op 1), each side the best of 40 runs on the same input shapes. Target: loom >= ORT in
# every row: 1.0x for BERT and the encoder, 0.8x for ResNet and GPT-2, 0.9x for the quantized
# models (ratio = ORT's time / loom's). Loom's side runs with the allocator loom-serve links
# (tcmalloc, where configure found it), as ORT's runs with its own arena.
# Usage: LOOM_BUILDDIR=_build LOOM_SRCDIR=. tests/bench/ort_figures.sh   (about two minutes)
set -euo pipefail
B=$(cd "${LOOM_BUILDDIR:-.}" && pwd)
S=$(cd "${LOOM_SRCDIR:-$(dirname "$0")/../..}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-ort-figures.XXXXXX")
trap 'rm -rf "$work"' EXIT
[ -x "$B/tests/parity/onnx_run" ] || { echo "ort_figures: loom built without ONNX, nothing measured"; exit 0; }
peer=$(LOOM_BUILDDIR=$B "$S/contrib/peer-venv.sh" ortq onnxruntime onnx numpy sympy) || { echo "ort_figures: no ONNX Runtime peer, nothing measured"; exit 0; }
/usr/bin/python3 - "$S/tests/parity" "$work" <<'PY' 2>/dev/null
import sys
sys.path.insert(0, sys.argv[1])
import onnx_models as om
for fam in ("resnet", "bert", "gpt2", "encoder"):
    om.export(fam, f"{sys.argv[2]}/{fam}.onnx", 17)
PY
# The transformers again as ORT's transformer optimizer rewrites them (its com.microsoft operators),
# each side running that same file.
"$peer/bin/python" - "$work" <<'PY' 2>/dev/null
import sys
from onnxruntime.transformers import optimizer
for fam, kind in (("bert", "bert"), ("gpt2", "gpt2"), ("encoder", "bert")):
    m = optimizer.optimize_model(f"{sys.argv[1]}/{fam}.onnx", model_type=kind, num_heads=4, hidden_size=32, opt_level=0)
    m.save_model_to_file(f"{sys.argv[1]}/{fam}-ortopt.onnx")
PY
# The quantized forms, by ORT's own tools.
"$peer/bin/python" - "$work" <<'PY' 2>/dev/null
import sys
import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
class Feeds(CalibrationDataReader):
    def __init__(self, path, vocab):
        rng, self.items = np.random.default_rng(2), []
        for _ in range(4):
            feeds = {}
            for i in ort.InferenceSession(path).get_inputs():
                shape = [4 if k == 0 else (d if isinstance(d, int) else 16) for k, d in enumerate(i.shape)]
                feeds[i.name] = (rng.random(shape, dtype=np.float32) if i.type == "tensor(float)" else np.zeros(shape, bool)
                                 if i.type == "tensor(bool)" else np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, vocab, shape))
            self.items.append(feeds)
    def get_next(self):
        return self.items.pop() if self.items else None
for fam, vocab in (("resnet", 1), ("bert", 100), ("gpt2", 96), ("encoder", 1)):
    f = f"{sys.argv[1]}/{fam}.onnx"
    quantize_dynamic(f, f"{sys.argv[1]}/{fam}-dyn.onnx", weight_type=QuantType.QInt8)
    if fam != "encoder":
        quantize_static(f, f"{sys.argv[1]}/{fam}-qdq.onnx", Feeds(f, vocab), quant_format=QuantFormat.QDQ)
        quantize_static(f, f"{sys.argv[1]}/{fam}-qop.onnx", Feeds(f, vocab), quant_format=QuantFormat.QOperator)
PY
vocab_of() { case $1 in bert*) echo 100 ;; gpt2*) echo 96 ;; *) echo 1 ;; esac; }
target_of() {
  case $1 in
    *-dyn | *-qdq | *-qop) echo 0.9 ;;
    resnet* | gpt2*) echo 0.8 ;;
    *) echo 1.0 ;;
  esac
}
# The allocator loom-serve runs the executor with, where it links one.
allocator=$(ldd "$B/loom-serve" 2>/dev/null | awk '/libtcmalloc/ {print $3; exit}')
echo "== loom's executor (allocator: ${allocator:-glibc malloc}) against ONNX Runtime $("$peer/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)'), best of 40 runs (ms)"
printf '%-14s %5s %7s | %9s %9s | %6s\n' model batch threads loom ORT ratio
for fam in resnet bert gpt2 encoder bert-ortopt gpt2-ortopt encoder-ortopt \
  resnet-dyn resnet-qdq resnet-qop bert-dyn bert-qdq bert-qop gpt2-dyn gpt2-qdq gpt2-qop encoder-dyn; do
  [ -f "$work/$fam.onnx" ] || { echo "$fam: not written (the quantizer failed), not measured"; continue; }
  for batch in 1 32; do
    for threads in 1 2; do
      loom_ms=$(LD_PRELOAD=$allocator "$B/loom-bench" infer --onnx "$work/$fam.onnx" --batch $batch --seq 16 --int-max "$(vocab_of $fam)" --threads $threads \
        --reps 40 --format json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["onnx_ms"])')
      ort_ms=$("$peer/bin/python" "$S/tests/bench/ort_time.py" "$work/$fam.onnx" $batch 16 $threads "$(vocab_of $fam)" 40)
      printf '%-14s %5d %7d | %9.3f %9.3f | %5.2fx%s\n' $fam $batch $threads "$loom_ms" "$ort_ms" \
        "$(echo "$ort_ms $loom_ms" | awk '{print $1/$2}')" "$(echo "$ort_ms $loom_ms $(target_of $fam)" | awk '{print ($1/$2 >= $3) ? "" : "  (target " $3 "x: missed)"}')"
    done
  done
done
