#!/usr/bin/env bash
# hf_compress_figures.sh — loom-compress on Hugging Face folders, in one run, each figure beside its peer:
#   1. a small Llama-3-shaped model trained here (tests/bench/hf_train_small.py: 4 layers, 256
#      wide, GQA 8/2, a 2,048-token BPE, PyTorch's AdamW on the first 90% of dpkg's changelog),
#      saved in bf16: held-out perplexity of loom-compress eval against transformers' on the same
#      windows, then quantize to int8: perplexity and greedy agreement against the bf16 folder;
#   2. a larger bf16 folder (8 layers, 1,536 wide, 32,000 tokens; random weights) and its int8
#      folder served by loom-serve: output tokens/s at 1 and 8 clients and resident memory, int8
#      against bf16 on the same engine.
# LOOM_PYTHON: an interpreter with PyTorch 2, transformers and tokenizers (PyPI's); without it,
# nothing is run. STEPS: training steps (1000).
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${LOOM_PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-2}
STEPS=${STEPS:-1000}
"$PY" -c 'import torch, transformers, tokenizers, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null ||
  { echo "hf_compress_figures: $PY lacks PyTorch 2, transformers and tokenizers (LOOM_PYTHON names one); skipped"; exit 0; }
[ -f /usr/share/doc/dpkg/changelog.gz ] || { echo "hf_compress_figures: /usr/share/doc/dpkg/changelog.gz absent (docs excluded); skipped"; exit 0; }
usage=$("$B/loom-bench" generate 2>&1 || true)
[ -x "$B/loom-serve" ] && [ -x "$B/loom-compress" ] && [[ $usage == *--url* ]] || { echo "hf_compress_figures: loom-serve, loom-compress or loom-bench not built; skipped"; exit 0; }
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
quiet() { grep -v -i -e "warn" -e "Writing model" -e "it/s\]" || true; }
field() { "$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
ratio() { "$PY" -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }

# 1. The trained model: perplexity against transformers', then int8.
zcat /usr/share/doc/dpkg/changelog.gz >"$T/corpus.txt"
info=$(env -u OPENBLAS_CORETYPE "$PY" "$S/tests/bench/hf_train_small.py" train "$T/corpus.txt" "$T/small" "$T/held.bin" "$STEPS" "$THREADS" 2> >(quiet >&2) | tail -1)
echo "hf_compress_figures: trained $(field "$info" params) params for $STEPS steps of 16 x 128 tokens on $(field "$info" train_tokens) tokens; $(field "$info" held_tokens) held out; $THREADS threads"
peer=$("$PY" "$S/tests/bench/hf_train_small.py" perplexity "$T/small" "$T/held.bin" 256 "$THREADS" 2>/dev/null | tail -1)
loom=$("$B/loom-compress" eval "$T/small" --data "tokens:$T/held.bin" --format json)
echo "hf_compress_figures: bf16 folder, held-out perplexity: loom-compress eval $(printf %.4f "$(field "$loom" perplexity)"), transformers $(printf %.4f "$(field "$peer" perplexity)") on the same $(field "$peer" tokens) positions: $(ratio "$(field "$loom" perplexity)" "$(field "$peer" perplexity)")x"
"$B/loom-compress" quantize "$T/small" -o "$T/small8" --calibration "tokens:$T/held.bin" | sed 's/^/hf_compress_figures:   /'

# 2. A larger folder served in bf16 and int8.
mkdir -p "$T/big/llama/1" "$T/big8/llama/1"
"$PY" "$S/tests/serve/hf_ref.py" tokenizer "$T/big/llama/1" llama3 2>&1 | quiet
"$PY" "$S/tests/serve/hf_ref.py" model "$T/big/llama/1" llama --dtype bfloat16 --size large 2>&1 | quiet
rmdir "$T/big8/llama/1" && "$B/loom-compress" quantize "$T/big/llama/1" -o "$T/big8/llama/1" >/dev/null
chmod -R go-w "$T/big" "$T/big8"
vocab=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$T/big/llama/1/config.json")
for kind in big big8; do
  "$B/loom-serve" --model-repository "$T/$kind" --http-port 0 --grpc-port -1 --threads "$THREADS" --request-timeout-ms 900000 2>"$T/$kind.log" &
  spid=$!
  n=0
  until grep -q "listening:" "$T/$kind.log" 2>/dev/null || [ $n -gt 600 ]; do sleep 0.1; n=$((n + 1)); done
  url=$(grep -oE "http [0-9.]+:[0-9]+" "$T/$kind.log" | cut -d' ' -f2)
  for c in 1 8; do
    r=$("$B/loom-bench" generate --url "$url" --model llama --vocab "$vocab" --concurrency $c --requests $((c * 3)) --prompt-len 32 --output-len 64 --format json)
    eval "tps_${kind}_$c=$(field "$r" output_tokens_per_s)"
  done
  eval "rss_$kind=$(( $(awk '/VmRSS/ {print $2}' "/proc/$spid/status") * 1024 ))"
  eval "bytes_$kind=$(cat "$T/$kind"/llama/1/*.safetensors | wc -c)"
  kill $spid; wait $spid 2>/dev/null || true
done
echo "hf_compress_figures: 8 layers, 1536 wide, 32000 tokens, 32-token prompts, 64 new: int8 $(printf %.1f "$tps_big8_1") tokens/s at 1 client, $(printf %.1f "$tps_big8_8") at 8; bf16 $(printf %.1f "$tps_big_1"), $(printf %.1f "$tps_big_8"): $(ratio "$tps_big8_1" "$tps_big_1")x, $(ratio "$tps_big8_8" "$tps_big_8")x"
echo "hf_compress_figures: safetensors int8 $(( bytes_big8 >> 20 )) MiB against bf16 $(( bytes_big >> 20 )) MiB ($(ratio "$bytes_big8" "$bytes_big")x); loom-serve resident after the runs: int8 $(( rss_big8 >> 20 )) MiB, bf16 $(( rss_big >> 20 )) MiB ($(ratio "$rss_big8" "$rss_big")x)"
