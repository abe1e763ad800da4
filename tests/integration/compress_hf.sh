#!/usr/bin/env bash
# compress_hf.sh — loom-compress on Hugging Face folders (Llama in bf16 and sharded, Qwen2 in fp16
# with biases and tied embeddings; random weights, written as transformers writes them):
# quantize writes a compressed-tensors int8 folder (I8 weights per output channel with their
# weight_scale, the rest as stored, the tokenizer copied) whose weights are the source's as
# compressed-tensors quantizes them; eval scores both folders on llm.c token files and quantize
# reports the perplexity and the greedy agreement; loom-serve serves the int8 folders token for
# token equal to a reference of the same arithmetic (Debian's PyTorch, tests/serve/hf_ref.py);
# transformers with compressed-tensors reads the folder where LOOM_TORCH_PYTHON has them. Every
# bad input gives one clear error and writes nothing; bad int8 folders are refused at load naming
# the file and the field while the server serves the good ones.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
B=$LOOM_BUILDDIR
[ -x "$B/loom-compress" ] && [ -x "$B/loom-serve" ] || skip "loom-compress and loom-serve not built"
/usr/bin/python3 -c 'import torch, numpy' 2>/dev/null || skip "python3-torch is needed"
REF=$LOOM_SRCDIR/tests/serve/hf_ref.py
CLIENT=$LOOM_SRCDIR/tests/serve/llm_client.py
hf=$(LOOM_PEER_SYSTEM_SITE=1 "$LOOM_SRCDIR/contrib/peer-venv.sh" hf transformers tokenizers jinja2 "numpy<2" 2>"$LOOM_TMP/peer.err") ||
  skip "transformers and tokenizers from PyPI: $(cat "$LOOM_TMP/peer.err")"
HP=${LOOM_TORCH_PYTHON:-/usr/bin/python3}  # a Python with PyTorch 2 and transformers writes the folders with save_pretrained
cd "$LOOM_TMP" || exit 99
quiet() { grep -v -i -e "pytorch" -e "warn" -e "^ *$" -e "Writing model" || true; }
json() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }

folder() {  # NAME ARCH TOKENIZER DTYPE SHARD
  mkdir -p $1
  "$hf/bin/python" "$REF" tokenizer $1 "$3" 2>&1 | quiet
  local shard=()
  [ "$5" != - ] && shard=(--shard "$5")
  "$HP" "$REF" model $1 "$2" --dtype "$4" "${shard[@]}" --seed 4 2>&1 | quiet
  [ -f $1/config.json ] || { echo "writing $1 failed"; exit 99; }
}
folder llama llama llama3 bfloat16 20000
folder qwen2 qwen2 qwen float16 -
# Held-out tokens as llm.c writes them (magic 20240520, version 1, uint16 ids).
/usr/bin/python3 - llama/config.json qwen2/config.json <<'PY'
import json, sys, numpy as np
v = min(json.load(open(f))["vocab_size"] for f in sys.argv[1:])
t = np.random.default_rng(7).integers(0, v, 1800).astype(np.uint16)
h = np.zeros(256, np.int32); h[:3] = 20240520, 1, len(t)
open("held.bin", "wb").write(h.tobytes() + t.tobytes())
PY

# ---- quantize: the folder, its report, its format
run_cmd "$B/loom-compress" quantize llama -o llama8 --calibration tokens:held.bin
expect_eq "quantize a bf16 sharded Llama folder" 0 "$rc"
echo "$out"
expect_match "before and after side by side" "precision +bf16 +int8" "$out"
expect_match "the greedy agreement reported" "agreement +[01]\.[0-9]+ +greedy: the same next token at [0-9]+ of 1792 positions" "$out"
run_cmd "$B/loom-compress" quantize qwen2 -o qwen8
expect_eq "quantize an fp16 Qwen2 folder (biases, tied embeddings)" 0 "$rc"
for f in tokenizer.json tokenizer_config.json generation_config.json chat_template.jinja; do
  cmp -s llama/$f llama8/$f && pass || fail "llama8/$f is not the source's"
done
[ ! -e llama8/model.safetensors.index.json ] && [ -f llama8/model.safetensors ] && pass || fail "llama8 should hold one model.safetensors"
run_cmd /usr/bin/python3 - llama llama8 "$LOOM_SRCDIR/tests/serve" <<'PY'
# compressed-tensors' int8: q = clamp(round(w / s), -128, 127), s = max|w[row]| / 127.5, stored
# I8 with weight_scale [rows, 1]; the embeddings and lm_head as stored; the scheme in config.json.
import json, struct, sys, torch
sys.path.insert(0, sys.argv[3])
import hf_ref
src, q = hf_ref.read_folder(sys.argv[1]), hf_ref.read_folder(sys.argv[2])
raw = open(sys.argv[2] + "/model.safetensors", "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
cfg = json.load(open(sys.argv[2] + "/config.json"))["quantization_config"]
g = cfg["config_groups"]["group_0"]
assert cfg["quant_method"] == "compressed-tensors" and cfg["format"] == "int-quantized", cfg
assert g["weights"]["strategy"] == "channel" and g["input_activations"]["strategy"] == "token" and g["input_activations"]["dynamic"], g
n = 0
for name, e in head.items():
    if name.endswith("_proj.weight"):
        rows = e["shape"][0]
        assert e["dtype"] == "I8" and head[name + "_scale"] == {**head[name + "_scale"], "dtype": "F32", "shape": [rows, 1]}, name
        w, s = src[name], q[name + "_scale"]
        assert torch.allclose(s[:, 0], w.abs().amax(1) / 127.5, rtol=1e-6), name
        assert torch.equal(q[name], torch.clamp(torch.round(w * (1.0 / s)), -128, 127)), name
        n += 1
    elif name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert e["dtype"] == "BF16" and torch.equal(q[name], src[name]), name
print(n, "int8 weights as compressed-tensors quantizes them")
PY
expect_eq "the int8 weights, their scales and the scheme" 0 "$rc"
echo "$out$err" | tail -n 2

# ---- eval: both folders on the same tokens
run_cmd "$B/loom-compress" eval llama --data tokens:held.bin --format json
ev16=$out
run_cmd "$B/loom-compress" eval llama8 --data tokens:held.bin --format json
ev8=$out
expect_eq "eval's precision" "bf16 int8" "$(echo "$ev16" | json '["precision"]') $(echo "$ev8" | json '["precision"]')"
expect_eq "eval's type" "LlamaForCausalLM" "$(echo "$ev8" | json '["type"]')"
expect_eq "int8's perplexity within 1% of bf16's" True "$(/usr/bin/python3 -c "import json; a, b = json.loads('$ev16'), json.loads('$ev8'); print(abs(b['perplexity'] / a['perplexity'] - 1) < 0.01 and b['file_bytes'] < a['file_bytes'] and a['tokens'] == 1792)")"
run_cmd "$B/loom-compress" eval qwen8 --data tokens:held.bin --max-tokens 600
expect_match "eval's text form" "qwen8: Qwen2ForCausalLM \(layers 2, heads 4 \(2 key/value\), embd 64, window 256, vocab [0-9]+\), int8, [0-9]+ params, [0-9]+ bytes; on 512 tokens" "$out"

# ---- transformers with compressed-tensors reads the folder (where LOOM_TORCH_PYTHON has them)
if "$HP" -c 'import compressed_tensors, transformers, torch; assert int(torch.__version__[0]) >= 2' 2>/dev/null; then
  run_cmd "$HP" - llama8 llama <<'PY'
import sys, torch
from transformers import AutoModelForCausalLM
m8, m = (AutoModelForCausalLM.from_pretrained(f, dtype=torch.float32).eval() for f in sys.argv[1:3])
ids = torch.arange(1, 40)[None]
with torch.no_grad():
    a, b = m8(ids).logits, m(ids).logits
agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
print("transformers: int8 against bf16 logits within %.3f, argmax agreement %.3f" % ((a - b).abs().max().item(), agree))
assert agree > 0.8
PY
  expect_eq "transformers with compressed-tensors runs the int8 folder" 0 "$rc"
  echo "$out"
else
  echo "SKIP (part): transformers with compressed-tensors: LOOM_TORCH_PYTHON names no Python with them"
fi

# ---- bad input: one clear error, nothing written
refused_folder() {  # WHAT RC REGEX OUT ARGS...: OUT is not written
  local what=$1 want=$2 re=$3 o=$4
  shift 4
  run_cmd "$@"
  expect_eq "$what: exit status" "$want" "$rc"
  expect_match "$what: message" "$re" "$err"
  [ ! -e "$o" ] && [ ! -e "$o.part" ] && pass || fail "$what: $o was written"
}
refused_folder "quantize an int8 folder" 1 "llama8/config.json: has a quantization_config already" again "$B/loom-compress" quantize llama8 -o again
mkdir -p gpt2 && /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/gpt2_ref.py" write gpt2 --seed 5 --vocab 300 --positions 64 || exit 99
refused_folder "quantize a GPT-2 folder" 1 "gpt2: quantize takes the Llama family's folders, not GPT2LMHeadModel's" g8 "$B/loom-compress" quantize gpt2 -o g8
refused_folder "--weights-only for a folder" 2 "weights-only, --observer, --calib-samples and --weight-scales are for the MLP" w8 \
  "$B/loom-compress" quantize llama -o w8 --weights-only
refused_folder "text to score a folder" 2 "calibration for a Hugging Face folder is tokens:PATTERN" t8 "$B/loom-compress" quantize llama -o t8 --calibration text:held.bin
before=$(ls -l --time-style=+%s.%N qwen8)
run_cmd "$B/loom-compress" quantize llama -o qwen8
expect_eq "quantize onto a folder that exists: exit status" 1 "$rc"
expect_match "quantize onto a folder that exists: message" "qwen8: exists; quantize writes a new folder \(nothing written\)" "$err"
expect_eq "the folder that exists is untouched" "$before" "$(ls -l --time-style=+%s.%N qwen8)"
run_cmd "$B/loom-compress" eval llama --data text:held.bin
expect_match "eval a folder on text" "scored on token files" "$err"

# ---- served: token for token the reference's int8 arithmetic; bad folders refused at load
for m in llama llama8 qwen8 gptq weightonly static noscale noscheme; do mkdir -p repo/$m/1; done
cp llama/* repo/llama/1/ && cp llama8/* repo/llama8/1/ && cp qwen8/* repo/qwen8/1/
for m in gptq weightonly static noscale noscheme; do cp llama8/* repo/$m/1/; done
json_edit repo/gptq/1/config.json 'j["quantization_config"]["quant_method"] = "gptq"'
json_edit repo/weightonly/1/config.json 'j["quantization_config"]["config_groups"]["group_0"]["input_activations"] = None'
json_edit repo/static/1/config.json 'j["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"] = False'
json_edit repo/noscheme/1/config.json 'del j["quantization_config"]'
# The header's name changed in place (same length): the tensor's scale is missing.
sed -i 's/layers.1.mlp.up_proj.weight_scale/layers.1.mlp.up_proj.weight_scalf/' repo/noscale/1/model.safetensors
chmod -R go-w repo
serve_start serve --model-repository repo --grpc-port -1
log=$(cat serve.log)
expect_match "the int8 folder loads as int8" "loaded model llama8 version 1 .*llama, context 256, generate.*int8, CPU" "$log"
expect_match "another method refused" "gptq.*config.json: quantization_config.quant_method is 'gptq': loom-serve runs compressed-tensors int8" "$log"
expect_match "int8 weights with 16-bit activations refused" "weightonly.*config_groups.group_0.input_activations is null" "$log"
expect_match "static activation scales refused" "static.*config_groups.group_0.input_activations.dynamic is false" "$log"
expect_match "a missing weight_scale refused" "noscale.*model.safetensors: int8 tensor 'model.layers.1.mlp.up_proj.weight' has no 'model.layers.1.mlp.up_proj.weight_scale'" "$log"
expect_match "int8 tensors without the scheme refused" "noscheme.*tensor 'model.layers.0.self_attn.q_proj.weight' is I8, but config.json has no quantization_config" "$log"
prompts='[[1,2,3,4,5],[7,8],[9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30],[100],[250,251,252,253,254,255]]'
for m in llama8 qwen8; do
  want=$(/usr/bin/python3 "$REF" own-greedy repo/$m/1 24 "$prompts" 2>/dev/null)
  run_cmd python3 "$CLIENT" greedy "http://$http" $m 24 "$prompts" "$want"
  [ "$rc" = 0 ] && pass || fail "$m: completions differ from the int8 reference: $out"
  run_cmd python3 "$CLIENT" greedy "http://$http" $m 24 "$prompts" "$want" --stream
  [ "$rc" = 0 ] && pass || fail "$m: streamed completions differ from the int8 reference: $out"
done
want=$(/usr/bin/python3 "$REF" own-greedy repo/llama/1 8 '[[1,2,3]]' 2>/dev/null)
run_cmd python3 "$CLIENT" greedy "http://$http" llama 8 '[[1,2,3]]' "$want"
[ "$rc" = 0 ] && pass || fail "beside the int8 folders, the bf16 one no longer answers as its reference: $out"
kill $pid; wait $pid 2>/dev/null
finish
