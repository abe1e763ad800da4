#!/usr/bin/env bash
# serve_kserve_figures.sh — the figures of issue 42, measured side by side in one run: loom-serve
# against KServe's own Python model server (PyPI kserve, a kserve.Model running ONNX Runtime with
# the same intra-op threads; tests/bench/kserve_peer.py), on the same model.onnx files, one
# server at a time, driven by wrk with one Lua script for both (HTTP, KServe v2 JSON): a tiny MLP
# (784-64-32-10, one row) at concurrency 1 and 16, a 4-layer BERT (d 256, batch 1, sequence 128,
# pooler_output asked for) and an encoder of PyTorch's own nn.TransformerEncoderLayer (d 256, 4
# heads, 2 layers, sequence 32, a key padding mask; opset 14) at concurrency 1 and 8, and the BERT
# as onnxruntime.quantization's quantize_dynamic writes it (bert_int8: int8 weights, uint8
# activations quantized per request) at 1 and 8. MODELS picks some of them (default "mlp bert
# bert_int8 encoder"). Target: >= 1.0x in every row, and loom's
# p50 at concurrency 1 <= KServe's. loom-serve with --max-batch-size 1 (batching off) is measured
# too: the default batcher's p50 at concurrency 1 within 10% of it, and on BERT at concurrency 8
# >= 1.3x its throughput. Each cell is the median of REPS runs of SECONDS.
# Usage: LOOM_BUILDDIR=_build LOOM_SRCDIR=. tests/bench/serve_kserve_figures.sh  (about 4 minutes)
set -euo pipefail
B=$(cd "${LOOM_BUILDDIR:-.}" && pwd)
S=$(cd "${LOOM_SRCDIR:-$(dirname "$0")/../..}" && pwd)
THREADS=${THREADS:-2} SECONDS_PER=${SECONDS_PER:-4} REPS=${REPS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-kserve-figures.XXXXXX")
pids=()
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null || true; rm -rf "$work"' EXIT
command -v wrk >/dev/null || { echo "serve_kserve_figures: wrk is needed (contrib/install-deps.sh)"; exit 0; }
peer=$(LOOM_BUILDDIR=$B "$S/contrib/peer-venv.sh" kserve kserve onnxruntime numpy) ||
  { echo "serve_kserve_figures: no KServe peer, nothing measured"; exit 0; }
echo "peer: $("$peer/bin/python" -c 'import kserve, onnxruntime as o; from importlib.metadata import version as v; print("kserve", v("kserve"), "+ onnxruntime", o.__version__)' 2>/dev/null)"

# The models (torch.onnx.export by Debian's PyTorch) and the request bodies.
MODELS=${MODELS:-mlp bert bert_int8 encoder}
mkdir -p "$work/repo/mlp/1" "$work/repo/bert/1" "$work/repo/encoder/1"
/usr/bin/python3 - "$S/tests/parity" "$work" <<'PY'
import json, os, sys
import torch
import torch.nn as nn
sys.path.insert(0, sys.argv[1])
import onnx_models as om
w = sys.argv[2]
om.export("mlp", f"{w}/repo/mlp/1/model.onnx", 17)
torch.manual_seed(0)
m = om.Bert(vocab=1000, d=256, heads=4, layers=4, maxlen=128).eval()
ids, mask = torch.randint(0, 1000, (1, 128)), torch.ones(1, 128, dtype=torch.long)
with torch.no_grad():
    torch.onnx.export(m, (ids, mask), f"{w}/repo/bert/1/model.onnx", opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={"input_ids": {0: "b", 1: "t"}, "attention_mask": {0: "b", 1: "t"},
                                    "last_hidden_state": {0: "b"}, "pooler_output": {0: "b"}})
x = torch.randn(1, 1, 28, 28)
json.dump({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": x.flatten().tolist()}]},
          open(f"{w}/mlp.json", "w"))
json.dump({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 128], "data": ids.flatten().tolist()},
                      {"name": "attention_mask", "datatype": "INT64", "shape": [1, 128], "data": mask.flatten().tolist()}],
           "outputs": [{"name": "pooler_output"}]}, open(f"{w}/bert.json", "w"))


class Encoder(nn.Module):
    def __init__(s):
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        s.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(s, x, mask):
        return s.enc(x, src_key_padding_mask=mask)


x, pad = torch.randn(1, 32, 256), torch.zeros(1, 32, dtype=torch.bool)
pad[0, 28:] = True
torch.onnx.export(Encoder().eval(), (x, pad), f"{w}/repo/encoder/1/model.onnx", opset_version=14, input_names=["x", "mask"],
                  output_names=["y"], dynamic_axes={"x": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}, "y": {0: "b", 1: "t"}})
json.dump({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 32, 256], "data": x.flatten().tolist()},
                      {"name": "mask", "datatype": "BOOL", "shape": [1, 32], "data": pad.flatten().tolist()}]},
          open(f"{w}/encoder.json", "w"))
PY
if [[ " $MODELS " == *" bert_int8 "* ]]; then  # by ORT's own quantizer, from the BERT above
  if qpeer=$(LOOM_BUILDDIR=$B "$S/contrib/peer-venv.sh" ortq onnxruntime onnx numpy sympy); then
    mkdir -p "$work/repo/bert_int8/1"
    "$qpeer/bin/python" -c 'import sys; from onnxruntime.quantization import QuantType, quantize_dynamic
quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8)' "$work/repo/bert/1/model.onnx" "$work/repo/bert_int8/1/model.onnx" 2>/dev/null
    cp "$work/bert.json" "$work/bert_int8.json"
  else
    echo "serve_kserve_figures: no ONNX Runtime quantizer, bert_int8 not measured"
    MODELS=$(echo ${MODELS/bert_int8/})
  fi
fi
cat >"$work/post.lua" <<'LUA'
-- One request body for every server: KServe v2 JSON, POSTed as is.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BODY"), "rb")
wrk.body = f:read("*a")
f:close()
LUA

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {  # URL: until the model answers ready (60 s at most)
  for _ in $(seq 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "serve_kserve_figures: $1 never became ready"; return 1
}
# measure URL BODY CONNECTIONS: "req/s p50_ms p99_ms" (medians of REPS wrk runs, after a
# second of the same load unmeasured: first runs compile kernels and grow pools, on either side)
measure() {
  local runs=()
  BODY=$2 wrk -t1 -c"$3" -d1s -s "$work/post.lua" "$1" >/dev/null
  for _ in $(seq "$REPS"); do
    local out
    out=$(BODY=$2 wrk -t1 -c"$3" -d"${SECONDS_PER}s" --latency -s "$work/post.lua" "$1")
    if echo "$out" | grep -q "Non-2xx"; then echo "serve_kserve_figures: errors from $1:" >&2; echo "$out" >&2; fi
    local rps p50 p99
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    runs+=("$rps $(ms "$p50") $(ms "$p99")")
  done
  printf '%s\n' "${runs[@]}" | sort -n | awk -v n="$REPS" 'NR == int((n + 1) / 2)'
}
ms() {  # wrk's 512.00us / 1.20ms / 1.01s in milliseconds
  echo "$1" | awk '/us$/ {sub("us",""); print $1/1000; next} /ms$/ {sub("ms",""); print $1; next} /s$/ {sub("s",""); print $1*1000}'
}
declare -A concurrencies=([mlp]="1 16" [bert]="1 8" [bert_int8]="1 8" [encoder]="1 8")
rows=()
for model in $MODELS; do
  for c in ${concurrencies[$model]}; do rows+=("$model $c"); done
done
declare -A got
run_loom() {  # LABEL ARGS...: loom-serve with ARGS, every row
  local label=$1
  shift
  local port
  port=$(free_port)
  "$B/loom-serve" --model-repository "$work/repo" --http-port "$port" --grpc-port -1 --threads "$THREADS" "$@" 2>"$work/$label.log" &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port/v2/models/${MODELS##* }/ready"
  for r in "${rows[@]}"; do
    set -- $r
    got[$label,$1,$2]=$(measure "http://127.0.0.1:$port/v2/models/$1/infer" "$work/$1.json" "$2")
  done
  kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
}
run_kserve() {  # every row, one KServe server per model
  for model in $MODELS; do
    local port
    port=$(free_port)
    "$peer/bin/python" "$S/tests/bench/kserve_peer.py" "$model" "$work/repo/$model/1/model.onnx" "$port" "$THREADS" >"$work/kserve-$model.log" 2>&1 &
    pids+=($!)
    wait_ready "http://127.0.0.1:$port/v2/models/$model/ready"
    for r in "${rows[@]}"; do
      set -- $r
      [ "$1" = "$model" ] && got[kserve,$1,$2]=$(measure "http://127.0.0.1:$port/v2/models/$1/infer" "$work/$1.json" "$2")
    done
    kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
  done
}
run_loom loom
run_loom off --max-batch-size 1
run_kserve

echo "== loom-serve (--threads $THREADS, default batcher) against KServe $("$peer/bin/python" -c "from importlib.metadata import version; print(version('kserve'))") + ONNX Runtime ($THREADS intra-op threads); wrk, HTTP JSON, median of $REPS x ${SECONDS_PER}s"
printf '%-9s %4s | %10s %8s %8s | %10s %8s %8s | %7s %s\n' model conc "loom req/s" "p50 ms" "p99 ms" "KServe" "p50 ms" "p99 ms" ratio "p50 <= KServe's"
for r in "${rows[@]}"; do
  set -- $r
  read -r lr lp50 lp99 <<<"${got[loom,$1,$2]}"
  read -r kr kp50 kp99 <<<"${got[kserve,$1,$2]}"
  printf '%-9s %4s | %10.0f %8.2f %8.2f | %10.0f %8.2f %8.2f | %6.2fx %s\n' "$1" "$2" "$lr" "$lp50" "$lp99" "$kr" "$kp50" "$kp99" \
    "$(echo "$lr $kr" | awk '{print $1/$2}')" "$(echo "$lp50 $kp50" | awk '{print ($1 <= $2) ? "yes" : "no (missed)"}')"
done
echo "== the batcher against batching off (loom-serve --max-batch-size 1), same runs"
for r in "${rows[@]}"; do
  set -- $r
  read -r lr lp50 _ <<<"${got[loom,$1,$2]}"
  read -r orr op50 _ <<<"${got[off,$1,$2]}"
  printf '%-9s %4s | batcher %8.0f req/s p50 %6.2f ms | off %8.0f req/s p50 %6.2f ms | throughput %5.2fx, p50 %5.2fx\n' \
    "$1" "$2" "$lr" "$lp50" "$orr" "$op50" "$(echo "$lr $orr" | awk '{print $1/$2}')" "$(echo "$lp50 $op50" | awk '{print $1/$2}')"
done
echo "targets: p50 at concurrency 1 within 1.10x of batching off; mlp at 16 >= 1.0x batching off; bert at 8 >= 1.3x batching off"

# The executor alone against ONNX Runtime in-process (no server): BERT and its int8 form
# (sequence 128) and the encoder (sequence 32) at batch 1 and 8, best of 30 runs each, the same threads (target: loom >= 1.0x).
declare -A seqs=([bert]=128 [bert_int8]=128 [encoder]=32) vocabs=([bert]=1000 [bert_int8]=1000 [encoder]=1)
for model in $MODELS; do
  [ "$model" = mlp ] && continue
  echo "== $model in-process (sequence ${seqs[$model]}): loom's executor (loom-bench infer) against ONNX Runtime, $THREADS threads"
  for b in 1 8; do
    loom_ms=$("$B/loom-bench" infer --onnx "$work/repo/$model/1/model.onnx" --batch $b --seq "${seqs[$model]}" --int-max "${vocabs[$model]}" \
      --threads "$THREADS" --reps 30 --format json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["onnx_ms"])')
    ort_ms=$("$peer/bin/python" "$S/tests/bench/ort_time.py" "$work/repo/$model/1/model.onnx" $b "${seqs[$model]}" "$THREADS" "${vocabs[$model]}" 30)
    echo "batch $b: loom $loom_ms ms, ONNX Runtime $ort_ms ms, ratio $(echo "$ort_ms $loom_ms" | awk '{printf "%.2fx", $1/$2}')"
  done
done
[[ " $MODELS " == *" bert "* ]] || exit 0

# Triton-style figures of loom-serve alone: Triton's perf_analyzer (tritonclient 2.41's wheel),
# HTTP and gRPC, concurrency 1 to 16, batch 1, shapes from the model configuration.
tpeer=$(LOOM_BUILDDIR=$B "$S/contrib/peer-venv.sh" triton 'tritonclient[http,grpc]==2.41.1' nvidia-cuda-runtime-cu12 numpy) ||
  { echo "serve_kserve_figures: no perf_analyzer (tritonclient), no Triton-style figures"; exit 0; }
cudart=$(dirname "$(find "$tpeer/" -name 'libcudart.so.12' | head -n 1)")
hport=$(free_port) gport=$(free_port)
"$B/loom-serve" --model-repository "$work/repo" --http-port "$hport" --grpc-port "$gport" --threads "$THREADS" 2>"$work/pa.log" &
pids+=($!)
wait_ready "http://127.0.0.1:$hport/v2/models/bert/ready"
echo "== perf_analyzer against loom-serve (--threads $THREADS): infer/sec and p50/p99 latency (us), batch 1"
# Zeros for data: perf_analyzer's random FP32 are random bits, and loom-serve refuses NaN inputs.
# BERT's sequence length is its own dynamic dimension: 128, as above.
declare -A shapes=([mlp]="" [bert]="--shape input_ids:128 --shape attention_mask:128")
for model in mlp bert; do
  for proto in http grpc; do
    url=127.0.0.1:$hport
    [ $proto = grpc ] && url=127.0.0.1:$gport
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH=$cudart "$tpeer/bin/perf_analyzer" -m $model -u "$url" -i $proto --concurrency-range 1:16:5 --input-data zero ${shapes[$model]} \
      --measurement-interval 2000 --percentile 50 -f "$work/pa.csv" >"$work/pa.out" 2>&1 ||
      { echo "perf_analyzer $model $proto failed: $(tail -n 3 "$work/pa.out")"; continue; }
    awk -F, -v m=$model -v p=$proto 'NR == 1 {for (i = 1; i <= NF; i++) c[$i] = i; next}
      {printf "%-5s %-4s concurrency %2d: %8.0f infer/s, p50 %7d us, p99 %7d us\n", m, p, $c["Concurrency"], $c["Inferences/Second"], $c["p50 latency"], $c["p99 latency"]}' "$work/pa.csv"
  done
done
