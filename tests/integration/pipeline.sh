#!/usr/bin/env bash
# pipeline.sh — runs tests/serve/pipeline_test.py: the seed's multimodal InferencePipeline over
# three real loom-serve services, against PyTorch and the three calls one after another.
. "$(dirname "$0")/lib.sh"
require_onnx_serve
if /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/pipeline_test.py" "$LOOM_BUILDDIR/loom-serve" "$LOOM_SRCDIR" "$LOOM_TMP/work" \
     2>"$LOOM_TMP/exporter.log"; then pass; else fail "the multimodal pipeline"; fi
finish
