#!/usr/bin/env bash
# serve_triton.sh — loom-serve driven by Triton's own tools (issue 42): Triton's Python client
# (PyPI tritonclient) reads the model configuration and statistics over HTTP and gRPC, and
# Triton's perf_analyzer (the one in tritonclient 2.41's wheel) measures a model with -b 4 and no
# --shape, from the configuration alone. The repository is laid out as Triton's: a model with a
# Triton config.pbtxt (platform onnxruntime_onnx, two version folders of which the policy serves
# the latest, dynamic batching, two instances, a field Loom does not act on), one without, and
# one folder for each config a Triton user can get wrong, each refused by name while the rest serve;
# then the configuration and statistics (tests/serve/triton_client_check.py), the client's everyday
# calls against the graph's numbers and with a bearer token (tests/serve/triton_everyday.py).
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
require_onnx_graph
"$LOOM_BUILDDIR/loom-serve" --help 2>&1 | grep -q grpc-port || skip "loom-serve built without gRPC"
peer_venv triton "${TRITON_PEER[@]}"
cd "$LOOM_TMP" || exit 99

/usr/bin/python3 - <<'PY' || exit 99
import os
import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh

def save(name, version="1", config=None):
    rng = np.random.default_rng(7)
    w = nh.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = nh.from_array(rng.standard_normal(3).astype(np.float32), "b")
    g = h.make_graph([h.make_node("Gemm", ["x", "w", "b"], ["z"]), h.make_node("Relu", ["z"], ["y"])], name,
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", 4])], [h.make_tensor_value_info("y", T.FLOAT, ["N", 3])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    os.makedirs(f"repo/{name}/{version}", exist_ok=True)
    onnx.save(m, f"repo/{name}/{version}/model.onnx")
    if config is not None:
        open(f"repo/{name}/config.pbtxt", "w").write(config)

x = 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
tab = ('name: "tab"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n' + x +
       'dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 4 ] }\n'
       'instance_group [ { count: 2 kind: KIND_CPU } ]\n'
       'parameters { key: "note" value: { string_value: "from Triton" } }\n'
       'optimization { execution_accelerators { cpu_execution_accelerator : [ { name : "openvino" } ] } }\n')
save("tab", "1", tab)
rng = np.random.default_rng(7)  # plain's numbers for triton_everyday.py: save's seeded Gemm, then Relu
w, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
x3 = np.arange(12, dtype=np.float32).reshape(3, 4)
np.save("x.npy", x3)
np.save("y.npy", np.maximum(x3 @ w + b, 0))
save("tab", "2")
save("plain")
save("bad_dims", config='max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 5 ] } ]\n')
save("bad_type", config='max_batch_size: 8\ninput [ { name: "x" data_type: TYPE_INT32 dims: [ 4 ] } ]\n')
save("bad_name", config='max_batch_size: 8\ninput [ { name: "pixels" data_type: TYPE_FP32 dims: [ 4 ] } ]\n')
save("bad_dup", config='max_batch_size: 8\n' + x + x)
save("bad_limit", config='max_batch_size: 1000\n')
save("bad_negative", config='max_batch_size: -1\n')
save("bad_delay", config='max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 60000000 }\n')
save("bad_folder", config='name: "someone_else"\n')
save("bad_text", config='max_batch_size: 8\ninput [ { name: "x"\n  dims: [ 4 ]\n  data_type: TYPE_FP32 } \n')
save("bad_huge", config='max_batch_size: 8\n' + "# padding\n" * ((10 << 20) // 10))
save("bad_deep", config="max_batch_size: 8\n" + "a{" * 150000 + "}" * 150000 + "\n")  # once off protobuf's stack
save("bad_count", config='max_batch_size: 8\ninstance_group [ { count: 64 }, { count: 2147483647 } ]\n')  # once wrapped to a small sum
PY
[ "$(stat -c %s repo/bad_huge/config.pbtxt)" -ge $((10 << 20)) ] || exit 99

serve_start main --model-repository repo --grpc-port 0 --max-batch-size 32
[ -n "$http" ] && [ -n "$grpc" ] || { cat main.log; exit 99; }
log=$(cat main.log)
expect_match "tab loads with its two instances" "loaded model tab version 2 .*batched up to 8 rows.*2 instances" "$log"
expect_no_match "tab's version 1 is left out by the version policy" "loaded model tab version 1" "$log"
expect_match "a field Loom does not act on is named in a warning, with its line" "warning.*tab/config.pbtxt:8:[0-9]+: .*optimization" "$log"
expect_match "plain loads with no config.pbtxt" "loaded model plain version 1" "$log"
bad() {  # MODEL REGEX: the model is refused at load, its reason in the log and the index
  expect_match "$1 refused at load" "cannot load model $1 version 1: .*$2" "$log"
  expect_match "$1 UNAVAILABLE in the index, saying why" "\"name\":\"$1\",\"reason\":\"[^\"]*$2" "$index"
}
index=$(curl -s -X POST "$http/v2/repository/index")
bad bad_dims "model bad_dims input 'x': config.pbtxt dims \[5\] \(with the batch dimension \[-1,5\]\), the model's shape \[-1,4\]"
bad bad_type "model bad_type input 'x': config.pbtxt says TYPE_INT32, the model has TYPE_FP32"
bad bad_name "config.pbtxt names input 'pixels', which the model does not have \(its inputs: x\)"
bad bad_dup "config.pbtxt lists input 'x' twice"
bad bad_limit "max_batch_size 1000 is above the server's --max-batch-size 32"
bad bad_negative "max_batch_size -1 is negative"
bad bad_deep "config.pbtxt: messages nested deeper than 32 levels"
bad bad_count "config.pbtxt asks for more than 64 instances"
bad bad_delay "max_queue_delay_microseconds 60000000 is longer than the request deadline"
bad bad_folder "config.pbtxt names the model 'someone_else', but its folder is bad_folder"
bad bad_text "bad_text/config.pbtxt:[45]:[0-9]+: "
bad bad_huge "bad_huge/config.pbtxt: larger than 1 MiB"
expect_match "the server stays up" "true" "$(curl -s "$http/v2/health/ready")"

run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/serve/triton_client_check.py" "$http" "$grpc"
echo "$out" | sed 's/^/  /'
[ -n "$err" ] && echo "$err" | tail -n 5 | sed 's/^/  /'
expect_eq "Triton's Python client finds everything as Triton would answer it" 0 "$rc"
expect_match "it ran its checks" "^ok: " "$out"
everyday() {  # WHAT, then triton_everyday.py's options
  local what=$1
  shift
  run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/serve/triton_everyday.py" "$http" "$grpc" plain 3 --want x.npy y.npy "$@"
  echo "$out" | sed 's/^/  /'
  [ -n "$err" ] && echo "$err" | tail -n 5 | sed 's/^/  /'
  expect_eq "Triton's client's everyday calls$what" 0 "$rc"
  expect_match "they ran$what" "^ok: " "$out"
}
everyday ""

# perf_analyzer from tritonclient's wheel: libcudart from PyPI's nvidia-cuda-runtime-cu12, libb64 from
# Debian. Zeros for data: its random FP32 are random bits, and loom-serve refuses NaN inputs.
pa=$peer/bin/perf_analyzer
cudart=$(dirname "$(find "$peer/" -name 'libcudart.so.12' | head -n 1)")
if ! LD_LIBRARY_PATH=$cudart ldd "$pa" 2>/dev/null | grep -q "not found"; then
  for proto in http grpc; do
    url=$http
    [ $proto = grpc ] && url=$grpc
    # A check that it runs, not a figure (those are make bench's): any window counts as stable,
    # so a busy machine cannot fail it.
    run_cmd env LD_LIBRARY_PATH="$cudart" timeout 120 "$pa" -m tab -u "$url" -i $proto -b 4 --concurrency-range 2 --input-data zero \
      --measurement-interval 500 --stability-percentage 1000 --max-trials 3
    expect_eq "perf_analyzer over $proto, -b 4, no --shape: exit status" 0 "$rc"
    expect_match "perf_analyzer over $proto reports throughput" "Concurrency: 2, throughput: [0-9.]+ infer/sec" "$out"
    [ "$rc" = 0 ] || echo "$out $err" | tail -n 8
  done
else
  fail "perf_analyzer cannot start: $(LD_LIBRARY_PATH=$cudart ldd "$pa" | grep 'not found' | tr '\n' ' ') (libb64-0d is in contrib/install-deps.sh)"
fi
stats=$(curl -s "$http/v2/models/tab/stats")
expect_match "perf_analyzer's requests are in tab's statistics, 4 rows each" '"inference_count":[1-9][0-9]*' "$stats"
expect_match "and in tab's version 2 only" '"name":"tab","version":"2"' "$stats"

kill "$pid"
wait "$pid"

# A bearer token, as Triton's clients send one: headers on each call; none is refused.
printf 's3cret-token\n' >token
chmod 600 token
serve_start tok --model-repository repo --grpc-port 0 --auth-token-file token
everyday " with a bearer token, and refused without it" --token s3cret-token
kill "$pid"
wait "$pid"
finish
