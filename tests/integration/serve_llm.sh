#!/usr/bin/env bash
# serve_llm.sh — loom-serve's decoder engine on GPT-2 weights as people download them
# (config.json + model.safetensors, written by PyTorch from a test script): OpenAI completions
# token-for-token equal to PyTorch's own greedy loop with a KV cache, for prompts of mixed
# lengths decoded together; the same with the cache paged over a tiny pool that forces
# preemption, and with prefix-cache hits; server-sent event streams read as the SSE spec frames
# them; chat completions through published chat templates, each prompt as Jinja2 renders it;
# the engine's metrics; 1,000 streams that never read; every bad request a 4xx with OpenAI's error body; safetensors
# files whose header lies refused at load with the fault named.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
S=$LOOM_BUILDDIR/loom-serve
[ -x "$S" ] || skip "loom-serve not built"
PY=/usr/bin/python3
$PY -c 'import torch, numpy' 2>/dev/null || skip "python3-torch is needed"
REF=$LOOM_SRCDIR/tests/serve/gpt2_ref.py
CLIENT=$LOOM_SRCDIR/tests/serve/llm_client.py
cd "$LOOM_TMP" || exit 99

mkdir -p repo/gpt2/1 repo/half/1
$PY "$REF" write repo/gpt2/1 --seed 11 --positions 512 --prefix transformer. || { echo "writing GPT-2 weights failed"; exit 99; }
$PY "$REF" write repo/half/1 --seed 12 --dtype F16 || exit 99
# GPT-2's tokenizer: a byte-level BPE trained by Hugging Face's tokenizers (a peer from PyPI, with
# OpenAI's Python client) on a licence text, beside weights of its vocabulary size.
tok_py=""
if tok_env=$("$LOOM_SRCDIR/contrib/peer-venv.sh" llm openai tokenizers jinja2 2>tokenizers.err); then
  tok_py=$tok_env/bin/python3
  mkdir -p repo/bpe/1
  (cd repo/bpe/1 && "$tok_py" -c 'from tokenizers import ByteLevelBPETokenizer as B
t = B(); t.train(["/usr/share/common-licenses/GPL-3"], vocab_size=600, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False); t.save_model(".")') &&
    $PY "$REF" write repo/bpe/1 --seed 13 --vocab 600 || exit 99
  # Chat templates as published models carry them, each beside a copy of the BPE model.
  "$tok_py" "$LOOM_SRCDIR/tests/serve/chat_test.py" write repo repo/bpe/1 || exit 99
else
  echo "SKIP (part): GPT-2's tokenizer against Hugging Face's, OpenAI's client: $(cat tokenizers.err)"
fi
chmod -R go-w repo
prompts='[[1,2,3,4,5],[7,8],[9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40],[100],[5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5,5],[250,251,252,253,254,255,256,257,258,259,260,261,262,263,264,265,266]]'
want=$($PY "$REF" greedy repo/gpt2/1 40 "$prompts")

serve_start serve --model-repository repo --grpc-port -1 --max-num-seqs 8
expect_match "GPT-2 loads for generate" "loaded model gpt2 version 1 .*gpt2, context 512, generate, up to 8 sequences" "$(cat serve.log)"
expect_match "F16 weights load" "loaded model half version 1 .*gpt2, context 128" "$(cat serve.log)"
run_cmd curl -s "http://$http/v1/models"
expect_match "/v1/models lists them" '"id":"gpt2".*"max_model_len":512' "$out"

# Six prompts of 1 to 32 tokens at once: decoded together, each equal to PyTorch's greedy loop.
run_cmd $PY "$CLIENT" greedy "http://$http" gpt2 40 "$prompts" "$want"
[ "$rc" = 0 ] && pass || fail "completions differ from PyTorch's greedy loop: $out"
run_cmd $PY "$CLIENT" greedy "http://$http" gpt2 40 "$prompts" "$want" --stream
[ "$rc" = 0 ] && pass || fail "streamed completions differ from PyTorch's greedy loop: $out"
metrics=$(curl -s "http://$http/metrics")
expect_match "steps decoded several sequences at once" 'loom_llm_generation_tokens_total\{model="gpt2",version="1"\} 480' "$metrics"
steps=$(echo "$metrics" | grep -oP 'loom_llm_steps_total\{model="gpt2",version="1"\} \K[0-9]+')
# One at a time would take 480 steps or more; a quarter fewer shows steps decoding several
# sequences even when a loaded machine staggers the six clients (267 steps were seen so).
[ "${steps:-999}" -lt 360 ] && pass || fail "480 tokens took $steps steps: sequences were not batched"
expect_match "time to first token reported" 'loom_llm_time_to_first_token_seconds_count\{model="gpt2",version="1"\} 12' "$metrics"
# A non-streamed completion whose client leaves: its 16 sequences are cancelled, not generated to
# the end (8,000 tokens, about 0.4 s here) for nobody.
tokens() { curl -s "http://$http/metrics" | grep -oP 'loom_llm_generation_tokens_total\{model="gpt2",version="1"\} \K[0-9]+'; }
before=$(tokens)
$PY - "$http" <<'PY'
import json, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
body = json.dumps({"model": "gpt2", "prompt": [1, 2, 3], "n": 16, "max_tokens": 500, "ignore_eos": True}).encode()
s = socket.create_connection((host, int(port)))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
time.sleep(0.05)
s.close()
PY
sleep 1
a=$(tokens)
sleep 1
b=$(tokens)
expect_eq "a non-streamed completion stops once its client left" "$a" "$b"
[ $((b - before)) -lt 8000 ] && pass || fail "a non-streamed completion whose client left generated $((b - before)) of 8000 tokens"
echo "serve_llm: a non-streamed completion (n=16, 500 tokens each) whose client left after 0.05 s: $((b - before)) of 8000 tokens generated"

# GPT-2's BPE: the ids of Hugging Face's tokenizers for texts of every kind, and text in, text
# out through KServe's generate equal to PyTorch's greedy tokens decoded.
if [ -n "$tok_py" ]; then
  expect_match "the BPE model loads with its tokenizer" "loaded model bpe version 1 .*bpe tokenizer" "$(cat serve.log)"
  run_cmd "$tok_py" "$CLIENT" tokenize "http://$http" bpe repo/bpe/1/vocab.json repo/bpe/1/merges.txt
  [ "$rc" = 0 ] && pass || fail "BPE tokenization differs from Hugging Face's tokenizers: $out"
  echo "$out" | tail -1
  # Special tokens are matched in text before BPE, as Hugging Face's tokenizer does (a folder
  # without tokenizer.json or tokenizer_config.json: GPT-2's <|endoftext|>).
  special_text="one<|endoftext|>two <|endoftext|><|endoftext|>"
  want_ids=$("$tok_py" -c 'import sys; from tokenizers import ByteLevelBPETokenizer as B
t = B(sys.argv[1], sys.argv[2]); t.add_special_tokens(["<|endoftext|>"]); print(t.encode(sys.argv[3]).ids)' \
    repo/bpe/1/vocab.json repo/bpe/1/merges.txt "$special_text")
  run_cmd curl -s "http://$http/tokenize" -d "{\"model\":\"bpe\",\"prompt\":\"$special_text\"}"
  expect_eq "special tokens as Hugging Face's tokenizer matches them" "$want_ids" \
    "$(echo "$out" | $PY -c 'import json, sys; print(json.load(sys.stdin)["tokens"])')"
  # /v1/chat/completions: each template's prompt as Jinja2 renders it, refusals, answers, streams.
  run_cmd "$tok_py" "$LOOM_SRCDIR/tests/serve/chat_test.py" check "http://$http"
  [ "$rc" = 0 ] && pass || fail "chat completions: $out"
  echo "$out" | tail -1
  text="This License applies to any program"
  ids=$("$tok_py" -c 'import sys; from tokenizers import ByteLevelBPETokenizer as B; print(B(sys.argv[1], sys.argv[2]).encode(sys.argv[3]).ids)' \
    repo/bpe/1/vocab.json repo/bpe/1/merges.txt "$text")
  want_text=$("$tok_py" -c 'import json, sys; from tokenizers import ByteLevelBPETokenizer as B
print(json.dumps(B(sys.argv[1], sys.argv[2]).decode(json.loads(sys.argv[3])[0])))' repo/bpe/1/vocab.json repo/bpe/1/merges.txt \
    "$($PY "$REF" greedy repo/bpe/1 12 "[$ids]")")
  run_cmd curl -s "http://$http/v2/models/bpe/generate" -d "{\"text_input\":\"$text\",\"parameters\":{\"max_tokens\":12,\"ignore_eos\":true}}"
  expect_eq "text in, text out: PyTorch's greedy tokens decoded" "$want_text" "$(echo "$out" | $PY -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["text_output"]))')"
  head -c 300000 /dev/zero | tr '\0' a >long.txt
  $PY -c 'import json; print(json.dumps({"model": "bpe", "prompt": open("long.txt").read()}))' >long.json
  expect_http "a text no context could hold, refused before it is encoded" 400 "cannot fit in the model's context of 128" \
    "http://$http/v1/completions" -d @long.json
  # Memory: a chat request with 8 MB of tools its template (chatml) never reads, and a completion
  # with an 8 MB member no API reads: neither is built, only the tools' function names (once
  # +836 MB and +205 MB resident after; +121 MB with the tools built whole, +44 MB without).
  rss() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status"; }
  $PY -c 'import json; print(json.dumps({"model": "chat-chatml", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f%d" % i, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
              for i in range(80000)]}))' >tools.json
  $PY -c 'import json; print(json.dumps({"model": "gpt2", "prompt": [1], "max_tokens": 1, "unused": [0] * 4000000}))' >unused.json
  r0=$(rss)
  for body in tools.json unused.json tools.json unused.json; do
    expect_eq "an 8 MB request of what is never read: answered" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/v1/$([ $body = tools.json ] && echo chat/)completions" -d @$body)"
  done
  r1=$(rss)
  echo "serve_llm: 8 MB requests with unread tools and an unread member, twice each: the server grew $((r1 - r0)) MiB (from $r0)"
  [ $((r1 - r0)) -lt 90 ] && pass || fail "8 MB requests of what is never read grew the server $((r1 - r0)) MiB"
  run_cmd "$tok_py" "$CLIENT" openai "http://$http" bpe "$($PY -c 'import json, sys; print(json.loads(sys.argv[1]))' "$want_text")" "$text"
  [ "$rc" = 0 ] && pass || fail "OpenAI's client: $out $err"
  echo "$out" | tail -1
fi

# F16 weights (read and widened): greedy equal to PyTorch's on the same F16 values.
want_half=$($PY "$REF" greedy repo/half/1 20 '[[3,1,4,1,5,9,2,6]]')
run_cmd $PY "$CLIENT" greedy "http://$http" half 20 '[[3,1,4,1,5,9,2,6]]' "$want_half"
[ "$rc" = 0 ] && pass || fail "F16 GPT-2 differs: $out"

# n, logprobs, usage and seeded sampling.
run_cmd curl -s "http://$http/v1/completions" -d '{"model":"gpt2","prompt":[1,2,3],"max_tokens":5,"n":3,"temperature":1.0,"seed":4,"logprobs":2}'
$PY - "$out" <<'PY' && pass || fail "n, logprobs and usage"
import json, math, sys
a = json.loads(sys.argv[1])
assert len(a["choices"]) == 3 and [c["index"] for c in a["choices"]] == [0, 1, 2], a
assert a["usage"] == {"prompt_tokens": 3, "completion_tokens": 15, "total_tokens": 18}, a["usage"]
for c in a["choices"]:
    lp = c["logprobs"]
    assert lp["tokens"] == [f"token_id:{t}" for t in c["token_ids"]] and len(lp["token_logprobs"]) == 5, lp
    assert all(x <= 0 for x in lp["token_logprobs"]) and all(len(t) == 2 for t in lp["top_logprobs"]), lp
assert len({tuple(c["token_ids"]) for c in a["choices"]}) > 1, "three draws gave the same tokens"
PY
a=$(curl -s "http://$http/v1/completions" -d '{"model":"gpt2","prompt":[1,2,3],"max_tokens":12,"temperature":0.8,"top_p":0.9,"top_k":50,"seed":9}')
b=$(curl -s "http://$http/v1/completions" -d '{"model":"gpt2","prompt":[1,2,3],"max_tokens":12,"temperature":0.8,"top_p":0.9,"top_k":50,"seed":9}')
expect_eq "seeded sampling repeats" "$(echo "$a" | grep -o '"token_ids":\[[0-9,]*\]')" "$(echo "$b" | grep -o '"token_ids":\[[0-9,]*\]')"
# A stop token ends the sequence with finish_reason stop.
first=$(echo "$want" | $PY -c 'import json,sys; print(json.load(sys.stdin)[0][3])')
run_cmd curl -s "http://$http/v1/completions" -d "{\"model\":\"gpt2\",\"prompt\":[1,2,3,4,5],\"max_tokens\":30,\"temperature\":0,\"stop_token_ids\":[$first]}"
$PY - "$out" "$want" "$first" <<'PY' && pass || fail "stop_token_ids"
import json, sys
c, want, first = json.loads(sys.argv[1])["choices"][0], json.loads(sys.argv[2])[0], int(sys.argv[3])
assert c["finish_reason"] == "stop" and c["token_ids"] == want[:want.index(first) + 1], (c, want)
PY

# Bad requests: OpenAI's error body, a 4xx, the server keeps serving.
bad() {  # WHAT CODE REGEX CURL-ARGS...: OpenAI's error body
  local what=$1 want=$2 re=$3
  shift 3
  expect_http "$what" "$want" "^\{\"error\":\{.*\"message\":\".*$re" "$@"
}
c="http://$http/v1/completions"
long=$($PY -c 'print([1] * 512)')
bad "a prompt past the context" 400 "leave no room in the model's context of 512" "$c" -d "{\"model\":\"gpt2\",\"prompt\":$long}"
bad "max_tokens 0" 400 "max_tokens must be" "$c" -d '{"model":"gpt2","prompt":[1],"max_tokens":0}'
bad "max_tokens -5" 400 "max_tokens must be" "$c" -d '{"model":"gpt2","prompt":[1],"max_tokens":-5}'
bad "max_tokens huge" 400 "max_tokens must be" "$c" -d '{"model":"gpt2","prompt":[1],"max_tokens":99999999999}'
bad "temperature NaN" 400 "malformed JSON" "$c" -d '{"model":"gpt2","prompt":[1],"temperature":NaN}'
bad "temperature negative" 400 "temperature must be" "$c" -d '{"model":"gpt2","prompt":[1],"temperature":-0.5}'
bad "top_p 0" 400 "top_p must be" "$c" -d '{"model":"gpt2","prompt":[1],"top_p":0}'
bad "top_p 1.5" 400 "top_p must be" "$c" -d '{"model":"gpt2","prompt":[1],"top_p":1.5}'
$PY -c 'import json; print(json.dumps({"model": "gpt2", "prompt": [1], "stop": ["s%d" % i for i in range(10000)]}))' >stops.json
bad "10,000 stop strings" 400 "stop must be a string or a list of at most 64" "$c" -d @stops.json
printf '{"model":"gpt2","prompt":"caf\xff"}' >badutf8.json
bad "invalid UTF-8" 400 "malformed JSON" "$c" --data-binary @badutf8.json
bad "a token outside the vocabulary" 400 "outside the vocabulary" "$c" -d '{"model":"gpt2","prompt":[1,300]}'
bad "text without a tokenizer" 400 "has no tokenizer" "$c" -d '{"model":"gpt2","prompt":"hello"}'
bad "an unknown model" 404 "unknown model" "$c" -d '{"model":"nope","prompt":[1]}'
bad "no model" 400 "names no model" "$c" -d '{"prompt":[1]}'
bad "echo" 400 "echo is not supported" "$c" -d '{"model":"gpt2","prompt":[1],"echo":true}'
bad "chat without a template" 400 "has no chat template" "http://$http/v1/chat/completions" -d '{"model":"gpt2","messages":[{"role":"user","content":"hi"}]}'
bad "GET completions" 405 "use POST" "$c"
expect_eq "still ready" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/v2/health/ready")"

# A client that goes away mid-stream: its sequence is freed at the next step.
$PY - "http://$http" <<'PY' && pass || fail "a dropped stream keeps its sequence"
import json, socket, sys, time, urllib.request
host, port = sys.argv[1][7:].split(":")
s = socket.create_connection((host, int(port)))
body = json.dumps({"model": "gpt2", "prompt": [1, 2], "max_tokens": 500, "stream": True, "ignore_eos": True})
s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
s.recv(4096)
s.close()
for _ in range(100):
    m = urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode()
    if 'loom_llm_running_sequences{model="gpt2",version="1"} 0' in m:
        sys.exit(0)
    time.sleep(0.05)
sys.exit("the sequence of a closed connection is still running")
PY
# 1,000 streams from clients that never read: half the connections at most stream (the rest get
# 503 and their connection closed), others are still answered, memory stays bounded.
run_cmd $PY "$CLIENT" flood "http://$http" gpt2 "$pid"
[ "$rc" = 0 ] && pass || fail "1,000 streams that never read: $out $err"
echo "$out" | tail -1
kill -TERM $pid
wait $pid
expect_eq "clean exit" 0 "$?"

# A pool of 6 blocks (96 positions) for six sequences of up to 72: the newest are preempted and
# recomputed, and prefix-cache hits give the same tokens as misses.
per_block=$((2 * 2 * 16 * 64 * 4))
serve_start tiny --model-repository repo --grpc-port -1 --kv-cache-bytes $((6 * per_block))
run_cmd $PY "$CLIENT" greedy "http://$http" gpt2 40 "$prompts" "$want"
[ "$rc" = 0 ] && pass || fail "with preemption, completions differ from PyTorch's greedy loop: $out"
metrics=$(curl -s "http://$http/metrics")
expect_match "preemption happened" 'loom_llm_preemptions_total\{model="gpt2",version="1"\} [1-9]' "$metrics"
expect_match "the prefix cache hit" 'loom_llm_prefix_cache_hits_total\{model="gpt2",version="1"\} [1-9]' "$metrics"
bad "a prompt larger than the pool" 400 "need more than the KV cache's 6 blocks" "http://$http/v1/completions" \
  -d "{\"model\":\"gpt2\",\"prompt\":$($PY -c 'print(list(range(1, 100)))')}"
kill -TERM $pid
wait $pid
# Without prefix caching: no hits, the same tokens.
serve_start nocache --model-repository repo --grpc-port -1 --no-prefix-caching --max-num-seqs 1
run_cmd $PY "$CLIENT" greedy "http://$http" gpt2 40 "$prompts" "$want"
[ "$rc" = 0 ] && pass || fail "one sequence at a time, without prefix caching: $out"
expect_match "no prefix-cache hits" 'loom_llm_prefix_cache_hits_total\{model="gpt2",version="1"\} 0' "$(curl -s "http://$http/metrics")"
kill -TERM $pid
wait $pid
# KServe's InferenceService for a Hugging Face folder (examples/kserve-gpt2.yaml with this folder).
sed "s#file:///models/gpt2#file://$LOOM_TMP/repo/gpt2/1#" "$LOOM_SRCDIR/examples/kserve-gpt2.yaml" >gpt2.yaml
serve_start spec --spec gpt2.yaml --grpc-port -1
run_cmd $PY "$CLIENT" greedy "http://$http" gpt2 40 "[$(echo "$prompts" | $PY -c 'import json,sys; print(json.load(sys.stdin)[0])')]" \
  "[$(echo "$want" | $PY -c 'import json,sys; print(json.load(sys.stdin)[0])')]"
[ "$rc" = 0 ] && pass || fail "the KServe InferenceService of a GPT-2 folder: $out $(cat spec.log)"
kill -TERM $pid
wait $pid
# Past --request-timeout-ms: 504 naming how far it got (500 tokens never fit in 5 ms).
serve_start slow --model-repository repo --grpc-port -1 --request-timeout-ms 5
bad "past the request timeout" 504 "timed out after" "http://$http/v1/completions" -d '{"model":"gpt2","prompt":[1],"max_tokens":500,"ignore_eos":true}'
kill -TERM $pid
wait $pid

# safetensors files whose header lies: refused at load, the fault named, the others served.
mkdir -p lies
lie() {  # NAME PYTHON-EDIT-OF-(header, data)
  mkdir -p "lies/$1/1"
  cp repo/gpt2/1/config.json "lies/$1/1/"
  $PY - repo/gpt2/1/model.safetensors "lies/$1/1/model.safetensors" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
exec(sys.argv[3])
head = json.dumps(h).encode() if not isinstance(h, bytes) else h
open(sys.argv[2], "wb").write(struct.pack("<Q", N if "N" in dir() else len(head)) + head + data)
PY
}
lie past_end 'h["transformer.wte.weight"]["data_offsets"][1] += 10**9'
lie overlap 'k = "transformer.wpe.weight"; h[k]["data_offsets"] = [h["transformer.wte.weight"]["data_offsets"][0] + 4, h["transformer.wte.weight"]["data_offsets"][0] + 4 + h[k]["data_offsets"][1] - h[k]["data_offsets"][0]]'
lie bad_shape 'h["transformer.h.0.mlp.c_fc.weight"]["shape"] = [256, 64]'
lie huge_header 'N = 4 << 30'
lie not_json 'h = b"{not json"'
lie deep_shape 'h = json.dumps(h)[:-1].encode() + b", \"deep\": {\"dtype\": \"F32\", \"shape\": " + b"[" * 500000 + b"]" * 500000 + b", \"data_offsets\": [0, 4]}}"'
lie missing 'del h["transformer.ln_f.bias"]'
mkdir -p lies/tokdis/1 && cp repo/gpt2/1/* lies/tokdis/1/ && $PY "$REF" vocab lies/tokdis/1/vocab.json
printf '#version: 0.2\na b\na c\n' >lies/tokdis/1/merges.txt  # "ac" is not in the vocabulary
# Model files that once ended the server at startup: JSON nested half a million deep (the error
# messages dumped it), ids past 32 bits (read as small ones), a NUL in merges.txt (the message cut
# there), a config value of the wrong type (a message naming neither file nor key).
for d in deepvocab bigid nulmerge eosbig actfn deepconf; do mkdir -p lies/$d/1 && cp repo/gpt2/1/* lies/$d/1/; done
$PY "$REF" vocab lies/bigid/1/vocab.json && cp lies/bigid/1/vocab.json lies/nulmerge/1/
$PY - lies <<'PY'
import json, sys
deep = "[" * 500000 + "]" * 500000
open(f"{sys.argv[1]}/deepvocab/1/vocab.json", "w").write('{"a": ' + deep + "}")
open(f"{sys.argv[1]}/deepvocab/1/merges.txt", "w").write("#version: 0.2\n")
open(f"{sys.argv[1]}/bigid/1/merges.txt", "w").write("#version: 0.2\na b\n")
json.dump({"added_tokens": [{"id": 4294967299, "content": "<|big|>"}]}, open(f"{sys.argv[1]}/bigid/1/tokenizer.json", "w"))
open(f"{sys.argv[1]}/nulmerge/1/merges.txt", "wb").write(b"#version: 0.2\na b\na\x00b c\n")
for d, change in (("eosbig", {"eos_token_id": 4294967301}), ("actfn", {"activation_function": 5})):
    cfg = json.load(open(f"{sys.argv[1]}/{d}/1/config.json"))
    cfg.update(change)
    json.dump(cfg, open(f"{sys.argv[1]}/{d}/1/config.json", "w"))
open(f"{sys.argv[1]}/deepconf/1/config.json", "w").write('{"n_layer": ' + deep + "}")
PY
mkdir -p lies/conf/1 && cp repo/gpt2/1/model.safetensors lies/conf/1/ && echo '{"n_layer":2,"n_head":4,"n_embd":32,"n_positions":512,"vocab_size":300}' >lies/conf/1/config.json
cp -r repo/gpt2 lies/good
chmod -R go-w lies
serve_start lies --model-repository lies --grpc-port -1
log=$(cat lies.log)
expect_match "offsets past the end" "past_end.*data_offsets .* lie outside the file" "$log"
expect_match "overlapping tensors" "overlap.*tensors '.*' and '.*' overlap" "$log"
expect_match "a shape that disagrees" "bad_shape.*(mlp.c_fc.weight' has shape \[256, 64\] where config.json gives \[64, 256\]|bytes for shape)" "$log"
expect_match "a 4 GB header length" "huge_header.*header length 4294967296 exceeds" "$log"
expect_match "a header that is not JSON" "not_json.*the header: not valid JSON" "$log"
expect_match "a header nested half a million deep" "deep_shape.*the header: JSON nested deeper than 64 levels" "$log"
expect_match "a vocab.json nested half a million deep" "deepvocab.*vocab.json: JSON nested deeper than 64 levels" "$log"
expect_match "a config.json nested half a million deep" "deepconf.*config.json: JSON nested deeper than 64 levels" "$log"
expect_match "an added token's id past 32 bits" "bigid.*(special|added) token '<\|big\|>' has id 4294967299, outside the vocabulary" "$log"
expect_match "eos_token_id past 32 bits" "eosbig.*eos_token_id 4294967301 is outside the vocabulary" "$log"
expect_match "a NUL in merges.txt, shown" "nulmerge.*merges.txt:3: 'a.x00b' is not in .*vocab.json \(the files disagree\)" "$log"
expect_match "a config value of the wrong type, named" "actfn.*config.json: activation_function must be a string, not 5" "$log"
expect_match "a missing tensor" "missing.*no tensor 'ln_f.bias'" "$log"
expect_match "shapes that disagree with config.json" "conf.*has shape \[300, 64\] where config.json gives \[300, 32\]" "$log"
expect_match "a vocab.json and merges.txt that disagree" "tokdis.*merges.txt:3: 'ac' is not in .*vocab.json \(the files disagree\)" "$log"
expect_match "the good one serves" "loaded model good version 1" "$log"
kill -TERM $pid
wait $pid
finish
