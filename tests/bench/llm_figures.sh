#!/usr/bin/env bash
# llm_figures.sh — loom-serve's decoder engine on a GPT-2-small-shaped model (12 layers, 768 wide,
# 12 heads, 1,024 positions, 50,257 tokens; random weights written by PyTorch as
# config.json + model.safetensors), driven by `loom-bench generate` (streamed OpenAI completions,
# 32-token prompts, 32 new tokens, greedy), in one run, each figure beside its peer:
#   1. output tokens/s at 1, 8, 32 and 64 clients (and 32 with 128 new tokens each: fewer prompt
#      tokens per output token) against the same server with --max-num-seqs 1
#      (one sequence at a time: the sequential server), and at 1 client against PyTorch's greedy
#      loop with a KV cache on the same weights and threads (Hugging Face's GPT2LMHeadModel.generate
#      where $LOOM_PYTHON has transformers); the greedy tokens of both compared;
#   2. KV memory: positions held by the running sequences over the positions their blocks hold,
#      sampled from /metrics while 32 clients run (target >= 0.95), at the short lengths above and
#      at a chat workload's (256-token prompts, 128 new tokens), each beside what 16-token blocks
#      allow at those lengths;
#   3. prefix caching: time to first token of prompts sharing a 512-token prefix, with the
#      prefix cache against --no-prefix-caching.
# LOOM_PYTHON: the interpreter with PyTorch (PyPI's 2.x for the timed peer; Debian's otherwise).
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
PY=${LOOM_PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-2}
"$PY" -c 'import torch' 2>/dev/null || { echo "llm_figures: $PY has no torch; skipped"; exit 0; }
usage=$("$B/loom-bench" generate 2>&1 || true)
[ -x "$B/loom-serve" ] && [[ $usage == *--url* ]] || { echo "llm_figures: loom-serve or loom-bench generate not built; skipped"; exit 0; }
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
mkdir -p "$T/repo/gpt2/1"
/usr/bin/python3 "$S/tests/serve/gpt2_ref.py" write "$T/repo/gpt2/1" --seed 5 --layers 12 --heads 12 --embd 768 \
  --positions 1024 --vocab 50257 --prefix transformer.
chmod -R go-w "$T/repo"
start() {  # NAME ARGS...: sets url
  "$B/loom-serve" --model-repository "$T/repo" --http-port 0 --grpc-port -1 --threads "$THREADS" --request-timeout-ms 900000 "${@:2}" 2>"$T/$1.log" &
  spid=$!
  local n=0
  until grep -q "listening:" "$T/$1.log" || [ $n -gt 600 ]; do sleep 0.1; n=$((n + 1)); done
  url=$(grep -oE "http [0-9.]+:[0-9]+" "$T/$1.log" | cut -d' ' -f2)
}
stop() { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }
gen() {  # URL CONCURRENCY REQUESTS [ARGS]: the JSON line
  "$B/loom-bench" generate --url "$1" --model gpt2 --concurrency "$2" --requests "$3" --prompt-len 32 --output-len 32 \
    --vocab 50257 --format json "${@:4}"
}
# kv_sampler FILE: in the background (pid in $sampler), every 0.2 s the running sequences'
# positions over the positions their blocks hold, from the server's /metrics, a line each.
kv_sampler() {
  ( while sleep 0.2; do curl -s "http://$url/metrics" | awk '/^loom_llm_kv_tokens_held/ {h=$2} /^loom_llm_kv_blocks_used/ {b=$2}
      END { if (b > 0) print h / (b * 16) }'; done ) >"$1" &
  sampler=$!
}
field() { "$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
ratio() { "$PY" -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$1" "$2"; }
echo "llm_figures: GPT-2-small shape (124M parameters), $THREADS threads, $(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2)"

# 1. Throughput against the sequential server and PyTorch.
start seq --max-num-seqs 1
for c in 1 32; do
  seq_line[$c]=$(gen "$url" "$c" $((c > 8 ? c : 8)))
done
seq_long=$(gen "$url" 32 32 --output-len 128)
stop
start batch --max-num-seqs 64
kv_ratios=$T/kv.txt
for c in 1 8 32 64; do
  if [ "$c" = 32 ]; then
    kv_sampler "$kv_ratios"
  fi
  line[$c]=$(gen "$url" "$c" $((c > 8 ? 2 * c : 8)))
  [ "$c" != 32 ] || kill $sampler
done
long=$(gen "$url" 32 64 --output-len 128)
seq1=$(field "${seq_line[1]}" output_tokens_per_s)
seq32=$(field "${seq_line[32]}" output_tokens_per_s)
for c in 1 8 32 64; do
  tps=$(field "${line[$c]}" output_tokens_per_s)
  printf 'llm_figures: %2d clients: %7.1f output tokens/s (TTFT p50 %s ms, ITL p50 %s ms); sequential server %7.1f: %sx\n' \
    "$c" "$tps" "$(field "${line[$c]}" ttft_p50_ms)" "$(field "${line[$c]}" itl_p50_ms)" \
    "$([ "$c" = 1 ] && echo "$seq1" || echo "$seq32")" "$(ratio "$tps" "$([ "$c" = 1 ] && echo "$seq1" || echo "$seq32")")"
done
printf 'llm_figures: 32 clients, 128 new tokens each: %7.1f output tokens/s (ITL p50 %s ms); sequential server %7.1f: %sx\n' \
  "$(field "$long" output_tokens_per_s)" "$(field "$long" itl_p50_ms)" "$(field "$seq_long" output_tokens_per_s)" \
  "$(ratio "$(field "$long" output_tokens_per_s)" "$(field "$seq_long" output_tokens_per_s)")"
# The same prompts at batch 1 through PyTorch, and through loom-serve for the token comparison.
prompts=$("$PY" -c 'import json, random; r = random.Random(3); print(json.dumps([[r.randrange(50257) for _ in range(32)] for _ in range(8)]))')
peer=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" "$S/tests/bench/llm_peer.py" "$T/repo/gpt2/1" "$prompts" 32 "$THREADS" 2>/dev/null | tail -1)
peer_tps=$(field "$peer" tokens_per_s)
t0=$(date +%s.%N)
same=0
for k in $(seq 0 7); do
  p=$("$PY" -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1])[int(sys.argv[2])]))' "$prompts" "$k")
  ids=$(curl -s "http://$url/v1/completions" -d "{\"model\":\"gpt2\",\"prompt\":$p,\"max_tokens\":32,\"temperature\":0,\"ignore_eos\":true}" |
    "$PY" -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["token_ids"])')
  want=$("$PY" -c 'import json, sys; print(json.loads(sys.argv[1])["outputs"][int(sys.argv[2])])' "$peer" "$k")
  [ "$ids" = "$want" ] && same=$((same + 1))
done
t1=$(date +%s.%N)
loom1=$("$PY" -c "print(256 / ($t1 - $t0))")
echo "llm_figures: 1 client, the peer's 8 prompts: loom-serve $(printf %.1f "$loom1") tokens/s (curl, one at a time); PyTorch $(field "$peer" torch), $(field "$peer" peer): $(printf %.1f "$peer_tps"): $(ratio "$loom1" "$peer_tps")x; greedy tokens equal in $same of 8 sequences"
kv_mean() { "$PY" -c 'import sys; v = [float(x) for x in open(sys.argv[1]) if x.strip()]; print("%.3f over %d samples" % (sum(v) / len(v), len(v)) if v else "no samples")' "$1"; }
# What 16-token blocks allow at all: a sequence holding L positions holds ceil(L/16) blocks. Over
# loom-bench's lengths (prompt P and output O uniform within +-50% of their means), each decode
# step one sample: sum L / sum 16 ceil(L/16), for L from P to P + O - 1.
kv_bound() { "$PY" -c 'import math, sys
p, o = int(sys.argv[1]), int(sys.argv[2])
num = den = 0
for P in range(p - p // 2, p + p // 2 + 1):
  for O in range(o - o // 2, o + o // 2 + 1):
    for L in range(P, P + O): num += L; den += 16 * math.ceil(L / 16)
print("%.3f" % (num / den))' "$1" "$2"; }
echo "llm_figures: KV memory at 32 clients (prompts 16-48 tokens, 16-48 new): positions held / positions in held blocks = $(kv_mean "$kv_ratios") (target >= 0.95; the most 16-token blocks allow at these lengths: $(kv_bound 32 32))"
# The same at the lengths of a chat workload (prompts 128-384 tokens, 64-192 new), 32 clients.
kv_sampler "$T/kv_long.txt"
chat=$(gen "$url" 32 32 --prompt-len 256 --output-len 128)
kill $sampler
echo "llm_figures: KV memory at 32 clients (prompts 128-384 tokens, 64-192 new; $(printf %.1f "$(field "$chat" output_tokens_per_s)") output tokens/s): $(kv_mean "$T/kv_long.txt") (target >= 0.95; the most 16-token blocks allow: $(kv_bound 256 128))"
stop

# 3. Prefix caching: 512 shared tokens, 16 requests one at a time.
declare -A pl
for mode in cache nocache; do
  start "$mode" --max-num-seqs 64 $([ "$mode" = nocache ] && echo --no-prefix-caching)
  pl[$mode]=$(gen "$url" 1 16 --shared-prefix 512 --prefix-share 1 --seed 9)
  stop
done
hit=$(field "${pl[cache]}" ttft_p50_ms)
miss=$(field "${pl[nocache]}" ttft_p50_ms)
echo "llm_figures: prefix caching, 512-token shared prefix: TTFT p50 $hit ms with hits against $miss ms without: $(ratio "$miss" "$hit")x faster"
