#!/usr/bin/env bash
# pipeline_hops.sh — runs tests/serve/pipeline_hops_test.py: a pipeline whose step is a scripted
# gRPC server answering wrong sizes, shapes and types, and a 12 MB tensor through a hop.
. "$(dirname "$0")/lib.sh"
require_onnx_serve
if /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/pipeline_hops_test.py" "$LOOM_BUILDDIR/loom-serve" "$LOOM_SRCDIR" "$LOOM_TMP/work"; then
  pass
else
  fail "pipeline hops"
fi
finish
