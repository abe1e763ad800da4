#!/usr/bin/env bash
# serve_gpt.sh — loom-serve serving a `gpt` model through the KServe v2 generate extension:
# greedy text equal to PyTorch's greedy continuation with the same weights, streaming
# (server-sent events of whole UTF-8 characters) equal to the plain answer, seeded sampling,
# metadata, and every bad request answered 4xx with the protocol's error body.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
S=$LOOM_BUILDDIR/loom-serve
T=$LOOM_BUILDDIR/loom-train
[ -x "$S" ] || skip "loom-serve not built"
cd "$LOOM_TMP" || exit 99
PY=/usr/bin/python3

# A text with multi-byte UTF-8 characters, so the model's bytes include them.
{ head -c 60000 /usr/share/common-licenses/GPL-3; for i in $(seq 200); do printf 'café naïve € déjà '; done; } >text.txt
mkdir -p repo/g/1 repo/m/1
"$T" --model gpt --data text:"$LOOM_TMP/text.txt" --context 64 --n-embd 32 --n-head 4 --optimizer adamw --lr 0.003 \
  --global-batch 8 --steps 150 --seed 3 --log-every 1000 --export repo/g/1/model.h5 2>/dev/null
"$T" --layers 784,16,10 --steps 5 --global-batch 64 --export repo/m/1/model.h5 2>/dev/null
[ -f repo/g/1/model.h5 ] && [ -f repo/m/1/model.h5 ] || { echo "loom-train export failed"; exit 99; }
chmod -R go-w repo

serve_start serve --model-repository repo --grpc-port 0
expect_match "the gpt loads for generate" "loaded model g version 1 .*gpt, context 64, generate" "$(cat serve.log)"
gen="http://$http/v2/models/g/generate"

run_cmd curl -s "http://$http/v2/models/g"
expect_match "metadata: text in, text out" '"inputs":\[\{"datatype":"BYTES","name":"text_input","shape":\[1\]\}\].*"outputs":\[\{"datatype":"BYTES","name":"text_output"' "$out"
if [ -x "$LOOM_BUILDDIR/tests/serve/kserve_grpc_client" ] && [ -n "$grpc" ]; then  # gRPC answers the same metadata
  run_cmd "$LOOM_BUILDDIR/tests/serve/kserve_grpc_client" "$grpc" metadata g
  expect_match "gRPC metadata: the same text tensors" '"name":"g","versions":1,"platform":"loom-hdf5","input":"text_input BYTES \[1\]","output":"text_output \[1\]","ready":true' "$out"
fi

# Greedy: the same text as PyTorch's greedy continuation with the same weights (the module of
# tests/parity/gpt_parity.py); prompt and answer within the context (the engine stops there).
prompt="This License applies to "
run_cmd curl -s -X POST "$gen" -d "{\"text_input\":\"$prompt\",\"parameters\":{\"max_tokens\":24}}"
greedy=$out
$PY - repo/g/1/model.h5 "$prompt" "$greedy" "$LOOM_SRCDIR/tests/parity/gpt_parity.py" <<'PY' && pass || fail "greedy generate differs from PyTorch"
import json, math, sys
import h5py, numpy as np, torch
from torch import nn
src = open(sys.argv[4]).read()
exec(src[src.index("class Attn"):src.index("\nwith h5py.File")])  # the parity test's PyTorch module
with h5py.File(sys.argv[1], "r") as f:
    cfg = json.loads(f.attrs["model.config"])
    state = {k: torch.from_numpy(np.array(v)) for k, v in f["params"].items()}
model = Gpt(cfg)
model.load_state_dict(state, strict=True)
index = {b: i for i, b in enumerate(cfg["vocab_bytes"])}
ids = [index[b] for b in sys.argv[2].encode()]
out = b""
with torch.no_grad():
    for _ in range(24):
        logits = model(torch.tensor([ids[-cfg["context"]:]]))[0, -1]
        nxt = int(logits.argmax())
        ids.append(nxt)
        out += bytes([cfg["vocab_bytes"][nxt]])
got = json.loads(sys.argv[3])
print(f"serve_gpt: greedy continuation {out!r} (PyTorch) and {got['text_output'].encode()!r} (loom-serve)")
assert got["model_name"] == "g" and got["text_output"].encode() == out, (got, out)
PY

# Streaming: server-sent events whose texts add up to the plain answer, whole characters each.
run_cmd curl -s -N -X POST "http://$http/v2/models/g/generate_stream" -d "{\"text_input\":\"$prompt\",\"max_tokens\":24}"
$PY - "$out" "$greedy" <<'PY' && pass || fail "generate_stream"
import json, sys
events = [json.loads(l[6:]) for l in sys.argv[1].split("\n") if l.startswith("data: ")]
assert len(events) >= 1 and "".join(e["text_output"] for e in events) == json.loads(sys.argv[2])["text_output"], events
assert [e["done"] for e in events] == [False] * (len(events) - 1) + [True] and events[-1]["finish_reason"] == "length", events
PY
# Sampled at a high temperature (bytes of every kind, some not UTF-8): the stream's events add
# up to the plain answer of the same seed (a character split across events would not).
run_cmd curl -s -N -X POST "http://$http/v2/models/g/generate_stream" -d '{"text_input":"caf","max_tokens":200,"temperature":1.5,"seed":5}'
plain=$(curl -s -X POST "$gen" -d '{"text_input":"caf","max_tokens":200,"temperature":1.5,"seed":5}')
$PY - "$out" "$plain" <<'PY' && pass || fail "generate_stream of sampled bytes differs from generate"
import json, sys
events = [json.loads(l[6:]) for l in sys.argv[1].split("\n") if l.startswith("data: ")]
assert "".join(e["text_output"] for e in events) == json.loads(sys.argv[2])["text_output"], (events[:5], sys.argv[2][:200])
PY

# Sampling: the same seed, the same text; another seed, another text.
a=$(curl -s -X POST "$gen" -d '{"text_input":"The ","parameters":{"max_tokens":48,"temperature":1.0,"seed":7}}')
b=$(curl -s -X POST "$gen" -d '{"text_input":"The ","parameters":{"max_tokens":48,"temperature":1.0,"seed":7}}')
c=$(curl -s -X POST "$gen" -d '{"text_input":"The ","parameters":{"max_tokens":48,"temperature":1.0,"seed":8}}')
expect_eq "sampling: the same seed" "$a" "$b"
expect_ne "sampling: another seed" "$a" "$c"

# Bad requests: 4xx with the protocol's error body (422 for parameters, as the generate extension
# says), the server stays up.
bad() {  # WHAT CODE REGEX CURL-ARGS...: KServe's error body
  local what=$1 want=$2 re=$3
  shift 3
  expect_http "$what" "$want" "^\{\"error\":\".*$re" "$@"
}
bad "empty text_input" 400 "must not be empty" -X POST "$gen" -d '{"text_input":""}'
bad "text_input a number" 422 "text_input.*string" -X POST "$gen" -d '{"text_input":5}'
bad "no text_input" 422 "text_input" -X POST "$gen" -d '{"parameters":{}}'
bad "max_tokens 0" 422 "max_tokens must be" -X POST "$gen" -d '{"text_input":"a","max_tokens":0}'
bad "max_tokens 2^21" 422 "max_tokens must be" -X POST "$gen" -d '{"text_input":"a","parameters":{"max_tokens":2097152}}'
bad "max_tokens -1" 422 "max_tokens must be" -X POST "$gen" -d '{"text_input":"a","parameters":{"max_tokens":-1}}'
bad "top_p 0" 422 "top_p must be" -X POST "$gen" -d '{"text_input":"a","top_p":0}'
bad "a prompt past the context" 400 "leave no room in the model's context of 64" -X POST "$gen" -d "{\"text_input\":\"$(printf 'a%.0s' $(seq 64))\"}"
bad "max_tokens text" 422 "max_tokens must be" -X POST "$gen" -d '{"text_input":"a","max_tokens":"9"}'
bad "negative temperature" 422 "temperature must be" -X POST "$gen" -d '{"text_input":"a","temperature":-1}'
bad "a byte outside the vocabulary" 400 "not in the model's vocabulary" -X POST "$gen" -d '{"text_input":"\u0001"}'
bad "malformed JSON" 400 "malformed JSON" -X POST "$gen" -d '{"text_input":'
bad "infer on a gpt" 400 "is a language model: use POST /v2/models/g/generate" -X POST "http://$http/v2/models/g/infer" -d '{}'
bad "generate on an mlp" 400 "is not a language model" -X POST "http://$http/v2/models/m/generate" -d '{"text_input":"a"}'
bad "generate on an unknown model" 404 "unknown model" -X POST "http://$http/v2/models/nope/generate" -d '{"text_input":"a"}'
bad "GET generate" 405 "use POST" "$gen"
expect_eq "still ready" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/v2/health/ready")"
kill -TERM $pid
wait $pid
expect_eq "clean exit" 0 "$?"
# doc/llm.md's offline recipe, run as written (on a free port instead of 8000): train, a template
# in the model folder, serve, complete, chat, stream.
mkdir -p recipe
awk '/<!-- recipe: offline-chat/ {on = 1; next} on && /^```sh/ {inside = 1; next} inside && /^```/ {exit} inside' \
  "$LOOM_SRCDIR/doc/llm.md" >recipe/recipe.sh
port=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -i "s/^port=8000$/port=$port/" recipe/recipe.sh
grep -q "^port=$port$" recipe/recipe.sh && pass || fail "doc/llm.md's recipe block was not found: $(head -3 recipe/recipe.sh)"
run_cmd env PATH="$LOOM_BUILDDIR:$PATH" timeout 300 bash -e -c "cd recipe && . ./recipe.sh"
expect_eq "the offline recipe runs as written ($(tail -3 <<<"$err"))" 0 "$rc"
expect_match "the recipe's completion" '"text":".+".*"object":"text_completion"' "$out"
expect_match "the recipe's chat, with the template from the model folder" '"message":\{"content":".+","role":"assistant"\}.*"object":"chat.completion"' "$out"
expect_match "the recipe's streamed chat" 'chat.completion.chunk.*data: \[DONE\]' "$(tr -d '\n' <<<"$out")"
# The request timeout is tested in serve_llm.sh, on a model whose context holds enough tokens to pass it.
finish
