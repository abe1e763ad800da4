#!/usr/bin/env bash
# gpt_compress_figures.sh — loom-compress on language models, one run, on text no test was tuned
# on (dpkg's Debian changelog, ~750 kB of English with names, versions and bug numbers; the first
# 90% trains, as loom-train splits, the last 10% is held out), each figure beside its peer:
#   1. distillation: a 4-block, 128-wide teacher (3,000 steps) against a 2-block, 48-wide student
#      (10.9x fewer parameters), distilled (T 1, alpha 0.9) and trained alone for the same 2,000
#      steps and seed: the share of the teacher's perplexity lead closed (target >= 50%) and the
#      student's next-token accuracy against the teacher's (target >= 90%);
#   2. pruning 30% of the teacher's heads and MLP neurons, then 600 steps of fine-tuning:
#      perplexity against the teacher's (target <= +5%);
#   3. INT8: the teacher's perplexity and file size; then a GPT-2-small-shaped gpt (12 blocks,
#      768 wide, context 256) served by loom-serve in fp32 and in INT8, output tokens/s from
#      `loom-bench generate` at 1 and 8 clients (target >= 1.5x) and the file (target <= 0.3x).
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
PY=/usr/bin/python3
THREADS=${THREADS:-2}
STEPS=${STEPS:-3000}                  # the teacher's
STUDENT_STEPS=${STUDENT_STEPS:-2000}  # the students' (at 3,000 the student alone matched this teacher)
[ -x "$B/loom-compress" ] && [ -x "$B/loom-serve" ] || { echo "gpt_compress_figures: loom-compress or loom-serve not built; skipped"; exit 0; }
[ -f /usr/share/doc/dpkg/changelog.gz ] || { echo "gpt_compress_figures: /usr/share/doc/dpkg/changelog.gz absent (docs excluded); skipped"; exit 0; }
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
cd "$T"
zcat /usr/share/doc/dpkg/changelog.gz >corpus.txt
n=$(wc -c <corpus.txt)
tail -c $((n - n * 9 / 10)) corpus.txt >held.txt
field() { "$PY" -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }
ev() { "$B/loom-compress" eval "$1" --data text:held.txt --format json; }
train=(--optimizer adamw --lr 0.002 --lr-schedule cosine --global-batch 16 --seed 1 --threads "$THREADS")
echo "gpt_compress_figures: $(basename /usr/share/doc/dpkg/changelog.gz) of dpkg, $n bytes; $STEPS steps of 16 x 128 tokens; $THREADS threads"

# 1. Distillation.
"$B/loom-train" --model gpt --data text:corpus.txt --context 128 --n-layer 4 --n-embd 128 --n-head 4 "${train[@]}" \
  --steps "$STEPS" --log-every 100000 --export teacher.h5 2>/dev/null
"$B/loom-compress" distill --teacher teacher.h5 --student-n-layer 2 --student-n-embd 48 --student-n-head 4 --steps "$STUDENT_STEPS" \
  --temperature 1 --alpha 0.9 --data text:corpus.txt --eval-data text:held.txt --compare "${train[@]}" -o student.h5 2>/dev/null |
  sed 's/^/gpt_compress_figures: distill: /'

# 2. Pruning with fine-tuning (a fifth of the teacher's steps).
"$B/loom-compress" prune teacher.h5 -o pruned.h5 --sparsity 0.3 --finetune-steps $((STEPS / 5)) --data text:corpus.txt \
  --eval-data text:held.txt --lr 0.0005 --global-batch 16 --threads "$THREADS" 2>/dev/null | sed 's/^/gpt_compress_figures: prune: /'
t=$(ev teacher.h5)
p=$(ev pruned.h5)
"$PY" -c 'import sys; t, p = float(sys.argv[1]), float(sys.argv[2]); print("gpt_compress_figures: pruned 30%% and fine-tuned: perplexity %.3f against the teacher'"'"'s %.3f: %+.1f%% (target <= +5%%)" % (p, t, 100 * (p / t - 1)))' \
  "$(field "$t" perplexity)" "$(field "$p" perplexity)"

# 3. INT8: quality on the teacher, speed on a GPT-2-small shape.
"$B/loom-compress" quantize teacher.h5 -o teacher-int8.h5 --calibration text:held.txt | sed 's/^/gpt_compress_figures: int8: /'
"$B/loom-train" --model gpt --data text:corpus.txt --context 256 --n-layer 12 --n-embd 768 --n-head 12 --global-batch 1 --steps 1 \
  --threads "$THREADS" --log-every 100000 --export big.h5 2>/dev/null
"$B/loom-compress" quantize big.h5 -o big-int8.h5 >/dev/null
mkdir -p repo/fp32/1 repo/int8/1
mv big.h5 repo/fp32/1/model.h5
mv big-int8.h5 repo/int8/1/model.h5
chmod -R go-w repo
vocab=$("$PY" -c 'import h5py, json; print(json.loads(h5py.File("repo/fp32/1/model.h5", "r").attrs["model.config"])["vocab"])')
"$B/loom-serve" --model-repository repo --http-port 0 --grpc-port -1 --threads "$THREADS" --max-num-seqs 16 2>serve.log &
k=0
until grep -q "listening:" serve.log || [ $k -gt 600 ]; do sleep 0.1; k=$((k + 1)); done
url=$(grep -oE "http [0-9.]+:[0-9]+" serve.log | cut -d' ' -f2)
declare -A tps
for m in fp32 int8; do
  for c in 1 8; do
    line=$("$B/loom-bench" generate --url "$url" --model "$m" --concurrency "$c" --requests $((c * 4)) --prompt-len 32 \
      --output-len 64 --vocab "$vocab" --format json)
    tps[$m$c]=$(field "$line" output_tokens_per_s)
  done
done
for c in 1 8; do
  "$PY" -c 'import sys; c, f, q = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]); print("gpt_compress_figures: GPT-2-small shape, %s client(s): INT8 %.1f output tokens/s, fp32 %.1f: %.2fx (target >= 1.5x)" % (c, q, f, q / f))' \
    "$c" "${tps[fp32$c]}" "${tps[int8$c]}"
done
"$PY" -c 'import os; f, q = (os.path.getsize("repo/%s/1/model.h5" % m) for m in ("fp32", "int8")); print("gpt_compress_figures: GPT-2-small shape file: INT8 %d bytes, fp32 %d: %.2fx (target <= 0.3x)" % (q, f, q / f))'
