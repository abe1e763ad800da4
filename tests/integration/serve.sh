#!/usr/bin/env bash
# serve.sh — loom-serve as a real process with real clients (curl, Python's urllib and raw
# sockets, and a C++ gRPC client generated from the same .proto): every KServe v2 endpoint over
# HTTP and gRPC, JSON and binary tensors, results equal to the runtime's offline forward pass
# and a Fashion-MNIST model classifying test images as PyTorch does with the same weights;
# bad input of every kind, a wrong or missing token, slow clients, an oversized body; a burst
# far past the queue bound; SIGHUP reload; InferenceService specs; SIGTERM losing no request.
. "$(dirname "$0")/lib.sh"
S=$LOOM_BUILDDIR/loom-serve
G=$LOOM_BUILDDIR/tests/serve/kserve_grpc_client
T=$LOOM_BUILDDIR/loom-train
P=$LOOM_BUILDDIR/tests/parity/parity_tool
[ -x "$S" ] || skip "loom-serve not built (needs yaml-cpp and Boost.Beast)"
[ -x "$G" ] || skip "loom-serve built without gRPC"
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
cd "$LOOM_TMP" || exit 99
PY=/usr/bin/python3

mkdir -p repo/fashion/1 repo/fashion/2 repo/tiny/1
"$T" --steps 300 --global-batch 64 --seed 5 --export repo/fashion/1/model.h5 2>/dev/null
"$T" --steps 20 --global-batch 64 --seed 6 --export alt.h5 2>/dev/null
cp alt.h5 repo/fashion/2/model.h5
"$T" --layers 784,16,10 --steps 5 --global-batch 64 --export repo/tiny/1/model.h5 2>/dev/null
[ -f repo/fashion/1/model.h5 ] && [ -f repo/tiny/1/model.h5 ] || { echo "loom-train export failed"; exit 99; }
printf 's3cret-token\n' >token && chmod 600 token

# start NAME ARGS...: starts loom-serve in the background, waits until it is ready; sets
# $pid, $http, $grpc (host:port).
start() { serve_start "$1" --grpc-port 0 "${@:2}"; }
stop() {  # sends SIGTERM and waits; leaves the exit status in $rc
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
}
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
auth=(-H "Authorization: Bearer s3cret-token")

start main --model-repository repo --auth-token-file token --read-timeout-s 2 --max-request-bytes 1048576
expect_match "binds to localhost by default" "listening: http 127\.0\.0\.1:[0-9]+ grpc 127\.0\.0\.1:[0-9]+, bearer token required" "$(cat main.log)"
# ps, pkill and Slurm's tools see it by its name (it re-executes itself to settle the libraries'
# environment, by its own path, not /proc/self/exe).
expect_eq "the process is named loom-serve" "loom-serve" "$(ps -o comm= -p "$pid")"
# OpenMP's workers spin for inference's short parallel regions (loom-train spins less), unless the
# caller chose a wait policy.
if [ -z "${GOMP_SPINCOUNT:-}${OMP_WAIT_POLICY:-}" ]; then
  expect_eq "OpenMP workers spin 10,000 rounds before they sleep" "GOMP_SPINCOUNT=10000" "$(tr '\0' '\n' <"/proc/$pid/environ" | grep '^GOMP_SPINCOUNT=')"
fi
# Where configure found tcmalloc, every allocation goes to it, as the start-up line says.
if grep -q "define LOOM_HAVE_TCMALLOC 1" "$LOOM_BUILDDIR/config.h"; then
  expect_match "the start-up line names tcmalloc" "; allocator tcmalloc [0-9]+\.[0-9]+" "$(cat main.log)"
  expect_match "the process runs with tcmalloc mapped" "libtcmalloc" "$(grep -o 'libtcmalloc[^ ]*' /proc/$pid/maps | head -1)"
else
  expect_match "the start-up line names glibc's malloc" "; allocator glibc malloc" "$(cat main.log)"
fi

# Health needs no token; everything else does.
expect_eq "GET /v2/health/live" 200 "$(code "$http/v2/health/live")"
expect_eq "GET /v2/health/ready" 200 "$(code "$http/v2/health/ready")"
expect_eq "GET /v2 without a token" 401 "$(code "$http/v2")"
expect_eq "GET /v2 with a wrong token" 401 "$(code -H "Authorization: Bearer nope" "$http/v2")"
expect_eq "GET /metrics without a token" 401 "$(code "$http/metrics")"
expect_match "401 body is the protocol's error object" '^\{"error":"missing or wrong bearer token"\}$' "$(curl -s "$http/v2")"
run_cmd "$G" "$grpc" metadata fashion
expect_match "gRPC without a token: UNAUTHENTICATED" '"code":16' "$out"
export LOOM_TOKEN=s3cret-token
run_cmd "$G" "$grpc" health
expect_eq "gRPC ServerLive/Ready/Metadata" '{"live":true,"ready":true,"name":"loom-serve"}' "$out"

# Metadata and readiness, every model and version.
expect_match "GET /v2" '"extensions":\["binary_tensor_data","model_repository","model_configuration","statistics"\],"name":"loom-serve"' "$(curl -s "${auth[@]}" "$http/v2")"
expect_match "model metadata" '"inputs":\[\{"datatype":"FP32","name":"input","shape":\[-1,784\]\}\].*"versions":\["1","2"\]' \
  "$(curl -s "${auth[@]}" "$http/v2/models/fashion")"
expect_eq "version metadata" 200 "$(code "${auth[@]}" "$http/v2/models/fashion/versions/2")"
expect_eq "model ready" 200 "$(code "${auth[@]}" "$http/v2/models/tiny/ready")"
expect_eq "version ready" 200 "$(code "${auth[@]}" "$http/v2/models/fashion/versions/1/ready")"
expect_eq "unknown model: 404" 404 "$(code "${auth[@]}" "$http/v2/models/nope")"
expect_eq "unknown version: 404" 404 "$(code "${auth[@]}" "$http/v2/models/fashion/versions/9/ready")"
expect_eq "unknown endpoint: 404" 404 "$(code "${auth[@]}" "$http/v3/things")"
expect_eq "path traversal in a model name: 400" 400 "$(code --path-as-is "${auth[@]}" "$http/v2/models/..%2Fetc/ready")"
run_cmd "$G" "$grpc" metadata fashion 2
expect_match "gRPC ModelMetadata + ModelReady" '"name":"fashion","versions":2,"platform":"loom-hdf5","input":"input FP32 \[-1,784\]","output":"logits \[-1,10\]","ready":true' "$out"
run_cmd "$G" "$grpc" metadata nope
expect_match "gRPC unknown model: NOT_FOUND" '"code":5,.*unknown model' "$out"

# Inference: JSON and binary over HTTP, raw and typed over gRPC, against the runtime's offline
# forward pass (parity_tool) and PyTorch with the same weights, on Fashion-MNIST test images.
$PY - "$http" "$grpc" "$G" "$P" <<'PY' && pass || fail "inference results"
import gzip, json, subprocess, sys, urllib.request, numpy as np, h5py, torch, os
http, grpc, client, parity = sys.argv[1:5]
http = "http://" + http
H = {"Authorization": "Bearer s3cret-token"}
imgs = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 784)
labels = np.frombuffer(gzip.open("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)
x8 = imgs[:32]
x = x8.astype(np.float32) * np.float32(1 / 255)

def post(path, body, headers={}):
    req = urllib.request.Request(http + path, data=body, headers={**H, **headers}, method="POST")
    with urllib.request.urlopen(req) as r:
        return r.read(), dict(r.headers)

# 1. JSON FP32 (preprocessed), JSON UINT8 (raw pixels), binary UINT8 in and binary FP32 out.
body = json.dumps({"id": "q1", "inputs": [{"name": "input", "shape": [32, 784], "datatype": "FP32", "data": x.tolist()}]}).encode()
r = json.loads(post("/v2/models/fashion/versions/1/infer", body)[0])
assert r["id"] == "q1" and r["model_name"] == "fashion" and r["model_version"] == "1", r
out = r["outputs"][0]
assert out["name"] == "logits" and out["datatype"] == "FP32" and out["shape"] == [32, 10], out
json_fp32 = np.array(out["data"], np.float32).reshape(32, 10)
body = json.dumps({"inputs": [{"name": "input", "shape": [32, 28, 28], "datatype": "UINT8", "data": x8.reshape(32, 28, 28).tolist()}]}).encode()
json_u8 = np.array(json.loads(post("/v2/models/fashion/versions/1/infer", body)[0])["outputs"][0]["data"], np.float32).reshape(32, 10)
head = json.dumps({"inputs": [{"name": "input", "shape": [32, 784], "datatype": "UINT8", "parameters": {"binary_data_size": 32 * 784}}],
                   "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
raw, hdrs = post("/v2/models/fashion/versions/1/infer", head + x8.tobytes(),
                 {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"})
n = int(hdrs["Inference-Header-Content-Length"])
meta = json.loads(raw[:n])
assert meta["outputs"][0]["parameters"]["binary_data_size"] == 32 * 10 * 4, meta
binary = np.frombuffer(raw[n:], np.float32).reshape(32, 10)

# 2. gRPC raw_input_contents and typed contents.
x.tofile("x.bin"); x8.tofile("x8.bin")
def grpc_infer(*args):
    o = json.loads(subprocess.run([client, grpc, "infer", "fashion", "1", *args], capture_output=True, text=True, env=os.environ, check=True).stdout)
    assert o["shape"] == [32, 10], o
    return np.array(o["logits"], np.float32).reshape(32, 10)
g_raw = grpc_infer("FP32", "32,784", "x.bin")
g_typed = grpc_infer("UINT8", "32,784", "x8.bin", "typed")

# 3. The runtime's offline forward pass on the same batch.
os.makedirs("pin", exist_ok=True); os.makedirs("pout", exist_ok=True)
x.tofile("pin/x.bin"); np.zeros(32, np.int32).tofile("pin/y.bin")
subprocess.run([parity, "mlp", "repo/fashion/1/model.h5", "32", "pin", "pout"], check=True, capture_output=True)
offline = np.fromfile("pout/logits.bin", np.float32).reshape(32, 10)
for name, got in [("json fp32", json_fp32), ("json uint8", json_u8), ("binary", binary), ("grpc raw", g_raw), ("grpc typed", g_typed)]:
    err = np.abs(got - offline).max()
    assert err <= 1e-5 * max(1.0, np.abs(offline).max()), (name, err)

# 4. PyTorch with the same weights classifies 1024 test images the same way.
with h5py.File("repo/fashion/1/model.h5", "r") as f:
    sd = {k: torch.from_numpy(f["params"][k][()]) for k in f["params"]}
m = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
m.load_state_dict({k.replace("fc1", "0").replace("fc2", "2").replace("fc3", "4"): v for k, v in sd.items()})
agree = 0; correct = 0
for b in range(0, 1024, 32):
    xb = imgs[b:b + 32]
    head = json.dumps({"inputs": [{"name": "input", "shape": [len(xb), 784], "datatype": "UINT8", "parameters": {"binary_data_size": xb.size}}],
                       "parameters": {"binary_data_output": True}}).encode()
    raw, hdrs = post("/v2/models/fashion/versions/1/infer", head + xb.tobytes(), {"Inference-Header-Content-Length": str(len(head))})
    served = np.frombuffer(raw[int(hdrs["Inference-Header-Content-Length"]):], np.float32).reshape(len(xb), 10)
    with torch.no_grad():
        ref = m(torch.from_numpy(xb.astype(np.float32) / 255)).numpy()
    agree += int((served.argmax(1) == ref.argmax(1)).sum())
    correct += int((served.argmax(1) == labels[b:b + len(xb)]).sum())
print(f"serve: 1024 test images: {agree} classified as PyTorch does, accuracy {correct / 1024:.3f}; "
      f"largest difference from the offline forward pass {max(np.abs(g - offline).max() for g in (json_fp32, binary, g_raw)):.2e}")
assert agree == 1024, agree
PY

# Bad input: the right status and error body; the server stays up and ready.
infer="$http/v2/models/fashion/infer"
bad() {  # WHAT STATUS REGEX BODY [CURL ARGS...]
  local what=$1 want=$2 re=$3 body=$4
  shift 4
  expect_http "$what" "$want" "^\{\"error\":\".*$re" "${auth[@]}" -X POST "$infer" --data-binary "$body" "$@"
}
row=$($PY -c 'print(",".join(["0.5"] * 784))')
bad "malformed JSON" 400 "malformed JSON" '{"inputs": [ {'
bad "not an object" 400 "must be a JSON object" '[1,2]'
bad "missing inputs" 400 "missing inputs" '{"id":"x"}'
bad "missing input tensor" 400 "missing input" '{"inputs":[]}'
bad "wrong input name" 400 "unexpected input 'pixels'" "{\"inputs\":[{\"name\":\"pixels\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[$row]}]}"
irow=$($PY -c 'print(",".join(["1"] * 784))')
bad "wrong datatype" 400 "datatype INT32 is not supported" "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,784],\"datatype\":\"INT32\",\"data\":[$irow]}]}"
bad "datatype and data disagree" 400 "INT32 input data must be integers" "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,784],\"datatype\":\"INT32\",\"data\":[$row]}]}"
bad "wrong shape" 400 "each row must hold 784 values, not 392" "{\"inputs\":[{\"name\":\"input\",\"shape\":[2,392],\"datatype\":\"FP32\",\"data\":[$row]}]}"
bad "data not matching shape" 400 "shape and FP32 need 6272" "{\"inputs\":[{\"name\":\"input\",\"shape\":[2,784],\"datatype\":\"FP32\",\"data\":[$row]}]}"
bad "non-numeric data" 400 "numbers only" '{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":["a"]}]}'
bad "UINT8 out of range" 400 "0-255" '{"inputs":[{"name":"input","shape":[1,784],"datatype":"UINT8","data":[256]}]}'
bad "unknown output" 400 "unknown output 'probs'" "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[$row]}],\"outputs\":[{\"name\":\"probs\"}]}"
h='{"inputs":[{"name":"input","shape":[1,784],"datatype":"UINT8","parameters":{"binary_data_size":784}}]}'
bad "binary size past the body" 400 "exceeds the body" "$h" -H "Inference-Header-Content-Length: ${#h}"
h='{"inputs":[{"name":"input","shape":[33,784],"datatype":"UINT8","parameters":{"binary_data_size":25872}}]}'
bad "rows beyond --max-batch-size" 400 "the model takes at most 32 \\(max_batch_size" "$h$(head -c 25872 /dev/zero | tr '\0' 'a')" \
  -H "Inference-Header-Content-Length: ${#h}"
head -c 2000000 /dev/zero >big.bin
got=$(curl -s -w '\n%{http_code}' "${auth[@]}" -X POST "$infer" --data-binary @big.bin)
expect_eq "oversized body: 413" 413 "${got##*$'\n'}"
expect_match "oversized body: error body" "exceeds 1048576 bytes" "$got"
expect_eq "unknown model infer: 404" 404 "$(code "${auth[@]}" -X POST "$http/v2/models/nope/infer" -d '{}')"
run_cmd "$G" "$grpc" infer fashion 1 FP32 1,392 x.bin
expect_match "gRPC wrong shape: INVALID_ARGUMENT" '"code":3,.*each row must hold 784' "$out"
run_cmd "$G" "$grpc" infer fashion 7 FP32 32,784 x.bin
expect_match "gRPC unknown version: NOT_FOUND" '"code":5,' "$out"
run_cmd "$G" "$grpc" infer nope-by-grpc 1 FP32 1,392 x.bin
expect_match "gRPC unknown model: NOT_FOUND" '"code":5,' "$out"
# ModelStreamInfer (Triton's streaming extension): 200 requests on one stream, answered in
# order with the unary answer's numbers; a request naming no model is answered with its error
# and the stream goes on; without the token the stream is refused.
head -c 3136 x.bin >row.bin
unary=$("$G" "$grpc" infer fashion - FP32 1,784 row.bin | sed 's/.*"logits":\[\([^]]*\)\].*/\1/')
run_cmd "$G" "$grpc" stream fashion 200 row.bin 7
expect_eq "stream: exit 0" 0 "$rc"
expect_match "stream: 200 answers in order, 199 of one row, request 7's error" \
  '^\{"answers":200,"ids_in_order":true,"one_row_answers":199,"errors":\["[^"]*no-such-model[^"]*"\]' "$out"
first=$(echo "$out" | sed 's/.*"first":\[\([^]]*\)\].*/\1/')
/usr/bin/python3 -c 'import sys; a, b = ([float(x) for x in s.split(",")] for s in sys.argv[1:3]); sys.exit(0 if len(a) == 10 and max(abs(x - y) for x, y in zip(a, b)) < 1e-4 else 1)' \
  "$unary" "$first" && pass || fail "stream: the first answer differs from the unary one: $first / $unary"
run_cmd env -u LOOM_TOKEN "$G" "$grpc" stream fashion 3 row.bin
expect_match "stream without a token: UNAUTHENTICATED" '"code":16' "$out"
# A slow client (headers never finished) gets 408 after --read-timeout-s; an idle keep-alive
# connection is closed; the server stays ready meanwhile.
$PY - "$http" <<'PY' && pass || fail "slow client"
import socket, sys, time
host, port = sys.argv[1].split(":")
s = socket.create_connection((host, int(port)))
s.sendall(b"POST /v2/models/fashion/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inp")
t0 = time.time(); s.settimeout(10)
data = s.recv(4096)
assert data.startswith(b"HTTP/1.1 408"), data[:100]
assert 1.5 < time.time() - t0 < 6, time.time() - t0
idle = socket.create_connection((host, int(port))); idle.settimeout(10); t0 = time.time()
assert idle.recv(100) == b"" and time.time() - t0 < 6
print(f"serve: slow client answered 408 after {time.time() - t0:.1f} s; idle connection closed")
PY
expect_eq "ready after bad input" 200 "$(code "$http/v2/health/ready")"
# Keep-alive: several requests over one connection.
n=$(curl -s -o /dev/null -w '%{num_connects}\n' "${auth[@]}" "$http/v2" "$http/v2/models/tiny" "$http/v2" | awk '{s += $1} END {print s}')
expect_eq "keep-alive: 3 requests over 1 connection" 1 "$n"

# Metrics in Prometheus text.
m=$(curl -s "${auth[@]}" "$http/metrics")
promtool_lint "loom-serve's metrics" "$m"
expect_match "the status page without the token: a form, no data" '<form id="login">' "$(curl -s "$http/")"
expect_match "the status page with it: the model's row" '<tr class="model"><td>fashion</td><td>[0-9]+</td><td>READY</td>' \
  "$(curl -s "${auth[@]}" "$http/")"
expect_match "/v2/status: the models as JSON" '"models":\[' "$(curl -s "${auth[@]}" "$http/v2/status")"
expect_match "metrics: requests by code" 'loom_serve_requests_total\{model="fashion",protocol="http",code="200"\} [0-9]+' "$m"
expect_match "metrics: failures by reason" 'loom_serve_request_failures_total\{model="fashion",reason="bad_request"\} [0-9]+' "$m"
expect_match "metrics: gRPC requests" 'loom_serve_requests_total\{model="fashion",protocol="grpc",code="0"\} [0-9]+' "$m"
expect_match "metrics: a refused gRPC request, by its model" 'loom_serve_requests_total\{model="fashion",protocol="grpc",code="3"\} [1-9]' "$m"
expect_match "metrics: gRPC requests to unknown names, under one label" 'loom_serve_requests_total\{model="_unknown",protocol="grpc",code="5"\} [1-9]' "$m"
expect_no_match "metrics: no label of an unknown name" 'nope-by-grpc' "$m"
expect_match "metrics: queue length" 'loom_serve_queue_length\{model="fashion"\} 0' "$m"
expect_match "metrics: batch size histogram" 'loom_serve_batch_size_bucket\{model="fashion",le="32"\} [1-9]' "$m"
expect_match "metrics: queue and compute histograms" 'loom_serve_compute_seconds_count\{model="fashion"\} [1-9]' "$m"

# SIGHUP: a changed file is reloaded, a new version appears, a removed one goes.
before=$("$G" "$grpc" infer fashion 1 FP32 32,784 x.bin | md5sum)
cp alt.h5 repo/fashion/1/model.h5.new && mv repo/fashion/1/model.h5.new repo/fashion/1/model.h5
mkdir -p repo/fashion/3 && cp alt.h5 repo/fashion/3/model.h5
rm -r repo/fashion/2
kill -HUP "$pid"
sleep 1
expect_match "reload: version 3 loaded, 2 unloaded" '"versions":\["1","3"\]' "$(curl -s "${auth[@]}" "$http/v2/models/fashion")"
after=$("$G" "$grpc" infer fashion 1 FP32 32,784 x.bin | md5sum)
expect_ne "reload: the changed file's weights are served" "$before" "$after"
expect_match "reload logged" "loaded model fashion version 3" "$(cat main.log)"
printf 'not hdf5' >repo/tiny/1/model.h5.bad && cp repo/tiny/1/model.h5.bad repo/tiny/1/model.h5
kill -HUP "$pid"
sleep 1
expect_match "reload of a broken file keeps the loaded one" "cannot load model tiny version 1: .*not an HDF5 file.*the loaded one stays" "$(cat main.log)"
expect_eq "the old tiny still answers" 200 "$(code "${auth[@]}" "$http/v2/models/tiny/ready")"
stop
expect_eq "SIGTERM: exit 0" 0 "$rc"

# Overload: a burst far past the queue bound gets fast UNAVAILABLE / 503 while admitted
# requests finish; the server is ready afterwards with an empty queue. Over HTTP the model is a
# slow one: the fashion MLP's passes are short enough to run on the connections' own threads,
# and 200 of them keep up.
"$T" --layers 784,2048,2048,10 --steps 1 --global-batch 64 --export big.h5 2>/dev/null
mkdir -p repo2/big/1 repo/big/1 && cp big.h5 repo2/big/1/model.h5 && cp big.h5 repo/big/1/model.h5
start over --model-repository repo --max-queue-size 4 --max-batch-size 1 --max-queue-delay-us 0
head -c 3136 x.bin >row.bin
run_cmd "$G" "$grpc" burst fashion 300 row.bin
echo "serve: burst of 300 against a queue of 4: $out"
expect_match "burst: some admitted, none failed otherwise" '"ok":[1-9][0-9]*,"unavailable":[1-9][0-9]*,"other":0' "$out"
$PY -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["slowest_unavailable_ms"] < 2000, o' "$out" && pass || fail "503s are not fast: $out"
$PY - "$http" "$row" <<'PY' && pass || fail "HTTP burst: 503 with Retry-After"
import http.client, sys, threading
host, port = sys.argv[1].split(":")
body = '{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[%s]}]}' % sys.argv[2]
codes, barrier = [], threading.Barrier(200)
def one():
    c = http.client.HTTPConnection(host, int(port), timeout=30); c.connect(); barrier.wait()
    c.request("POST", "/v2/models/big/infer", body); r = c.getresponse(); r.read()
    codes.append((r.status, r.getheader("Retry-After")))
ts = [threading.Thread(target=one) for _ in range(200)]
[t.start() for t in ts]; [t.join() for t in ts]
print(f"serve: HTTP burst of 200: {sum(c == 200 for c, _ in codes)} answered, {sum(c == 503 for c, _ in codes)} refused with 503")
assert all(c in (200, 503) for c, _ in codes) and any(c == 503 for c, _ in codes) and any(c == 200 for c, _ in codes), codes
assert all(ra == "1" for c, ra in codes if c == 503), codes
PY
expect_eq "ready after the burst" 200 "$(code "$http/v2/health/ready")"
expect_match "queue empty after the burst" 'loom_serve_queue_length\{model="fashion"\} 0' "$(curl -s "$http/metrics")"
expect_match "queue empty after the HTTP burst" 'loom_serve_queue_length\{model="big"\} 0' "$(curl -s "$http/metrics")"
# Graceful shutdown: requests admitted before SIGTERM all get their answers.
"$G" "$grpc" burst fashion 60 row.bin >drain.json &
cpid=$!
sleep 0.3
stop
wait $cpid
expect_eq "SIGTERM during a burst: exit 0" 0 "$rc"
expect_match "SIGTERM during a burst: no admitted request lost" '"other":0' "$(cat drain.json)"
echo "serve: SIGTERM during a burst of 60: $(cat drain.json)"

# Per-request timeouts: requests that wait in the queue past --request-timeout-ms are answered
# DEADLINE_EXCEEDED / 504, not computed; the rest succeed.
start slow --model-repository repo2 --max-batch-size 1 --max-queue-delay-us 0 --request-timeout-ms 20
run_cmd "$G" "$grpc" burst big 100 row.bin
echo "serve: burst of 100 with a 20 ms timeout: $out"
expect_match "timeouts: DEADLINE_EXCEEDED for the requests that waited too long" '"ok":[1-9][0-9]*,"unavailable":0,"other":0,.*"deadline_exceeded":[1-9]' "$out"
got=$(curl -s -w '\n%{http_code}' -X POST "$http/v2/models/big/infer" --data-binary @<(printf '{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[%s]}]}' "$row") &
  for i in $(seq 30); do curl -s -o /dev/null -X POST "$http/v2/models/big/infer" \
    --data-binary "{\"inputs\":[{\"name\":\"input\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[$row]}]}" & done; wait)
expect_match "timeouts: HTTP answers 200 or 504" "^(200|504)$" "${got##*$'\n'}"
expect_match "metrics: timeouts counted" 'loom_serve_request_failures_total\{model="big",reason="timeout"\} [1-9]' "$(curl -s "$http/metrics")"
stop
# HTTP graceful shutdown: 60 requests sent at once, SIGTERM while they run: every one answered.
start drain --model-repository repo2 --max-batch-size 1 --max-queue-delay-us 0
$PY - "$http" "$row" "$pid" <<'PY' && pass || fail "HTTP: SIGTERM loses no admitted request"
import http.client, os, signal, sys, threading, time
host, port = sys.argv[1].split(":")
body = '{"inputs":[{"name":"input","shape":[1,784],"datatype":"FP32","data":[%s]}]}' % sys.argv[2]
codes, barrier = [], threading.Barrier(61)
def one():
    c = http.client.HTTPConnection(host, int(port), timeout=30); c.connect(); barrier.wait()
    c.request("POST", "/v2/models/big/infer", body)
    try:
        r = c.getresponse(); r.read(); codes.append(r.status)
    except Exception as e:
        codes.append(repr(e))
ts = [threading.Thread(target=one) for _ in range(60)]
[t.start() for t in ts]; barrier.wait(); time.sleep(0.02); os.kill(int(sys.argv[3]), signal.SIGTERM)
[t.join() for t in ts]
print(f"serve: SIGTERM during 60 HTTP requests: {codes.count(200)} answered 200, others {[c for c in codes if c != 200]}")
assert all(c == 200 for c in codes), codes
PY
wait "$pid"
expect_eq "HTTP drain: exit 0" 0 "$?"

# InferenceService specs: served under metadata.name; bad fields named; other schemes refused.
sed "s#/models/fashion-mlp/1/model.h5#$LOOM_TMP/repo/fashion/1/model.h5#" "$LOOM_SRCDIR/examples/inferenceservice.yaml" >isvc.yaml
start spec --spec isvc.yaml --log-format json
expect_eq "spec: model served under metadata.name" 200 "$(code "$http/v2/models/fashion-mlp/versions/1/ready")"
$PY -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1]) if l.strip()]' spec.log && pass || fail "--log-format json: a line is not JSON"
stop
spec_err() {  # WHAT REGEX SED-EXPR
  sed "$3" isvc.yaml >bad.yaml
  run_cmd "$S" --spec bad.yaml --http-port 0 --grpc-port -1
  expect_eq "$1: exit" 1 "$rc"
  expect_match "$1: message" "$2" "$err"
}
spec_err "unknown field" "unknown field spec.autoscaling.maxReplica " 's/maxReplicas/maxReplica/'
spec_err "other scheme" "scheme s3:// is not supported" "s#path: .*#path: s3://bucket/model.h5#"
spec_err "wrong kind" "kind must be InferenceService" 's/kind: InferenceService/kind: Deployment/'
spec_err "bad quantity" "spec.resources.requests.memory must be a quantity" 's/memory: 8Gi/memory: lots/'
spec_err "min above max" "minReplicas exceeds maxReplicas" 's/minReplicas: 2/minReplicas: 20/'
run_cmd "$S" --model-repository "$LOOM_TMP/nothing-here" --http-port 0
expect_eq "a missing repository: exit" 1 "$rc"
expect_match "a missing repository: message" "not a folder" "$err"
run_cmd "$S" --model-repository repo --device gpu
expect_eq "--device gpu: usage error" 2 "$rc"
if ! nvidia-smi -L >/dev/null 2>&1; then
  run_cmd "$S" --model-repository repo --device cuda --http-port 0 --grpc-port -1
  expect_eq "--device cuda without a GPU: exit" 1 "$rc"
  expect_match "--device cuda without a GPU: says why" "cannot load model .*--device cuda: " "$err"
fi
run_cmd "$S" --model-repository repo --auth-token-file "$LOOM_TMP/no-token"
expect_match "a missing token file" "auth-token-file .*cannot read it" "$err"

# loom-bench serve runs (the figures come from `make bench`; here only that it works).
run_cmd "$LOOM_BUILDDIR/loom-bench" serve --seconds 0.5 --format json
expect_eq "loom-bench serve exit" 0 "$rc"
expect_match "loom-bench serve figures" '"saturation_ratio":[0-9.]+,.*"batching_gain":[0-9.]+,.*"added_latency_ms":[0-9.-]+,.*"transport_ratio":[0-9.]+,"failed":0' "$out"
# --bare-work-us: the bare server spins that long a call, so its rate cannot pass one call per
# 200 us on each CPU (without the spin it answers tens of thousands of calls a second a CPU).
run_cmd "$LOOM_BUILDDIR/loom-bench" serve --seconds 0.5 --bare-work-us 200 --format json
bare_rate=$(sed -n 's/.*"bare_grpc_rows_per_s":\([0-9.]*\),"bare_work_us":200.00,.*/\1/p' <<<"$out")
$PY -c "import os, sys; r = float(sys.argv[1]); sys.exit(0 if 0 < r <= os.cpu_count() * 1e6 / 200 else 1)" "${bare_rate:-0}" && pass ||
  fail "--bare-work-us 200: the bare server answered $bare_rate calls/s on $(nproc) CPUs: $out"
run_cmd "$LOOM_BUILDDIR/loom-bench" serve --bare-work-us -1
expect_eq "--bare-work-us -1 refused" 2 "$rc"
expect_match "--bare-work-us -1: says why" "--bare-work-us must be a number of at least 0" "$err"
finish
