#!/usr/bin/env bash
# pipeline.sh — runs tests/serve/pipeline_test.py: the seed's multimodal InferencePipeline over
# three real loom-serve services, against PyTorch and the three calls one after another.
. "$(dirname "$0")/lib.sh"
/usr/bin/python3 -c 'import torch, grpc, google.protobuf' 2>/dev/null || skip "python3-torch and python3-grpcio are needed"
command -v protoc >/dev/null || skip "protoc (protobuf-compiler) is needed"
[ -x "$LOOM_BUILDDIR/loom-serve" ] || skip "loom-serve not built"
"$LOOM_BUILDDIR/loom-serve" --help 2>&1 | grep -q grpc-port || skip "loom-serve built without gRPC"
[ -x "$LOOM_BUILDDIR/tests/parity/onnx_run" ] || skip "loom-serve built without ONNX (libonnx-dev)"
if /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/pipeline_test.py" "$LOOM_BUILDDIR/loom-serve" "$LOOM_SRCDIR" "$LOOM_TMP/work" \
     2>"$LOOM_TMP/exporter.log"; then pass; else fail "the multimodal pipeline"; fi
finish
