#!/usr/bin/env bash
# compress_gpt.sh — loom-compress on a language model (Loom's gpt), checked against PyTorch:
# eval's loss and accuracy equal PyTorch's on the same windows; INT8 weights equal
# torch.quantize_per_channel's with PerChannelMinMaxObserver's scales; pruned heads and neurons
# leave a smaller file that PyTorch runs with the pruned shape, and fine-tuning recovers; a
# distilled student is written and compared with the same student trained alone; loom-serve
# serves the pruned and the INT8 gpt and their greedy text is compared with the float model's;
# every bad input gives one clear error and writes nothing.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
B=$LOOM_BUILDDIR
[ -x "$B/loom-compress" ] || skip "loom-compress not built"
cd "$LOOM_TMP" || exit 99
PY=/usr/bin/python3
CHECK=$LOOM_SRCDIR/tests/parity/gpt_compress_check.py
json() { $PY -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }
check() { $PY -c "import json,sys; d=json.load(sys.stdin); print('yes' if $1 else 'no: %s' % d)"; }

# Training text and held-out text of one document (the held-out part may hold bytes the training
# part has not: eval leaves them out and counts them).
head -c 28000 /usr/share/common-licenses/GPL-3 >train.txt
tail -c 7000 /usr/share/common-licenses/GPL-3 >held.txt
run_cmd "$B/loom-train" --model gpt --data text:train.txt --context 64 --n-layer 3 --n-embd 64 --n-head 4 --optimizer adamw \
  --lr 0.003 --global-batch 16 --steps 300 --seed 2 --log-every 1000 --export t.h5
expect_eq "train the teacher" 0 "$rc"

# eval: PyTorch's loss and accuracy on the same windows.
run_cmd "$B/loom-compress" eval t.h5 --data text:held.txt --format json
expect_eq "eval a gpt" 0 "$rc"
ev=$out
expect_eq "eval's fields" yes "$(echo "$ev" | check "set(d) >= {'loss', 'perplexity', 'accuracy', 'params', 'file_bytes'} and d['type'] == 'gpt'")"
expect_eq "perplexity is exp(loss)" yes "$(echo "$ev" | check "abs(d['perplexity'] - __import__('math').exp(d['loss'])) < 1e-9 * d['perplexity']")"
run_cmd $PY "$CHECK" eval t.h5 held.txt "$ev"
expect_eq "eval equals PyTorch's loss and accuracy" 0 "$rc"
echo "$out"
t_ppl=$(echo "$ev" | json '["perplexity"]'); t_bytes=$(echo "$ev" | json '["file_bytes"]'); t_params=$(echo "$ev" | json '["params"]')
run_cmd "$B/loom-compress" eval t.h5 --data text:held.txt
expect_match "eval's text form" "gpt \(layers 3, heads 4, embd 64, context 64, vocab [0-9]+\), fp32, $t_params params" "$out"

# INT8: weights as PyTorch quantizes them; perplexity within 2%; the file smaller.
run_cmd "$B/loom-compress" quantize t.h5 -o q.h5 --calibration text:held.txt
expect_eq "quantize a gpt" 0 "$rc"
expect_match "the table compares perplexity" "perplexity +$(printf %.4f "$t_ppl")" "$out"
run_cmd $PY "$CHECK" int8 t.h5 q.h5
expect_eq "int8 weights equal torch.quantize_per_channel's" 0 "$rc"
echo "$out" | head -3
q=$("$B/loom-compress" eval q.h5 --data text:held.txt --format json)
expect_eq "int8 precision" int8 "$(echo "$q" | json '["precision"]')"
expect_eq "int8 perplexity within 2%" yes "$(echo "$q" | check "abs(d['perplexity'] / $t_ppl - 1) < 0.02")"
expect_eq "int8 file <= 0.45x (small model: embeddings and HDF5 weigh more)" yes "$(echo "$q" | check "d['file_bytes'] <= 0.45 * $t_bytes")"
run_cmd "$B/loom-compress" quantize t.h5 -o w.h5 --weights-only
expect_eq "quantize weights only" 0 "$rc"
w=$("$B/loom-compress" eval w.h5 --data text:held.txt --format json)
expect_eq "int8-weights precision" int8-weights "$(echo "$w" | json '["precision"]')"
run_cmd $PY "$CHECK" eval w.h5 held.txt "$w"
expect_eq "weights-only eval equals PyTorch on the dequantized weights" 0 "$rc"

# Pruning 30% of heads and neurons: PyTorch runs the pruned shape and agrees; fine-tuning helps.
run_cmd "$B/loom-compress" prune t.h5 -o p.h5 --sparsity 0.3 --eval-data text:held.txt
expect_eq "prune a gpt" 0 "$rc"
expect_match "heads and neurons" "heads per block 4 -> 3, MLP neurons 256 -> 179" "$out"
p=$("$B/loom-compress" eval p.h5 --data text:held.txt --format json)
expect_eq "pruned params < 0.8x" yes "$(echo "$p" | check "d['params'] < 0.8 * $t_params")"
expect_eq "pruned file smaller" yes "$(echo "$p" | check "d['file_bytes'] < 0.85 * $t_bytes")"
cfg=$($PY -c "import h5py; c = h5py.File('p.h5', 'r').attrs['model.config']; print(c.decode() if isinstance(c, bytes) else c)")
expect_eq "model.config: heads, head_size, inner" yes "$(echo "$cfg" | check "d['heads'] == 3 and d['head_size'] == 16 and d['inner'] == 179 and d['pruned']['sparsity'] == 0.3")"
run_cmd $PY "$CHECK" eval p.h5 held.txt "$p"
expect_eq "pruned eval equals PyTorch's" 0 "$rc"
run_cmd "$B/loom-compress" prune t.h5 -o pf.h5 --sparsity 0.3 --finetune-steps 40 --data text:train.txt --eval-data text:held.txt
expect_eq "prune and fine-tune" 0 "$rc"
pf=$("$B/loom-compress" eval pf.h5 --data text:held.txt --format json)
expect_eq "fine-tuning lowers the pruned perplexity" yes "$(echo "$pf" | check "d['perplexity'] < $(echo "$p" | json '["perplexity"]')")"
echo "compress_gpt: perplexity teacher $t_ppl, pruned $(echo "$p" | json '["perplexity"]'), fine-tuned $(echo "$pf" | json '["perplexity"]')"

# Distillation: a 1-block student, compared with itself trained alone.
run_cmd "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 40 \
  --data text:train.txt --eval-data text:held.txt --compare -o s.h5
expect_eq "distil a gpt" 0 "$rc"
expect_match "teacher and students scored" "teacher .*perplexity.*student .*\(distilled\).*student .*\(trained alone, same seed and steps\)" "$(echo $out)"
expect_match "gap closed reported" "gap closed: " "$out"
expect_match "accuracy ratio reported" "student accuracy / teacher accuracy: [0-9.]+%" "$out"
echo "$out" | grep -E "^(teacher|student|gap)"
s=$("$B/loom-compress" eval s.h5 --data text:held.txt --format json)
expect_eq "the student has the student's shape" yes "$(echo "$s" | check "d['params'] < $t_params / 8")"

# Distillation checkpoints and resumes like loom-train; a checkpoint of another teacher or loss is refused.
run_cmd "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 20 \
  --data text:train.txt --ckpt-dir ck --ckpt-every 10 -o s1.h5
expect_eq "distil with checkpoints" 0 "$rc"
[ -f ck/ckpt-0000000020.h5 ] && pass || fail "no checkpoint at step 20 in ck/: $(ls ck 2>&1)"
run_cmd "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 30 \
  --data text:train.txt --ckpt-dir ck --ckpt-every 10 -o s2.h5
expect_eq "resume the distillation" 0 "$rc"
expect_match "it resumed at step 20" "resumed from .*ckpt-0000000020.h5 at step 20" "$err"
refused "resume with another alpha" 1 "checkpoint of another configuration \(distill.alpha" \
  "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 40 \
  --data text:train.txt --ckpt-dir ck --alpha 0.3 -o out.h5

# loom-serve serves the pruned and the INT8 gpt; greedy text against the float model's.
mkdir -p repo/f/1 repo/q/1 repo/p/1
cp t.h5 repo/f/1/model.h5; cp q.h5 repo/q/1/model.h5; cp pf.h5 repo/p/1/model.h5
chmod -R go-w repo
serve_start serve --model-repository repo --grpc-port -1
expect_match "the INT8 gpt loads as int8" "loaded model q version 1 .*gpt.*int8" "$(cat serve.log)"
expect_match "the pruned gpt loads" "loaded model p version 1 .*gpt" "$(cat serve.log)"
prompt="This License "
greedy() {  # greedy MODEL: 48 tokens after the prompt, into $gen
  run_cmd curl -s -X POST "http://$http/v2/models/$1/generate" -d "{\"text_input\":\"$prompt\",\"parameters\":{\"max_tokens\":48}}"
  expect_match "generate with $1" '"finish_reason":"length"' "$out"
  gen=$(echo "$out" | json '["text_output"]')
}
greedy f; g_f=$gen
greedy q; g_q=$gen
greedy p; g_p=$gen
read -r agree prefix < <($PY "$CHECK" agree "$g_f" "$g_q")
echo "compress_gpt: INT8 greedy text agrees with the float model's at $agree of 48 positions (first $prefix identical)"
expect_eq "INT8 greedy text starts as the float model's" yes "$([ "$prefix" -ge 16 ] && echo yes || echo "no: $prefix")"
read -r agree_p prefix_p < <($PY "$CHECK" agree "$g_f" "$g_p")
echo "compress_gpt: pruned and fine-tuned greedy text agrees at $agree_p (first $prefix_p identical)"
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null

# llm.c token files: a gpt trained on tokens is scored, distilled and pruned on tokens.
/usr/bin/python3 - <<'PY'
import numpy as np
data = open("train.txt", "rb").read()
def write(path, toks):
    h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = 20240520, 1, len(toks)
    open(path, "wb").write(h.tobytes() + np.asarray(toks, dtype=np.uint16).tobytes())
toks = np.frombuffer(data, dtype=np.uint8).astype(np.uint16) + 1000  # ids above the bytes: a tokenizer's
write("tok_train.bin", toks[:24000]); write("tok_held.bin", toks[24000:])
PY
run_cmd "$B/loom-train" --model gpt --data tokens:tok_train.bin --vocab 1300 --context 32 --n-layer 2 --n-embd 32 --n-head 2 \
  --optimizer adamw --lr 0.003 --global-batch 16 --steps 60 --log-every 1000 --export tt.h5
expect_eq "train a gpt on token files" 0 "$rc"
tt=$("$B/loom-compress" eval tt.h5 --data tokens:tok_held.bin --format json)
expect_eq "eval on token files" yes "$(echo "$tt" | check "d['tokens'] == (3999 // 32) * 32 and d['perplexity'] > 1")"
tm=$("$B/loom-compress" eval tt.h5 --data tokens:tok_held.bin --max-tokens 640 --format json)
expect_eq "--max-tokens bounds the tokens scored" 640 "$(echo "$tm" | json '["tokens"]')"
run_cmd "$B/loom-compress" distill --teacher tt.h5 --student-n-layer 1 --student-n-embd 16 --student-n-head 2 --steps 10 \
  --data tokens:tok_train.bin --eval-data tokens:tok_held.bin -o ts.h5
expect_eq "distil on token files" 0 "$rc"
expect_match "the student is scored on tokens" "student .*vocab 1300 .*\(distilled\)" "$out"
run_cmd "$B/loom-compress" prune tt.h5 -o tp.h5 --sparsity 0.5 --finetune-steps 5 --data tokens:tok_train.bin
expect_eq "prune and fine-tune on token files" 0 "$rc"
refused "a token model on text" 1 "reads token ids, not text" "$B/loom-compress" eval tt.h5 --data text:held.txt
refused "a byte model on tokens" 1 "a gpt of bytes \(vocab_bytes\) reads text:FILE, not token files" \
  "$B/loom-compress" eval t.h5 --data tokens:tok_held.bin

# Bad input: one error each, nothing written.
printf '0123456789 %.0s' $(seq 400) >digits.txt
refused "a student on another vocabulary" 1 "has another vocabulary .*use the text it was trained on" \
  "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 5 --data text:digits.txt -o out.h5
refused "pruning every head of a block" 1 "would remove all 4 heads of each block" "$B/loom-compress" prune t.h5 -o out.h5 --sparsity 0.9
run_cmd "$B/loom-train" --layers 784,16,10 --steps 3 --global-batch 32 --export mlp.h5 --log-every 1000
refused "a teacher that is not a gpt" 1 "mlp.h5: not a gpt .*need a gpt teacher" \
  "$B/loom-compress" distill --teacher mlp.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 5 --data text:train.txt -o out.h5
: >model.safetensors
refused "a GPT-2 safetensors teacher" 1 "model.safetensors: loom-compress works on Loom's HDF5 model files .*not safetensors" \
  "$B/loom-compress" distill --teacher model.safetensors --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 5 --data text:train.txt -o out.h5
head -c 20 held.txt >short.txt
refused "eval on text shorter than the context" 1 "short.txt: [0-9]+ tokens are fewer than one window of the model's context \(64 \+ 1\)" \
  "$B/loom-compress" eval t.h5 --data text:short.txt
refused "distil on text shorter than the context" 1 "too few for --context 64" \
  "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 32 --student-n-head 2 --steps 5 --data text:short.txt -o out.h5
refused "quantize an INT8 gpt" 1 "an int8 model; quantize takes the float model" "$B/loom-compress" quantize q.h5 -o out.h5
refused "prune a pruned gpt" 1 "pruned already" "$B/loom-compress" prune p.h5 -o out.h5 --sparsity 0.3
refused "a gpt scored on images" 2 "--data must be text:FILE or tokens:PATTERN for a gpt" "$B/loom-compress" eval t.h5 --data fashion-mnist
refused "a width the heads do not divide" 2 "student-n-embd must be a multiple of --student-n-head" \
  "$B/loom-compress" distill --teacher t.h5 --student-n-layer 1 --student-n-embd 30 --student-n-head 4 --steps 5 --data text:train.txt -o out.h5
refused "MLP options for a gpt" 2 "observer, --calib-samples and --weight-scales are for the MLP" \
  "$B/loom-compress" quantize t.h5 -o out.h5 --observer entropy
finish
