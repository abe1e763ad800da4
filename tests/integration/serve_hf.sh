#!/usr/bin/env bash
# serve_hf.sh — loom-serve on Hugging Face model folders: Llama, Mistral, Qwen2 and Qwen3 (random
# weights, f32, f16 and bf16, single and sharded) and GPT-2 with a tokenizer.json only, written as
# transformers and tokenizers write them: greedy completions token-for-token equal to the
# reference (transformers' generate() where PyTorch 2 runs; else the same decoder written out in
# Debian's PyTorch, tests/serve/hf_ref.py), plain and streamed; RoPE scaled by llama3 and yarn past
# the original context; prompt ids equal to the tokenizers library's on a multilingual text and
# decoded as it decodes; chat prompts equal to the template's rendering; tool calls in the hermes,
# llama3_json and mistral formats (auto, required, a named function) from models crafted to write
# them, whole and streamed, as OpenAI's client reads them, and malformed ones as text. Then each
# bad folder is refused at load naming the file and the field, a pattern that backtracks without
# end fails its request, and the server keeps serving the good models.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
S=$LOOM_BUILDDIR/loom-serve
[ -x "$S" ] || skip "loom-serve not built"
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || skip "python3-torch is needed"
REF=$LOOM_SRCDIR/tests/serve/hf_ref.py
CLIENT=$LOOM_SRCDIR/tests/serve/llm_client.py
# transformers and tokenizers from PyPI beside Debian's PyTorch (numpy kept below 2 for it).
hf=$(LOOM_PEER_SYSTEM_SITE=1 "$LOOM_SRCDIR/contrib/peer-venv.sh" hf transformers tokenizers jinja2 "numpy<2" 2>"$LOOM_TMP/peer.err") ||
  skip "transformers and tokenizers from PyPI: $(cat "$LOOM_TMP/peer.err")"
HP=${LOOM_TORCH_PYTHON:-$hf/bin/python}  # LOOM_TORCH_PYTHON: a Python with PyTorch 2 and transformers
cd "$LOOM_TMP" || exit 99
quiet() { grep -v -i -e "pytorch" -e "warn" -e "^ *$" -e "Writing model" || true; }

# NAME ARCH TOKENIZER DTYPE SHARD [ROPE_JSON]
folder() {
  mkdir -p repo/$1/1
  "$hf/bin/python" "$REF" tokenizer repo/$1/1 "$3" 2>&1 | quiet
  local shard=()
  [ "$5" != - ] && shard=(--shard "$5")
  "$HP" "$REF" model repo/$1/1 "$2" --dtype "$4" "${shard[@]}" --seed "${#1}" ${6:+--rope "$6"} 2>&1 | quiet
  [ -f repo/$1/1/config.json ] || { echo "writing $1 failed"; exit 99; }
}
folder llama llama llama3 float32 -
folder mistral mistral mistral bfloat16 20000
folder qwen2 qwen2 qwen float16 -
folder qwen3 qwen3 legacy bfloat16 30000
folder llama3rope llama llama3 float32 - '{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":32}'
folder yarn qwen2 qwen float32 - '{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":64}'
# GPT-2 as transformers 5 saves it: tokenizer.json, no vocab.json or merges.txt.
mkdir -p repo/gpt2/1
"$hf/bin/python" "$REF" tokenizer repo/gpt2/1 gpt2 2>&1 | quiet
/usr/bin/python3 "$LOOM_SRCDIR/tests/serve/gpt2_ref.py" write repo/gpt2/1 --seed 5 --vocab 800 --positions 256 || exit 99
# generation_config.json's sampling defaults: top_k 1 makes a request that sets none greedy.
mkdir -p repo/topk1/1 && cp repo/llama/1/* repo/topk1/1/
/usr/bin/python3 -c 'import json, sys; p = sys.argv[1]; g = json.load(open(p)); g["top_k"] = 1; json.dump(g, open(p, "w"))' repo/topk1/1/generation_config.json
chmod -R go-w repo

serve_start serve --model-repository repo --grpc-port -1 --max-num-seqs 8
for m in llama mistral qwen2 qwen3 llama3rope yarn; do
  expect_match "$m loads" "loaded model $m version 1 .*context [0-9]+, generate.*tokenizer.json tokenizer, chat template" "$(cat serve.log)"
done
expect_match "GPT-2 with tokenizer.json only" "loaded model gpt2 version 1 .*gpt2, context 256, generate.*tokenizer.json tokenizer" "$(cat serve.log)"
expect_match "a sharded index" "loaded model mistral version 1 from repo/mistral/1/model.safetensors.index.json" "$(cat serve.log)"

prompts='[[1,2,3,4,5],[7,8],[9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40],[100],[250,251,252,253,254,255,256,257,258,259,260,261,262,263,264,265,266]]'
long=$(python3 -c 'import json; print(json.dumps([list(range(3, 123)), [5, 6, 7], list(range(200, 290))]))')
for m in llama mistral qwen2 qwen3 llama3rope yarn gpt2; do
  p=$prompts
  case $m in llama3rope | yarn) p=$long ;; esac
  if [ $m = gpt2 ]; then
    want=$(/usr/bin/python3 "$LOOM_SRCDIR/tests/serve/gpt2_ref.py" greedy repo/gpt2/1 24 "$p")
  else
    want=$("$HP" "$REF" greedy repo/$m/1 24 "$p" 2>/dev/null)
  fi
  run_cmd python3 "$CLIENT" greedy "http://$http" $m 24 "$p" "$want"
  [ "$rc" = 0 ] && pass || fail "$m: completions differ from the reference: $out"
  run_cmd python3 "$CLIENT" greedy "http://$http" $m 24 "$p" "$want" --stream
  [ "$rc" = 0 ] && pass || fail "$m: streamed completions differ from the reference: $out"
done
for m in llama mistral qwen2 qwen3 gpt2; do
  run_cmd "$hf/bin/python" "$CLIENT" hf-tokenize "http://$http" $m repo/$m/1
  [ "$rc" = 0 ] && pass || fail "$m: prompt ids differ from the tokenizers library's: $out"
  echo "$out" | tail -n 1
  run_cmd "$hf/bin/python" "$CLIENT" hf-chat "http://$http" $m repo/$m/1  # transformers' apply_chat_template
  [ "$rc" = 0 ] && pass || fail "$m: chat prompts differ from the template's: $out"
done
want=$("$HP" "$REF" greedy repo/llama/1 16 '[[1,2,3,4,5]]' 2>/dev/null)
got=$(curl -s "http://$http/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"topk1","prompt":[1,2,3,4,5],"max_tokens":16,"ignore_eos":true}' | python3 -c 'import json, sys; print(json.dumps([json.load(sys.stdin)["choices"][0]["token_ids"]]))')
expect_eq "generation_config.json's top_k where the request sets none" "$(echo "$want" | tr -d ' ')" "$(echo "$got" | tr -d ' ')"
# A completion's text prompt gets the BOS the post-processor adds; a chat prompt's template writes it.
bos=$(curl -s "http://$http/tokenize" -H 'Content-Type: application/json' -d '{"model":"llama","prompt":"hi"}')
expect_match "the BOS of Llama's template" '"tokens":\[0,' "$bos"
nobos=$(curl -s "http://$http/tokenize" -H 'Content-Type: application/json' -d '{"model":"llama","prompt":"hi","add_special_tokens":false}')
expect_no_match "add_special_tokens false" '"tokens":\[0,' "$nobos"

# ---- tool calls: models crafted to answer with a call (hf_ref.py crafted), read by OpenAI's client
if llm=$("$LOOM_SRCDIR/contrib/peer-venv.sh" llm openai tokenizers jinja2 2>peer.err); then
  REQ='{"messages":[{"role":"user","content":"What is the weather in Paris?"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}'
  call='{"name": "get_weather", "arguments": {"city": "Paris"}}'
  craft() { "$hf/bin/python" "$REF" crafted "tools/$1/1" "$2" "$3" "$REQ" "${4:-}" 2>&1 | quiet; }
  craft hermes qwen "Checking.<tool_call>
$call
</tool_call>"
  craft llama llama3 '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'
  craft mistral mistral "[TOOL_CALLS][$call]"
  craft malformed qwen 'Paris is sunny, <tool_call>{"name": "get_weather", "arguments": {"city": '
  craft named qwen '{"city": "Paris"}}
</tool_call>' '<tool_call>
{"name": "get_weather", "arguments": '
  craft required mistral "[$call]" '[TOOL_CALLS]'
  chmod -R go-w tools
  kill $pid; wait $pid 2>/dev/null
  serve_start tools --model-repository tools --grpc-port -1
  for spec in "hermes Checking. auto" "llama - auto" "mistral - auto" "named - get_weather" "required - required"; do
    set -- $spec
    content=$2
    [ "$content" = - ] && content=""
    run_cmd "$llm/bin/python" "$CLIENT" tools "http://$http" "$1" "$REQ" "$content" get_weather '{"city": "Paris"}' "$3"
    [ "$rc" = 0 ] && pass || fail "$1: $out"
    echo "$out" | tail -n 1
  done
  run_cmd "$llm/bin/python" "$CLIENT" tools "http://$http" malformed "$REQ" 'Paris is sunny, <tool_call>{"name": "get_weather", "arguments": {"city": ' - - auto
  [ "$rc" = 0 ] && pass || fail "a call of malformed JSON is not returned as text: $out"
  expect_http "tool_choice naming a function tools lacks" 400 "names the function 'nope', which tools does not hold" -X POST "http://$http/v1/chat/completions" \
    -H 'Content-Type: application/json' -d '{"model":"hermes","messages":[{"role":"user","content":"hi"}],"tools":[],"tool_choice":{"type":"function","function":{"name":"nope"}}}'
  kill $pid; wait $pid 2>/dev/null
  serve_start serve --model-repository repo --grpc-port -1
  expect_http "tool_choice auto on a model with no tool-call format" 400 "has no tool-call format" -X POST "http://$http/v1/chat/completions" \
    -H 'Content-Type: application/json' -d '{"model":"gpt2","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}'
else
  echo "SKIP (part): tool calls through OpenAI's client: $(cat peer.err)"
fi

# ---- bad folders: each refused at load, naming the file and the field
bad() {  # NAME FROM: a copy of a good folder to spoil
  mkdir -p lies/$1/1 && cp repo/$2/1/* lies/$1/1/
}
bad noshard mistral && rm lies/noshard/1/model-00003-of-*.safetensors
bad lacks mistral && json_edit lies/lacks/1/model.safetensors.index.json 'j["weight_map"]["model.layers.9.mlp.up_proj.weight"] = sorted(set(j["weight_map"].values()))[0]'
bad unnamed mistral && json_edit lies/unnamed/1/model.safetensors.index.json 'del j["weight_map"]["model.norm.weight"]'
bad escape mistral && json_edit lies/escape/1/model.safetensors.index.json 'j["weight_map"]["model.norm.weight"] = "../../../etc/passwd"'
bad shape llama && json_edit lies/shape/1/config.json 'j["intermediate_size"] = 96'
bad heads llama && json_edit lies/heads/1/config.json 'j["num_key_value_heads"] = 3'
bad rope llama && json_edit lies/rope/1/config.json 'j["rope_parameters"] = {"rope_type": "longrope2", "factor": 2.0}'
bad arch llama && json_edit lies/arch/1/config.json 'j["architectures"] = ["GemmaForCausalLM"]'
bad component qwen2 && json_edit lies/component/1/tokenizer.json 'j["normalizer"] = {"type": "NFKD"}'
bad merges qwen2 && json_edit lies/merges/1/tokenizer.json 'j["model"]["merges"][3] = ["zz-not-a-token", "q"]'
bad regex llama && json_edit lies/regex/1/tokenizer.json 'j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?<a>x)(?<a>y)["'
bad backtrack llama && json_edit lies/backtrack/1/tokenizer.json 'j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|aa)+$"'
chmod -R go-w lies
kill $pid; wait $pid 2>/dev/null
serve_start lies --model-repository lies --grpc-port -1
log=$(cat lies.log)
expect_match "an index naming a missing shard" "noshard.*model.safetensors.index.json: names the shard model-00003-of-[0-9]+.safetensors .*which the folder does not hold" "$log"
expect_match "a tensor the shard lacks" "lacks.*model.safetensors.index.json: tensor 'model.layers.9.mlp.up_proj.weight' should be in model-00001-of-[0-9]+.safetensors, which does not hold it" "$log"
expect_match "a tensor the index does not name" "unnamed.*holds tensor 'model.norm.weight', which .*model.safetensors.index.json does not name" "$log"
expect_match "a shard outside the folder" "escape.*weight_map gives tensor 'model.norm.weight' the shard .*not a file name in the folder" "$log"
expect_match "shapes that disagree with config.json" "shape.*tensor 'model.layers.0.mlp.gate_proj.weight' has shape \[160, 64\] where config.json gives \[96, 64\]" "$log"
expect_match "heads that do not divide" "heads.*config.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3" "$log"
expect_match "an unknown rope scaling type" "rope.*config.json: rope scaling type 'longrope2' is not one loom-serve runs" "$log"
expect_match "an unknown architecture, the supported ones listed" "arch.*config.json: architecture GemmaForCausalLM is not one loom-serve runs \(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GPT2LMHeadModel\)" "$log"
expect_match "an unknown tokenizer component" "component.*tokenizer.json: normalizer: the normalizer NFKD is not one loom-serve implements" "$log"
expect_match "merges naming tokens not in the vocabulary" "merges.*tokenizer.json: merge 3 names 'zz-not-a-token', which is not in the vocabulary" "$log"
expect_match "a pattern PCRE2 rejects" "regex.*tokenizer.json: pre_tokenizer Sequence Split: PCRE2 rejects the pattern" "$log"
expect_match "the pattern that backtracks loads" "loaded model backtrack version 1" "$log"
expect_http "a pattern that backtracks without end fails its request" 400 "split pattern failed on the text: match limit exceeded" -X POST "http://$http/tokenize" -H 'Content-Type: application/json' \
  -d "{\"model\":\"backtrack\",\"prompt\":\"$(printf 'a%.0s' $(seq 1 60))b\"}"
kill $pid; wait $pid 2>/dev/null

# ---- the good server again: a 10 MB prompt is refused, the models still answer
serve_start serve2 --model-repository repo --grpc-port -1
head -c 10000000 /dev/zero | tr '\0' 'a' >big.txt
python3 -c 'import json,sys; print(json.dumps({"model":"qwen2","prompt":open("big.txt").read(),"max_tokens":1}))' >big.json
code=$(curl -s -o big.out -w '%{http_code}' "http://$http/v1/completions" -H 'Content-Type: application/json' --data-binary @big.json)
[ "${code:0:1}" = 4 ] && pass || fail "a 10 MB prompt answered $code: $(head -c 200 big.out)"
run_cmd python3 "$CLIENT" greedy "http://$http" qwen2 8 '[[1,2,3]]' "$("$HP" "$REF" greedy repo/qwen2/1 8 '[[1,2,3]]' 2>/dev/null)"
[ "$rc" = 0 ] && pass || fail "after a 10 MB prompt, qwen2 no longer answers as before: $out"
kill $pid; wait $pid 2>/dev/null
finish
