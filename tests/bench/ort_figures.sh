#!/usr/bin/env bash
# ort_figures.sh — the graph executor against ONNX Runtime, in one run: the ResNet, BERT, GPT-2
# and nn.TransformerEncoderLayer encoder of tests/parity/onnx_models.py (exported by
# torch.onnx.export, opset 17; sequence 16, their longest), and the three transformers as ORT's
# transformer optimizer rewrites them (-ortopt), at batch 1 and 32, on 1 and 2 threads (ORT's intra_op_num_threads
# the same, inter-op 1), each side the best of 40 runs on the same input shapes. Target: loom >=
# ORT in every row: 1.0x for BERT and the encoder, 0.8x for ResNet and GPT-2 (ratio = ORT's time / loom's).
# Usage: LOOM_BUILDDIR=_build LOOM_SRCDIR=. tests/bench/ort_figures.sh   (about a minute)
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
declare -A vocab=([resnet]=1 [bert]=100 [gpt2]=96 [encoder]=1 [bert-ortopt]=100 [gpt2-ortopt]=96 [encoder-ortopt]=1) \
  target=([resnet]=0.8 [bert]=1.0 [gpt2]=0.8 [encoder]=1.0 [bert-ortopt]=1.0 [gpt2-ortopt]=0.8 [encoder-ortopt]=1.0)
echo "== loom's executor against ONNX Runtime $("$peer/bin/python" -c 'import onnxruntime; print(onnxruntime.__version__)'), best of 40 runs (ms)"
printf '%-14s %5s %7s | %9s %9s | %6s\n' model batch threads loom ORT ratio
for fam in resnet bert gpt2 encoder bert-ortopt gpt2-ortopt encoder-ortopt; do
  for batch in 1 32; do
    for threads in 1 2; do
      loom_ms=$("$B/loom-bench" infer --onnx "$work/$fam.onnx" --batch $batch --seq 16 --int-max "${vocab[$fam]}" --threads $threads \
        --reps 40 --format json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["onnx_ms"])')
      ort_ms=$("$peer/bin/python" "$S/tests/bench/ort_time.py" "$work/$fam.onnx" $batch 16 $threads "${vocab[$fam]}" 40)
      printf '%-14s %5d %7d | %9.3f %9.3f | %5.2fx%s\n' $fam $batch $threads "$loom_ms" "$ort_ms" \
        "$(echo "$ort_ms $loom_ms" | awk '{print $1/$2}')" "$(echo "$ort_ms $loom_ms ${target[$fam]}" | awk '{print ($1/$2 >= $3) ? "" : "  (target " $3 "x: missed)"}')"
    done
  done
done
