#!/usr/bin/env bash
# onnx_parity.sh — runs tests/parity/onnx_parity.py with Debian's Python (PyTorch, onnx, grpcio):
# models exported by torch.onnx.export served by loom-serve, answers equal to PyTorch's.
. "$(dirname "$0")/../integration/lib.sh"
require_onnx_serve
/usr/bin/python3 -c 'import onnx' 2>/dev/null || skip "python3-onnx (ONNX's checker) is needed"
if /usr/bin/python3 "$LOOM_SRCDIR/tests/parity/onnx_parity.py" "$LOOM_BUILDDIR/loom-serve" "$LOOM_SRCDIR/serve/proto" \
     "$LOOM_TMP/work" 2>"$LOOM_TMP/exporter.log"; then pass; else fail "ONNX models served as PyTorch answers"; fi
finish
