#!/usr/bin/env bash
# hf_figures.sh — loom-serve on Hugging Face folders, in one run, each figure beside its peer:
#   1. a Llama-3-shaped model (grouped-query attention, 4 query heads per KV head; 4 layers,
#      512 wide, bf16 safetensors written by transformers' save_pretrained) at 1 client: output
#      tokens/s of greedy completions against transformers' generate() on the same folder and
#      threads (float32, KV cache), and whether the tokens agree;
#   2. 32 clients against the same server with --max-num-seqs 1 (the sequential server), on that
#      model and on a 4-layer, 256-wide GPT-2 folder;
#   3. resident memory of a bf16 folder (8 layers, 1,536 wide, 32,000 tokens) once loaded, against
#      its safetensors bytes (the KV pool is committed as sequences use it, so none is resident).
# LOOM_PYTHON: an interpreter with PyTorch 2 and transformers (PyPI's); without it, nothing is run.
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${LOOM_PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-2}
REF=$S/tests/serve/hf_ref.py
"$PY" -c 'import torch, transformers, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null ||
  { echo "hf_figures: $PY lacks PyTorch 2 and transformers (LOOM_PYTHON names one); skipped"; exit 0; }
usage=$("$B/loom-bench" generate 2>&1 || true)
[ -x "$B/loom-serve" ] && [[ $usage == *--url* ]] || { echo "hf_figures: loom-serve or loom-bench generate not built; skipped"; exit 0; }
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
quiet() { grep -v -i -e "warn" -e "Writing model" || true; }
mkdir -p "$T/repo/llama/1" "$T/repo/gpt2/1" "$T/big/llama/1" "$T/tiny/llama/1"
"$PY" "$REF" tokenizer "$T/repo/llama/1" llama3 2>&1 | quiet
"$PY" "$REF" model "$T/repo/llama/1" llama --dtype bfloat16 --size bench 2>&1 | quiet
/usr/bin/python3 "$S/tests/serve/gpt2_ref.py" write "$T/repo/gpt2/1" --seed 5 --layers 4 --heads 4 --embd 256 --positions 1024 --vocab 50257
"$PY" "$REF" tokenizer "$T/big/llama/1" llama3 2>&1 | quiet
"$PY" "$REF" model "$T/big/llama/1" llama --dtype bfloat16 --size large 2>&1 | quiet
"$PY" "$REF" tokenizer "$T/tiny/llama/1" llama3 2>&1 | quiet
"$PY" "$REF" model "$T/tiny/llama/1" llama --dtype bfloat16 2>&1 | quiet
chmod -R go-w "$T/repo" "$T/big" "$T/tiny"
start() {  # NAME REPO ARGS...: sets url, spid
  "$B/loom-serve" --model-repository "$2" --http-port 0 --grpc-port -1 --threads "$THREADS" --request-timeout-ms 900000 "${@:3}" 2>"$T/$1.log" &
  spid=$!
  local n=0
  until grep -q "listening:" "$T/$1.log" 2>/dev/null || [ $n -gt 600 ]; do sleep 0.1; n=$((n + 1)); done
  url=$(grep -oE "http [0-9.]+:[0-9]+" "$T/$1.log" | cut -d' ' -f2)
}
stop() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }
field() { "$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
ratio() { "$PY" -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
vocab=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$T/repo/llama/1/config.json")
gen() {  # URL MODEL VOCAB CONCURRENCY REQUESTS: the JSON line
  "$B/loom-bench" generate --url "$1" --model "$2" --vocab "$3" --concurrency "$4" --requests "$5" --prompt-len 32 --output-len 64 --format json
}
echo "hf_figures: $THREADS threads, $(grep -q avx512_bf16 /proc/cpuinfo && echo "AVX-512 with BF16" || echo AVX2); PyTorch $("$PY" -c 'import torch; print(torch.__version__)'), transformers $("$PY" -c 'import transformers; print(transformers.__version__)')"

# 1. One client against transformers' generate() on the same folder.
prompts=$("$PY" -c 'import json, random, sys; r = random.Random(3); print(json.dumps([[r.randrange(int(sys.argv[1])) for _ in range(32)] for _ in range(6)]))' "$vocab")
peer=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" "$S/tests/bench/llm_peer.py" "$T/repo/llama/1" "$prompts" 64 "$THREADS" 2>/dev/null | tail -1)
start batch "$T/repo" --max-num-seqs 64
same=0
t0=$(date +%s.%N)
for k in $(seq 0 5); do
  p=$("$PY" -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])[int(sys.argv[2])]))' "$prompts" "$k")
  ids=$(curl -s "http://$url/v1/completions" -d "{\"model\":\"llama\",\"prompt\":$p,\"max_tokens\":64,\"temperature\":0,\"ignore_eos\":true}" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["token_ids"])')
  want=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["outputs"][int(sys.argv[2])])' "$peer" "$k")
  [ "$ids" = "$want" ] && same=$((same + 1))
done
t1=$(date +%s.%N)
loom1=$("$PY" -c "print(6 * 64 / ($t1 - $t0))")
echo "hf_figures: Llama-3-shaped (4 layers, 512 wide, GQA 8/2, bf16), 1 client, 6 prompts of 32 tokens, 64 new each: loom-serve $(printf %.1f "$loom1") tokens/s (curl, one at a time); $(field "$peer" peer) $(printf %.1f "$(field "$peer" tokens_per_s)"): $(ratio "$loom1" "$(field "$peer" tokens_per_s)")x (target >= 1.0); greedy tokens equal in $same of 6"

# 2. 32 clients against the sequential server.
llama32=$(gen "$url" llama "$vocab" 32 64)
gpt32=$(gen "$url" gpt2 50257 32 64)
stop
start seq "$T/repo" --max-num-seqs 1
llama_seq=$(gen "$url" llama "$vocab" 32 32)
gpt_seq=$(gen "$url" gpt2 50257 32 32)
stop
for m in llama gpt2; do
  if [ $m = llama ]; then a=$llama32 b=$llama_seq what="Llama-3-shaped (above)"; else a=$gpt32 b=$gpt_seq what="GPT-2, 4 layers, 256 wide"; fi
  printf 'hf_figures: %s, 32 clients: %7.1f output tokens/s (ITL p50 %s ms); --max-num-seqs 1: %7.1f: %sx (target >= 5)\n' "$what" \
    "$(field "$a" output_tokens_per_s)" "$(field "$a" itl_p50_ms)" "$(field "$b" output_tokens_per_s)" "$(ratio "$(field "$a" output_tokens_per_s)" "$(field "$b" output_tokens_per_s)")"
done

# 3. Resident memory of a bf16 folder once loaded.
start big "$T/big"
sleep 1
rss=$(( $(awk '/VmRSS/ {print $2}' "/proc/$spid/status") * 1024 ))
bytes=$(cat "$T"/big/llama/1/*.safetensors | wc -c)
curl -s "http://$url/v1/completions" -d '{"model":"llama","prompt":[1,2,3],"max_tokens":4,"temperature":0}' >/dev/null
rss2=$(( $(awk '/VmRSS/ {print $2}' "/proc/$spid/status") * 1024 ))
stop
start tiny "$T/tiny"  # the same server with a model of 1 MB: what the process holds without one
sleep 1
curl -s "http://$url/v1/completions" -d '{"model":"llama","prompt":[1,2,3],"max_tokens":4,"temperature":0}' >/dev/null
base=$(( $(awk '/VmRSS/ {print $2}' "/proc/$spid/status") * 1024 ))
stop
echo "hf_figures: bf16 folder of $(( bytes >> 20 )) MiB safetensors (8 layers, 1536 wide, 32000 tokens): loom-serve resident $(( rss >> 20 )) MiB loaded, $(( rss2 >> 20 )) MiB after a completion: $(ratio "$rss2" "$bytes")x its bytes (target <= 1.2 plus the KV pool in use); the same server with a 1 MB model: $(( base >> 20 )) MiB, so the model's own share $(ratio $(( rss2 - base )) "$bytes")x"
