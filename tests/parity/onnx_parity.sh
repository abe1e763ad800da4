#!/usr/bin/env bash
# onnx_parity.sh — runs tests/parity/onnx_parity.py with Debian's Python (PyTorch, onnx, grpcio):
# models exported by torch.onnx.export (Debian's PyTorch 1.13, and PyPI's PyTorch 2 as users
# call it) served by loom-serve, answers equal to PyTorch's.
. "$(dirname "$0")/../integration/lib.sh"
require_onnx_serve
/usr/bin/python3 -c 'import onnx' 2>/dev/null || skip "python3-onnx (ONNX's checker) is needed"
# PyTorch 2's exporter, as users run it: LOOM_TORCH_PYTHON where it has torch.onnx's dynamo
# exporter (onnxscript) and transformers, else PyPI's in a peer environment (about 5 GB, made once).
export_py=${LOOM_TORCH_PYTHON:-}
if [ "${LOOM_DISTCHECK:-0}" = 1 ]; then  # not a second 5 GB environment for the tarball's build
  export_py=""
  echo "SKIP (part): PyTorch 2's exporter: LOOM_DISTCHECK=1: ran in make check of the same sources"
elif [ -z "$export_py" ] || ! "$export_py" -c 'import torch, onnxscript, transformers' 2>/dev/null; then
  export_py=""
  venv=$("$LOOM_SRCDIR/contrib/peer-venv.sh" torch-export torch onnx onnxscript transformers 2>"$LOOM_TMP/peer.err") &&
    export_py=$venv/bin/python3 || echo "SKIP (part): PyTorch 2's exporter: $(cat "$LOOM_TMP/peer.err")"
fi
export LOOM_EXPORT_PYTHON=$export_py
if /usr/bin/python3 "$LOOM_SRCDIR/tests/parity/onnx_parity.py" "$LOOM_BUILDDIR/loom-serve" "$LOOM_SRCDIR/serve/proto" \
     "$LOOM_TMP/work" 2>"$LOOM_TMP/exporter.log"; then pass; else fail "ONNX models served as PyTorch answers"; fi
# Hugging Face's BERT, DistilBERT, GPT-2, Llama, ViT and T5 encoder through the same exporter.
if [ -n "$export_py" ]; then
  run_cmd "$export_py" "$LOOM_SRCDIR/tests/parity/onnx_hf_exports.py" "$LOOM_BUILDDIR/tests/parity/onnx_run" "$LOOM_TMP/hf" \
    "$LOOM_BUILDDIR/loom-serve"
  echo "$out" | grep -E "^(onnx_hf_exports|FAIL)"
  [ "$rc" = 0 ] && pass || fail "Hugging Face models exported by PyTorch 2: $(echo "$out" | grep FAIL | head -3)"
fi
finish
