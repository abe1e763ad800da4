#!/usr/bin/env bash
# serve_batch_isolation.sh — requests share a batch only when no answer can depend on another
# request (issue 33, item 4). Against a real loom-serve holding requests 300 ms so that they
# meet: y = x - ReduceMean(x, axes=[0]) and the Gram matrix x @ x^T must answer each client as
# if it ran alone (they used to reveal the other client's rows); y = x - ReduceMean(x, axes=[1])
# still batches; a folder's Triton config.pbtxt with max_batch_size 0 never batches, and 2 caps
# a batch at 2 rows (a request of 3 rows: 400). The models are built with Debian's python3-onnx.
. "$(dirname "$0")/lib.sh"
require_onnx_graph
PY=/usr/bin/python3
cd "$LOOM_TMP" || exit 99

$PY - <<'PY' || exit 99
import os
import onnx
from onnx import TensorProto as T, helper as h

def save(name, nodes, config=None):
    x = h.make_tensor_value_info("x", T.FLOAT, ["N", 2])
    y = h.make_tensor_value_info("y", T.FLOAT, ["N", None])
    m = h.make_model(h.make_graph(nodes, name, [x], [y]), opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 7
    onnx.checker.check_model(m)
    os.makedirs(f"repo/{name}/1", exist_ok=True)
    onnx.save(m, f"repo/{name}/1/model.onnx")
    if config is not None:
        open(f"repo/{name}/config.pbtxt", "w").write(config)

mean = lambda axis: [h.make_node("ReduceMean", ["x"], ["m"], axes=[axis], keepdims=1), h.make_node("Sub", ["x", "m"], ["y"])]
save("colmean", mean(0))
save("gram", [h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), h.make_node("MatMul", ["x", "xt"], ["y"])])
save("rowmean", mean(1))
save("never", mean(1), 'name: "never"\nplatform: "onnxruntime_onnx"  # as Triton writes it\nmax_batch_size: 0\n'
     'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]\n')
save("two", mean(1), 'max_batch_size: 2\ndynamic_batching { max_queue_delay_microseconds: 300000 }\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n')
save("badcfg", mean(1), 'max_batch_size: -4\n')
PY
chmod -R go-w repo

serve_start main --model-repository repo --grpc-port -1 --max-queue-delay-us 300000 --max-batch-size 8
[ -n "$http" ] || { cat main.log; exit 99; }
expect_match "the cross-row model runs alone, with the reason" "colmean.*one request at a time \(ReduceMean.*rows" "$(cat main.log)"
expect_match "so does the Gram matrix" "gram.*one request at a time \(MatMul" "$(cat main.log)"
expect_match "the row-wise model batches" "rowmean.*batched up to 8 rows" "$(cat main.log)"
expect_match "max_batch_size 0 never batches" "never.*one request at a time \(config.pbtxt" "$(cat main.log)"
expect_match "max_batch_size 2 caps the batch" "two.*batched up to 2 rows" "$(cat main.log)"
expect_match "a bad config.pbtxt is refused, naming the model" "cannot load model badcfg.*config.pbtxt max_batch_size -4 is negative" "$(cat main.log)"

# Clients A and B at once, each answer compared with A's alone; then the batch histogram.
out=$($PY - "$http" <<'PY'
import json, sys, threading, urllib.request
base = f"http://{sys.argv[1]}/v2/models"

def infer(model, rows):
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [len(rows), 2],
                                   "data": [v for r in rows for v in r]}]}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{base}/{model}/infer", body), timeout=20) as r:
            return r.status, json.loads(r.read())["outputs"][0]["data"]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

def together(model, many):
    got = [None] * len(many)
    def one(i): got[i] = infer(model, many[i])
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(many))]
    for t in ts: t.start()
    for t in ts: t.join()
    return got

a, b = [[1, 1]], [[100, 5]]
for model in ("colmean", "gram", "rowmean", "never"):
    alone = infer(model, a)
    both = together(model, [a, b, b, b])
    print(model, "alone", alone[1], "beside", both[0][1], "same" if alone == both[0] else "DIFFERENT")
print("two", "three-rows", infer("two", [[1, 2], [3, 4], [5, 6]])[0])
together("two", [a] * 6)
metrics = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics").read().decode()
for line in metrics.splitlines():
    if line.startswith("loom_serve_batch_size_"):
        print(line)
PY
)
echo "$out" | grep -q "^colmean" || { echo "$out"; cat main.log; exit 99; }
[ -n "${LOOM_TEST_VERBOSE:-}" ] && echo "$out"
for model in colmean gram rowmean never; do
  expect_match "$model: A's answer beside B's is A's answer alone" "^$model alone .* same$" "$(echo "$out" | grep "^$model ")"
done
expect_eq "colmean alone answers [0,0]" "colmean alone [0.0, 0.0] beside [0.0, 0.0] same" "$(echo "$out" | grep '^colmean ')"
hist() {  # MODEL SERIES: the value of loom_serve_batch_size_SERIES{model="MODEL"...}
  echo "$out" | grep "^loom_serve_batch_size_$2{model=\"$1\"" | head -1 | awk '{print $2}'
}
for model in colmean gram rowmean never two; do
  [ -n "$(hist $model count)" ] && pass || fail "$model: no loom_serve_batch_size series in /metrics"
done
for model in colmean gram never; do
  expect_eq "$model: every batch held one request's row" "$(hist $model count)" "$(hist $model sum)"
done
[ "$(hist rowmean sum)" != "$(hist rowmean count)" ] && pass || fail "rowmean never batched requests: $(hist rowmean sum) rows in $(hist rowmean count) runs"
expect_eq "two: a request of 3 rows is refused" "two three-rows 400" "$(echo "$out" | grep '^two ')"
expect_eq "two: no batch held more than 2 rows" "$(hist two count)" \
  "$(echo "$out" | grep "^loom_serve_batch_size_bucket{model=\"two\",le=\"2\"" | awk '{print $2}')"
[ "$(hist two sum)" != "$(hist two count)" ] && pass || fail "two never batched two requests"
kill -TERM "$pid"
wait "$pid"
finish
