#!/usr/bin/env bash
# run.sh — runs the libFuzzer targets: the three topology readers (seeded with the topology
# fixtures), loom-serve's HTTP/KServe request decoding (seeded with real requests) and the
# model-file loaders (inputs that drive what an HDF5 file holds), the safetensors reader and GPT-2
# loader with a model folder's tokenizer files and config.json (the inputs are the files), chat
# templates (read and rendered), what a resume checks of a checkpoint's state, and the ONNX loader and
# executor (inputs that build small graphs and the tensors they run on), and the spec readers,
# config.pbtxt and a pipeline hop's answer (seeded with the examples and issue 33's attacks). By default a fixed
# seed and a fixed number of inputs, so that `make check` is reproducible: what fails in CI fails
# here with the same inputs. LOOM_FUZZ_SECONDS=N explores instead: a random seed for N seconds
# per target (`make fuzz`). Any crash, abort or timeout in Loom's code fails the test.
. "$(dirname "$0")/../integration/lib.sh"
B=$LOOM_BUILDDIR/tests/fuzz
[ -x "$B/fuzz_nvsmi" ] || skip "fuzz targets not built (configure --enable-fuzzing)"
targets="nvsmi topo_json hwloc_xml"
[ -x "$B/fuzz_http" ] && targets="$targets http model_file"
[ -x "$B/fuzz_spec" ] && targets="$targets spec"
[ -x "$B/fuzz_safetensors" ] && targets="$targets safetensors"
[ -x "$B/fuzz_onnx" ] && targets="$targets onnx"
[ -x "$B/fuzz_chat_template" ] && targets="$targets chat_template ckpt_state"
# The spec target's seeds: its selector byte, then the examples as shipped, the attacks of issue
# 33 (a sweep range no int holds, a pipeline step answering 3 bytes for FP32 [2,4], shapes [-7,4]
# and [2^31,2^31], a datatype other than the metadata's) and a Triton config.pbtxt.
spec_seeds() {
  local c=$1 ex=$LOOM_SRCDIR/examples
  { printf '\0'; cat "$ex/inferenceservice.yaml"; } >"$c/isvc"
  { printf '\0'; cat "$ex/bert-serving.yaml"; } >"$c/isvc-bert"
  { printf '\1'; cat "$ex/multimodal/pipeline.yaml"; } >"$c/pipeline"
  { printf '\2'; cat "$ex/sweep.yaml"; } >"$c/sweep"
  { printf '\2'; sed 's/^\(  *\)min: .*/\1min: 1e19/' "$ex/sweep.yaml"; } >"$c/sweep-int-range"
  printf '\3name: "bert"\nmax_batch_size: 8\ninput [ { name: "x" dims: [ -1 ] } ]\ndynamic_batching { }\n' >"$c/pbtxt"
  # 4: want FP32 [2,4]; got FP32 [2,4] with 3 bytes / INT64 / [-7,4] / [2^31,2^31]
  local d2='\0\0\0\0\0\0\0\12\0' d4='\0\0\0\0\0\0\0\14\0' big='\0\0\0\0\200\0\0\0\1'
  printf "\\4\\0\\2$d2$d4\\0\\2$d2${d4}abc" >"$c/hop-short"
  printf "\\4\\0\\2$d2$d4\\1\\2$d2$d4" >"$c/hop-type"
  printf "\\4\\0\\2$d2$d4\\0\\2\\0\\0\\0\\0\\0\\0\\0\\1\\0$d4" >"$c/hop-negative"
  printf "\\4\\0\\2$d2$d4\\0\\2$big$big" >"$c/hop-huge"
}
# The safetensors target's seeds: a selector byte (0: the file alone; 1: loaded as GPT-2 with a 1-layer config),
# then a file with one F32 tensor, and a GPT-2 file of that config written the same way.
safetensors_seeds() {
  /usr/bin/python3 - "$1" <<'PY'
import json, struct, sys
def st(tensors):
    header, data = {}, b""
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * n]}
        data += struct.pack("<%df" % n, *([0.01] * n))
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data
C, V, T = 4, 5, 8
gpt2 = [("wte.weight", [V, C]), ("wpe.weight", [T, C]), ("ln_f.weight", [C]), ("ln_f.bias", [C])]
for k, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
             ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]), ("ln_2.weight", [C]), ("ln_2.bias", [C]),
             ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
    gpt2.append(("h.0." + k, s))
open(sys.argv[1] + "/one", "wb").write(b"\0" + st([("x", [2, 3])]))
open(sys.argv[1] + "/gpt2", "wb").write(b"\1" + st(gpt2))
PY
}
# The chat template target's seeds: ChatML as Qwen writes it, and one with what the hostile ones
# used (namespaces, tojson(indent), a recursive macro, slices, integer division).
chat_template_seeds() {
  printf '%s' "{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}" >"$1/chatml"
  printf '%s' "{% set ns = namespace(s='') %}{% for t in tools %}{% set ns.s = ns.s ~ (t | tojson(indent=4)) %}{% endfor %}\
{{ bos_token }}{{ ns.s }}{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}\
{{ messages[1:][::-1] | map(attribute='role') | join(',') }}{{ (7 // 2) ~ (-7 % 3) }}" >"$1/hostile"
}
# More of the safetensors target's seeds: a selector byte (2: the tokenizer's files, NUL between
# them; 3: config.json), then GPT-2's byte-level vocabulary with a merge and special tokens, and a config.
model_folder_seeds() {
  /usr/bin/python3 "$LOOM_SRCDIR/tests/serve/gpt2_ref.py" vocab "$1/vocab.json" || return
  /usr/bin/python3 - "$1" <<'PY'
import json, os, sys
vocab = json.load(open(sys.argv[1] + "/vocab.json"))
os.unlink(sys.argv[1] + "/vocab.json")
vocab["<|endoftext|>"] = 257
tj = {"added_tokens": [{"id": 257, "content": "<|endoftext|>"}, {"id": 258, "content": "<|im_start|>"}]}
cfg = {"added_tokens_decoder": {"258": {"content": "<|im_start|>"}}, "eos_token": "<|endoftext|>"}
parts = [json.dumps(vocab), "#version: 0.2\na b\n", json.dumps(tj), json.dumps(cfg)]
open(sys.argv[1] + "/tokenizer", "wb").write(b"\2" + "\0".join(parts).encode())
conf = {"n_layer": 1, "n_head": 2, "n_embd": 4, "n_positions": 8, "vocab_size": 5, "eos_token_id": 4,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
open(sys.argv[1] + "/config", "wb").write(b"\3" + json.dumps(conf).encode())
PY
}
for target in $targets; do
  corpus=$LOOM_TMP/corpus-$target
  mkdir -p "$corpus"
  case $target in
    nvsmi) cp "$LOOM_FIXTURES"/*.nvsmi.txt "$corpus/" ;;
    topo_json) cp "$LOOM_FIXTURES"/golden/*.export "$corpus/" ;;
    hwloc_xml) cp "$LOOM_FIXTURES"/local-*.xml "$LOOM_FIXTURES"/cpu-only.xml "$LOOM_FIXTURES"/crashers/*.xml "$LOOM_FIXTURES"/fuzz-regressions/*.xml "$corpus/" ;;
    http) cp "$LOOM_SRCDIR"/tests/fixtures/http/* "$corpus/" ;;
    model_file) cp "$LOOM_SRCDIR"/tests/fixtures/model-file/* "$corpus/" ;;
    onnx) ;;  # the inputs build the graphs: libFuzzer grows its own corpus
    spec) spec_seeds "$corpus" ;;
    safetensors) safetensors_seeds "$corpus" && model_folder_seeds "$corpus" ;;
    chat_template) chat_template_seeds "$corpus" ;;
    ckpt_state) ;;  # the inputs build the state: libFuzzer grows its own corpus
  esac
  # Runs per target in make check, the same inputs every time (a fixed seed): about 5-15 s each
  # here (the model files go through HDF5 on /dev/shm, about 250 a second); `make fuzz` explores
  # for longer.
  case $target in
    nvsmi) runs=15000 ;;
    topo_json) runs=30000 ;;
    hwloc_xml) runs=300 ;;
    http) runs=50000 ;;
    model_file) runs=3000 ;;
    onnx) runs=40000 ;;
    spec) runs=20000 ;;
    safetensors) runs=80000 ;;  # a quarter each: files, GPT-2 loads, the tokenizer's files, config.json
    chat_template) runs=20000 ;;
    ckpt_state) runs=20000 ;;
  esac
  # LOOM_FUZZ_SMOKE=1: at most 1000 inputs a target, to see that they build and run.
  [ "${LOOM_FUZZ_SMOKE:-0}" = 1 ] && runs=$((runs < 1000 ? runs : 1000))
  # hwloc keeps process-wide state for its XML backends; leaks inside it are not ours to fix.
  # The XML target forks a child per input (see hwloc_reader.cpp), so crashes inside hwloc
  # itself are caught there and must not fail the run; crashes in Loom's code still do.
  if [ -n "${LOOM_FUZZ_SECONDS:-}" ]; then
    budget="-max_total_time=$LOOM_FUZZ_SECONDS"
  else  # about 15 s each here; the time cap only guards a much slower machine
    budget="-seed=20261129 -max_total_time=120 -runs=$runs"
  fi
  # A memory limit per input: a request or file that makes the code allocate far beyond its own
  # size fails the run (-malloc_limit_mb: one allocation; -rss_limit_mb: the process).
  limits="-rss_limit_mb=2048"
  case $target in http | model_file | onnx | spec | safetensors | chat_template | ckpt_state)
    limits="-rss_limit_mb=1024 -malloc_limit_mb=256" ;;
  esac
  # A graph run is bounded by its 64 MiB budget, whatever the request's shapes say.
  [ "$target" = onnx ] && limits="$limits -max_len=512"
  ASAN_OPTIONS=detect_leaks=0 "$B/fuzz_$target" $budget -timeout=30 $limits \
    -artifact_prefix="$LOOM_TMP/" "$corpus" >"$LOOM_TMP/$target.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    pass
    echo "fuzz_$target: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second.*' "$LOOM_TMP/$target.log" | head -1)"
  else
    fail "fuzz_$target exited $rc"
    tail -n 40 "$LOOM_TMP/$target.log" >&2
    ls "$LOOM_TMP"/crash-* "$LOOM_TMP"/timeout-* 2>/dev/null | while read -r f; do echo "input: $f"; head -c 400 "$f" | od -c | head; done >&2
  fi
done
finish
