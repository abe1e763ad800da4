#!/usr/bin/env bash
# serve_onnx_attacks.sh — one hostile ONNX request or file against a real loom-serve (issue 33,
# items 1-3): shapes computed from request data that wrap int64 (a heap read, or SIGSEGV
# before), a rank-0 tensor reaching an axis operator (an abort, at load or per request), and
# request-driven shapes with no cap (Expand, Pad, Range, ConstantOfShape), parameters given with
# each request (a Reshape's shape, a Resize's scales, an integer divisor of 0), an answer whose JSON
# rendering would pass the budget. Each attack is checked
# for its status, the {"error": ...} body naming the operator, the time (< 2 s), the server's peak
# memory (VmHWM grows < 200 MiB against a 1 GiB default budget, set to 64 MiB here) and that a
# healthy model beside it keeps answering. The models are built with Debian's python3-onnx.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
require_onnx_graph
PY=/usr/bin/python3
cd "$LOOM_TMP" || exit 99

# The models: each in its own folder of one repository, with one healthy model beside them.
$PY - <<'PY' || exit 99
import os
import onnx
from onnx import TensorProto as T, helper as h

def save(name, nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    os.makedirs(f"repo/{name}/1", exist_ok=True)
    onnx.save(m, f"repo/{name}/1/model.onnx")

i64 = lambda n, s: h.make_tensor_value_info(n, T.INT64, s)
f32 = lambda n, s: h.make_tensor_value_info(n, T.FLOAT, s)
one = h.make_tensor("one", T.INT64, [2], [1, 1])
# 1. ConstantOfShape(Add(shape, [1,1])) -> Gather(idx): the shape's product wraps.
save("cos_gather", [h.make_node("Add", ["shape", "one"], ["s1"]),
                    h.make_node("ConstantOfShape", ["s1"], ["c"], value=h.make_tensor("v", T.FLOAT, [1], [1.0])),
                    h.make_node("Gather", ["c", "idx"], ["y"], axis=0)],
     [i64("shape", [2]), i64("idx", [None])], [f32("y", [None, None])], [one])
# 1b. ConstantOfShape alone.
save("cos", [h.make_node("ConstantOfShape", ["shape"], ["y"], value=h.make_tensor("v", T.FLOAT, [1], [2.0]))],
     [i64("shape", [2])], [f32("y", [None, None])])
# 2. Add(axes, -1) -> Squeeze -> Gather: a rank-0 tensor reaches Gather at request time.
minus = h.make_tensor("minus", T.INT64, [1], [-1])
save("squeeze_gather", [h.make_node("Add", ["axes", "minus"], ["a1"]),
                        h.make_node("Squeeze", ["x", "a1"], ["s"]),
                        h.make_node("Gather", ["s", "idx"], ["y"], axis=0)],
     [f32("x", [1, 1]), i64("axes", [2]), i64("idx", [1])], [f32("y", [None])], [minus])
# 2b. The same at load: Squeeze(x[a,b]) -> Gather passes ONNX's checker and shape inference;
# the load's run on zeros (a = b = 1) squeezes x to a scalar, other sizes do not.
save("load_scalar", [h.make_node("Squeeze", ["x"], ["s"]), h.make_node("Gather", ["s", "idx"], ["y"], axis=0)],
     [f32("x", ["a", "b"])], [f32("y", [None])], [h.make_tensor("idx", T.INT64, [1], [0])])
# 3. Request-driven sizes: Expand, Pad, Range (float and int).
save("expand", [h.make_node("Expand", ["x", "shape"], ["y"])], [f32("x", [1]), i64("shape", [2])], [f32("y", [None, None])])
save("pad", [h.make_node("Pad", ["x", "pads"], ["y"])], [f32("x", [1, 1]), i64("pads", [4])], [f32("y", [None, None])])
# (The delta is d + 1, so that the load's run on zeros has a non-zero delta.)
save("frange", [h.make_node("Add", ["d", "f1"], ["d1"]), h.make_node("Range", ["a", "b", "d1"], ["y"])],
     [f32("a", []), f32("b", []), f32("d", [])], [f32("y", [None])], [h.make_tensor("f1", T.FLOAT, [], [1.0])])
save("irange", [h.make_node("Add", ["d", "i1"], ["d1"]), h.make_node("Range", ["a", "b", "d1"], ["y"])],
     [i64("a", []), i64("b", []), i64("d", [])], [i64("y", [None])], [h.make_tensor("i1", T.INT64, [], [1])])
# 4. Parameters that come with each request (the load's run on zeros cannot check them): a
# Reshape's shape, a Resize's scales, an integer divisor.
save("reshape", [h.make_node("Reshape", ["x", "shape"], ["y"])], [f32("x", [None]), i64("shape", [2])], [f32("y", [None, None])])
save("resize", [h.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear")],
     [f32("x", [1, 1, 2, 2]), f32("scales", [4])], [f32("y", [None, None, None, None])])
save("imod", [h.make_node("Mod", ["x", "y"], ["z"]), h.make_node("Div", ["x", "y"], ["q"])],
     [i64("x", [None]), i64("y", [1])], [i64("z", [None]), i64("q", [None])])
# The healthy one.
save("relu", [h.make_node("Relu", ["x"], ["y"])], [f32("x", [None, 4])], [f32("y", [None, 4])])
PY
chmod -R go-w repo

serve_start main --model-repository repo --grpc-port -1 --max-run-memory-mb 64
[ -n "$http" ] || { cat main.log; exit 99; }
hwm_kib() { awk '/VmHWM/ {print $2}' "/proc/$pid/status"; }
healthy='{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"data":[-1,2,-3,4]}]}'
curl -s -o /dev/null -X POST "http://$http/v2/models/relu/infer" -d "$healthy"
base=$(hwm_kib)

# attack WHAT MODEL BODY CODE REGEX: one request, timed, with every check.
attack() {
  local what=$1 model=$2 body=$3 want=$4 re=$5 t0 t1 got code text hwm
  t0=$(date +%s.%N)
  got=$(curl -s --max-time 20 -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
    "http://$http/v2/models/$model/infer" -d "$body")
  t1=$(date +%s.%N)
  code=${got##*$'\n'}
  text=${got%$'\n'*}
  expect_eq "$what: status" "$want" "$code"
  expect_match "$what: error body" "^\{\"error\":\".*$re" "$text"
  $PY -c "import sys; sys.exit(0 if $t1 - $t0 < 2.0 else 1)" && pass || fail "$what: took $($PY -c "print(round($t1 - $t0, 2))") s"
  kill -0 "$pid" 2>/dev/null && pass || { fail "$what: the server died"; exit 1; }
  hwm=$(hwm_kib)
  [ $((hwm - base)) -lt $((200 * 1024)) ] && pass || fail "$what: peak memory grew by $(((hwm - base) / 1024)) MiB"
  expect_match "$what: the healthy model still answers" '"data":\[0(\.0)?,2(\.0)?,0(\.0)?,4(\.0)?\]' \
    "$(curl -s -X POST "http://$http/v2/models/relu/infer" -d "$healthy")"
}
req() {  # NAME DATATYPE SHAPE DATA ... as KServe v2 JSON
  local out='{"inputs":[' sep=''
  while [ $# -ge 4 ]; do
    out+="$sep{\"name\":\"$1\",\"datatype\":\"$2\",\"shape\":$3,\"data\":$4}"
    sep=,
    shift 4
  done
  printf '%s]}' "$out"
}

attack "ConstantOfShape [2^56, 255] then Gather 0..15 (wrapped to a 1 KiB buffer)" cos_gather \
  "$(req shape INT64 '[2]' "[$((1 << 56)), 255]" idx INT64 '[16]' '[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]')" \
  400 "ConstantOfShape.*more (elements|bytes) than any memory holds"
attack "ConstantOfShape [2^62, 3] then Gather [2^40] (SIGSEGV before)" cos_gather \
  "$(req shape INT64 '[2]' "[$((1 << 62)), 3]" idx INT64 '[1]' "[$((1 << 40))]")" 400 "ConstantOfShape"
attack "ConstantOfShape [4611686018427387905, 4] (answered 200 with 4 values)" cos \
  "$(req shape INT64 '[2]' '[4611686018427387905, 4]')" 400 "ConstantOfShape.*more (elements|bytes) than any memory holds"
attack "ConstantOfShape [-1, 4]" cos "$(req shape INT64 '[2]' '[-1, 4]')" 400 "negative dimension"
attack "Squeeze to a scalar, then Gather (abort before)" squeeze_gather \
  "$(req x FP32 '[1,1]' '[7]' axes INT64 '[2]' '[1, 2]' idx INT64 '[1]' '[0]')" 400 "Gather.*outside a tensor of rank 0"
attack "Expand to [50000, 50000] (10 GB)" expand "$(req x FP32 '[1]' '[1]' shape INT64 '[2]' '[50000, 50000]')" \
  400 "Expand.*memory budget"
attack "Expand to [8192, 8192] (256 MiB, past the 64 MiB budget)" expand \
  "$(req x FP32 '[1]' '[1]' shape INT64 '[2]' '[8192, 8192]')" 400 "Expand.*memory budget"
attack "Pad by 2^31 rows" pad "$(req x FP32 '[1,1]' '[1]' pads INT64 '[4]' "[$((1 << 31)), 0, 0, 0]")" 400 "Pad"
attack "float Range of 10^12 values" frange "$(req a FP32 '[]' '[0]' b FP32 '[]' '[1e12]' d FP32 '[]' '[0]')" 400 "Range"
attack "int Range of 2^31 values" irange "$(req a INT64 '[]' '[0]' b INT64 '[]' "[$((1 << 31))]" d INT64 '[]' '[0]')" \
  400 "Range"
# Within the run's budget, but its JSON rendering (a json value and ~16 characters per float)
# is not: refused before it is built; the binary extension still answers.
attack "Expand to [2048, 2048] as JSON (16 MiB of floats, ~128 MiB of JSON)" expand \
  "$(req x FP32 '[1]' '[1]' shape INT64 '[2]' '[2048, 2048]')" 400 "as JSON would take [0-9]+ MiB.*binary"
expect_eq "the same answer in the binary extension" 200 "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
  "http://$http/v2/models/expand/infer" -d "$(req x FP32 '[1]' '[1]' shape INT64 '[2]' '[2048, 2048]' | \
  sed 's/]}$/],"parameters":{"binary_data_output":true}}/')")"
# Within the budget the same models still answer.
expect_match "Expand within the budget" '"shape":\[2,3\]' \
  "$(curl -s -X POST "http://$http/v2/models/expand/infer" -d "$(req x FP32 '[1]' '[5]' shape INT64 '[2]' '[2, 3]')")"
# Parameters given with each request: the models load, saying so; hostile values are a 400 naming
# the node, sound ones are answered.
expect_match "a request's Reshape shape: loaded, saying so" "loaded model reshape .*input 'shape' gives Reshape.* comes with each request" "$(cat main.log)"
attack "Reshape 4 values to [-1, -1]" reshape "$(req x FP32 '[4]' '[1,2,3,4]' shape INT64 '[2]' '[-1, -1]')" 400 "Reshape"
attack "Reshape 4 values to [2^62, 2^62]" reshape "$(req x FP32 '[4]' '[1,2,3,4]' shape INT64 '[2]' "[$((1 << 62)), $((1 << 62))]")" 400 "Reshape"
expect_match "Reshape to a sound shape" '"shape":\[2,2\]' \
  "$(curl -s -X POST "http://$http/v2/models/reshape/infer" -d "$(req x FP32 '[4]' '[1,2,3,4]' shape INT64 '[2]' '[2, -1]')")"
attack "Resize by 10^5 (40 GB)" resize "$(req x FP32 '[1,1,2,2]' '[1,2,3,4]' scales FP32 '[4]' '[1, 1, 1e5, 1e5]')" 400 "Resize"
attack "Resize by -1" resize "$(req x FP32 '[1,1,2,2]' '[1,2,3,4]' scales FP32 '[4]' '[1, 1, 2, -1]')" 400 "Resize"
expect_match "Resize by 2" '"shape":\[1,1,4,4\]' \
  "$(curl -s -X POST "http://$http/v2/models/resize/infer" -d "$(req x FP32 '[1,1,2,2]' '[1,2,3,4]' scales FP32 '[4]' '[1, 1, 2, 2]')")"
attack "integer Mod and Div by 0 (SIGFPE, were it run)" imod "$(req x INT64 '[2]' '[7, -7]' y INT64 '[1]' '[0]')" 400 "(Mod|Div).*zero"
expect_match "integer Mod and Div of INT64_MIN by -1 (SIGFPE, were it run): wrapped, as numpy" '"data":\[0\].*"data":\[-9223372036854775808\]' \
  "$(curl -s -X POST "http://$http/v2/models/imod/infer" -d "$(req x INT64 '[1]' '[-9223372036854775808]' y INT64 '[1]' '[-1]')")"
expect_match "integer Mod (the divisor's sign) and Div (toward zero, as ONNX Runtime) by 3" '"data":\[1,2\].*"data":\[2,-2\]' \
  "$(curl -s -X POST "http://$http/v2/models/imod/infer" -d "$(req x INT64 '[2]' '[7, -7]' y INT64 '[1]' '[3]')")"
# A model whose run on zeros at load (its open dimensions at 1) squeezes x to a scalar before a
# Gather: it may need other sizes there, so it loads with the failure in its load line; a request
# of those sizes is a 400 naming the node, one of other sizes is answered; the server serves on.
expect_match "its load line names the node that failed on zeros" "loaded model load_scalar .*fails on zeros .*Gather.*rank 0" "$(cat main.log)"
attack "the rank-0 Gather at a request of [1, 1]" load_scalar "$(req x FP32 '[1,1]' '[7]')" 400 "Gather.*rank 0"
expect_match "a request of [1, 3] is answered" '"data":\[7\.0\]' \
  "$(curl -s -X POST "http://$http/v2/models/load_scalar/infer" -d "$(req x FP32 '[1,3]' '[7, 8, 9]')")"
expect_eq "the server is ready" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/v2/health/ready")"
kill -TERM "$pid"
wait "$pid"
expect_eq "loom-serve exits cleanly on SIGTERM" 0 $?
finish
