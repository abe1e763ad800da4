#!/usr/bin/env bash
# onnx_parity.sh — runs tests/parity/onnx_parity.py with Debian's Python (PyTorch, onnx, grpcio):
# models exported by torch.onnx.export served by loom-serve, answers equal to PyTorch's.
. "$(dirname "$0")/../integration/lib.sh"
/usr/bin/python3 -c 'import torch, onnx, grpc, google.protobuf' 2>/dev/null || skip "python3-torch, python3-onnx and python3-grpcio are needed"
command -v protoc >/dev/null || skip "protoc (protobuf-compiler) is needed"
[ -x "$LOOM_BUILDDIR/loom-serve" ] || skip "loom-serve not built"
"$LOOM_BUILDDIR/loom-serve" --help 2>&1 | grep -q grpc-port || skip "loom-serve built without gRPC"
[ -x "$LOOM_BUILDDIR/tests/parity/onnx_run" ] || skip "loom-serve built without ONNX (libonnx-dev)"
if /usr/bin/python3 "$LOOM_SRCDIR/tests/parity/onnx_parity.py" "$LOOM_BUILDDIR/loom-serve" "$LOOM_SRCDIR/serve/proto" \
     "$LOOM_TMP/work" 2>"$LOOM_TMP/exporter.log"; then pass; else fail "ONNX models served as PyTorch answers"; fi
finish
