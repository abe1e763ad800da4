#!/usr/bin/env bash
# serve_stream_flood.sh — a ModelStreamInfer client that sends requests and never reads the
# answers (issue 33, item 5): the server must stop reading the stream (flow control) instead of
# buffering answers without bound; its peak memory grows < 100 MiB, it takes only about as many
# requests as it may hold, and it keeps answering others.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
require_onnx_serve
cd "$LOOM_TMP" || exit 99
/usr/bin/python3 -c 'import onnx' 2>/dev/null || skip "python3-onnx is needed"
/usr/bin/python3 - <<'PY' || exit 99
import os
import onnx
from onnx import TensorProto as T, helper as h
g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "relu", [h.make_tensor_value_info("x", T.FLOAT, [None, 65536])],
                 [h.make_tensor_value_info("y", T.FLOAT, [None, 65536])])
m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
m.ir_version = 7
os.makedirs("repo/relu/1")
onnx.save(m, "repo/relu/1/model.onnx")
PY
chmod -R go-w repo
serve_start main --model-repository repo --grpc-port 0 --max-request-bytes 1048576
[ -n "$grpc" ] || { cat main.log; exit 99; }
# 256 KiB requests and answers: 20,000 of them would be 5 GiB each way.
out=$(/usr/bin/python3 "$LOOM_SRCDIR/tests/serve/stream_flood.py" "$LOOM_SRCDIR/serve/proto" "$LOOM_TMP/py" "$grpc" relu "$pid" 20000 6 65536 2>&1)
echo "$out"
grown=$(printf '%s' "$out" | sed -n 's/.*peak memory grew \(-\?[0-9]*\) MiB.*/\1/p')
taken=$(printf '%s' "$out" | sed -n 's/^stream_flood: \([0-9]*\) requests taken.*/\1/p')
[ -n "$grown" ] && [ "$grown" -lt 100 ] && pass || fail "a client that never reads grew the server by ${grown:-?} MiB"
[ -n "$taken" ] && [ "$taken" -lt 2000 ] && pass || fail "the server read ${taken:-?} requests of a client that reads nothing"
expect_match "the server still answers others" '"ready":true' "$(curl -s "http://$http/v2/models/relu/ready")"
kill -TERM "$pid"
wait "$pid"
expect_eq "loom-serve exits cleanly on SIGTERM" 0 $?
finish
