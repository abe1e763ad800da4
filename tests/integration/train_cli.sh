#!/usr/bin/env bash
# train_cli.sh — loom-train on one process with the real Fashion-MNIST: options and config
# file, every bad input (one clear line, non-zero exit, nothing half-written), determinism,
# JSON logs and metrics, and the accuracy goal (>= 88% within 10 epochs).
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
T=$LOOM_BUILDDIR/loom-train
[ -x "$T" ] || skip "loom-train not built"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
cd "$LOOM_TMP" || exit 99

run_cmd "$T" --help
expect_eq "--help" 0 "$rc"
expect_match "--help lists --global-batch" "--global-batch" "$out"
# OpenBLAS's kernels fit this CPU: OpenBLAS 0.3.21 takes CPUs it does not know for a Prescott
# (SSE3), and loom-train then names better ones (OPENBLAS_CORETYPE) before it loads again.
if grep -qw avx2 /proc/cpuinfo; then
  run_cmd env OPENBLAS_VERBOSE=2 "$T" --gemm openblas --steps 1 --global-batch 8 --log-every 1000
  expect_eq "--gemm openblas, 1 step: exit" 0 "$rc"
  core=$(grep -oE "^Core: [A-Za-z0-9]+" <<<"$out$err" | tail -1)
  echo "train_cli: OpenBLAS runs its ${core#Core: } kernels on this CPU (model $(grep -m1 -oP '^model\s*:\s*\K[0-9]+' /proc/cpuinfo))"
  expect_match "OpenBLAS's kernels fit an AVX2 CPU" "^Core: [A-Za-z0-9]+$" "$core"
  expect_no_match "OpenBLAS's kernels are not Prescott's on an AVX2 CPU" "Prescott" "$core"
fi
check_err() {  # WHAT EXIT REGEX ARGS...
  local what=$1 code=$2 re=$3
  shift 3
  run_cmd "$T" "$@"
  expect_eq "$what exit" "$code" "$rc"
  expect_match "$what message" "^loom-train: .*$re" "$err"
  expect_eq "$what: no stdout" "" "$out"
}
check_err "unknown option" 2 "unrecognised option|unrecognized option" --frobnicate
check_err "unknown model" 2 "--model must be mlp or gpt" --model transformer
check_err "gpt without text" 2 "--model gpt needs --data text:FILE" --model gpt
: >empty.txt
check_err "empty text" 1 "the text file has no content" --model gpt --data text:"$LOOM_TMP/empty.txt"
printf 'abc' >short.txt
check_err "short text" 1 "too few for --context" --model gpt --data text:"$LOOM_TMP/short.txt"
check_err "missing text" 1 "cannot read the text file" --model gpt --data text:"$LOOM_TMP/nope.txt"
check_err "heads do not divide embd" 1 "not a multiple of heads" --model gpt --data text:/usr/share/common-licenses/GPL-3 --n-embd 30 --n-head 4
check_err "text for mlp" 2 "is for --model gpt" --data text:/usr/share/common-licenses/GPL-3
check_err "layers not from 784" 1 "--layers starts at 100 but Fashion-MNIST images have 784 inputs" --layers 100,10 --steps 1
check_err "layers not to 10" 1 "--layers ends at 5" --layers 784,32,5 --steps 1
check_err "bad layer list" 2 "not a comma-separated list" --layers 784,,10
check_err "zero batch" 2 "--global-batch must be positive" --global-batch 0
check_err "zero lr" 2 "--lr must be positive" --lr 0
check_err "negative lr" 2 "--lr must be positive" --lr -0.1
# Every count option: zero and negative values are errors naming the option and the value.
for opt in steps epochs global-batch threads log-every replan-every ckpt-every ckpt-keep context n-layer n-head n-embd; do
  for v in 0 -5; do
    run_cmd "$T" "--$opt" "$v"
    expect_ne "--$opt $v refused" 0 "$rc"
    expect_match "--$opt $v message" "^loom-train: --$opt must be positive, not $v" "$err"
  done
done
check_err "negative warmup" 2 "--warmup-steps must not be negative, not -3" --warmup-steps -3
check_err "negative seed" 2 "--seed must be a whole number" --seed -5
check_err "negative ckpt minutes" 2 "--ckpt-every-min must not be negative" --ckpt-every-min -1 --ckpt-dir "$LOOM_TMP/c"
check_err "bad optimizer" 2 "--optimizer must be sgd or adamw" --optimizer lion --steps 1
check_err "bad gemm" 2 "--gemm must be auto, openblas or onednn" --gemm mkl
check_err "bad grad-compress" 2 "grad-compress" --grad-compress zip
check_err "bad lr schedule" 2 "--lr-schedule must be constant or cosine" --lr-schedule step
check_err "bad augmentation" 2 "--augment: unknown item 'rotate'" --augment shift:1,rotate
check_err "augmentation of text" 2 "--augment, --train-subset and --synthetic are for image data" --model gpt --data text:/usr/share/common-licenses/GPL-3 --augment flip
check_err "negative synthetic" 2 "--synthetic must not be negative" --synthetic -4
check_err "subset past the data" 1 "--train-subset must be between 1 and 60000, not 70000" --train-subset 70000 --steps 1
check_err "metrics on a bad address" 2 "--metrics-bind: 'nowhere' is not an IPv4 address" --metrics-port 0 --metrics-bind nowhere
check_err "metrics port out of range" 2 "--metrics-port must be 0..65535" --metrics-port 70000
check_err "missing --config file" 1 "--config: cannot read" --config "$LOOM_TMP/none.ini"
# loom-bench --mllog: its figures as MLPerf-style events, run_stop aborted when it fails.
if [ -x "$LOOM_BUILDDIR/loom-bench" ]; then
  run_cmd "$LOOM_BUILDDIR/loom-bench" gemm --m 64 --n 64 --k 64 --reps 1 --mllog bench.mllog
  expect_eq "loom-bench --mllog exit" 0 "$rc"
  run_cmd "$LOOM_BUILDDIR/loom-bench" infer --model "$LOOM_TMP/none.h5" --compare "$LOOM_TMP/none.h5" --mllog bench.mllog
  expect_eq "a failing loom-bench with --mllog fails" 1 "$rc"
  verdict=$(/usr/bin/python3 - bench.mllog <<'PY'
import json, sys
ev = [json.loads(l[len(":::MLLOG "):]) for l in open(sys.argv[1]) if l.startswith(":::MLLOG ")]
keys = [e["key"] for e in ev]
assert keys == ["init_start", "submission_benchmark", "init_stop", "run_start", "loom_bench_result", "run_stop"] * 1 + \
    ["init_start", "submission_benchmark", "init_stop", "run_start", "run_stop"], keys
assert ev[4]["value"]["m"] == 64 and ev[4]["value"]["int8_gops"] > 0
assert ev[5]["metadata"]["status"] == "success" and ev[-1]["metadata"]["status"] == "aborted"
print("ok")
PY
)
  expect_eq "loom-bench's MLLOG lines" ok "$verdict"
fi
# loom-train --mllog against MLCommons' own compliance checker (PyPI mlperf-logging, training
# rules): every common and open-division rule passes; only the benchmark-specific ones, which
# name MLPerf's reference models, cannot (tests/train/mllog_compliance.py).
if peer=$("$LOOM_SRCDIR/contrib/peer-venv.sh" mllog mlperf-logging 2>peer.err); then
  run_cmd "$T" --layers 784,32,10 --steps 5 --global-batch 32 --mllog run.mllog
  expect_eq "loom-train --mllog exit" 0 "$rc"
  run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/train/mllog_compliance.py" run.mllog
  echo "$out" | tail -n 2 | sed 's/^/  /'
  expect_eq "MLCommons' checker: the common and division rules pass" 0 "$rc"
  expect_match "MLCommons' checker: only the benchmark-specific rules are left" "verdict: common and division rules pass; 2 benchmark-specific" "$out"
else
  echo "SKIP (part): no MLCommons checker: $(cat peer.err)"
fi
# Every program says its version; loom-bench --help is help, not an error.
for p in loom-train loom-serve loom-compress loom-bench loom-topo loom-sweep; do
  [ -x "$LOOM_BUILDDIR/$p" ] || continue
  run_cmd "$LOOM_BUILDDIR/$p" --version
  expect_eq "$p --version exit" 0 "$rc"
  expect_match "$p --version" "^$p \\(Loom\\) [0-9]+\\.[0-9]+" "$out"
done
if [ -x "$LOOM_BUILDDIR/loom-bench" ] && command -v mpirun >/dev/null; then
  run_cmd "$LOOM_BUILDDIR/loom-bench" allreduce --bytes 1048576
  expect_eq "loom-bench allreduce on one rank: refused" 2 "$rc"
  expect_match "loom-bench allreduce on one rank: says why" "needs at least 2 ranks" "$err"
fi
# loom-bench reads its numbers whole: trailing letters or none at all are refused by name.
run_cmd "$LOOM_BUILDDIR/loom-bench" checkpoint --bytes 12x --dir "$LOOM_TMP"
expect_eq "loom-bench --bytes 12x: refused" 2 "$rc"
expect_match "loom-bench --bytes 12x: says why" "--bytes must be a whole number of at least 1, not '12x'" "$err"
run_cmd "$LOOM_BUILDDIR/loom-bench" gemm --m abc
expect_eq "loom-bench gemm --m abc: refused, not aborted" 2 "$rc"
expect_match "loom-bench gemm --m abc: says why" "--m must be a whole number of at least 1, not 'abc'" "$err"
run_cmd "$LOOM_BUILDDIR/loom-bench" train --model gpt --batch 0
expect_eq "loom-bench train --batch 0: refused" 2 "$rc"
expect_match "loom-bench train --batch 0: says why" "--batch must be a whole number of at least 1, not '0'" "$err"
if [ -x "$LOOM_BUILDDIR/loom-bench" ] && command -v mpirun >/dev/null; then
  run_cmd "$LOOM_BUILDDIR/loom-bench" allreduce --bytes 1048576,16777216
  expect_match "loom-bench allreduce --bytes takes a list" "needs at least 2 ranks" "$err"
  run_cmd "$LOOM_BUILDDIR/loom-bench" allreduce --bytes 1048576,
  expect_match "loom-bench allreduce --bytes: an empty size is refused" "--bytes must be a whole number" "$err"
fi
run_cmd "$LOOM_BUILDDIR/loom-bench" train --model gpt --precision bf16
expect_eq "loom-bench train --precision on the CPU: usage" 2 "$rc"
expect_match "loom-bench train --precision on the CPU: why" "--precision bf16 is for --device cuda" "$err"
run_cmd "$LOOM_BUILDDIR/loom-bench" --help
expect_eq "loom-bench --help exit" 0 "$rc"
expect_match "loom-bench --help on stdout" "usage: loom-bench" "$out"
check_err "missing data" 1 "apt-get install dataset-fashion-mnist" --data fashion-mnist:/nonexistent
check_err "bad precision" 2 "--precision must be fp32, fp16 or bf16" --precision fp8
check_err "bad data spec" 2 "--data must be" --data mnist
check_err "bad device" 2 "--device must be auto, cpu or cuda" --device tpu
# What cannot run on CUDA is refused by name under --device cuda (and sends auto to the CPU).
check_err "qat on cuda" 1 "--device cuda: --qat runs on the CPU" --device cuda --qat --steps 1
if ! nvidia-smi -L >/dev/null 2>&1; then
  check_err "mixed precision on cuda without a GPU" 1 "--device cuda: " --device cuda --precision fp16 --steps 1
  check_err "gpt in bf16 on cuda without a GPU" 1 "--device cuda: " --model gpt \
    --data text:/usr/share/common-licenses/GPL-3 --device cuda --precision bf16 --steps 1
  check_err "cuda without a GPU" 1 "--device cuda: " --device cuda --steps 1
  check_err "gpt on cuda without a GPU" 1 "--device cuda: " --model gpt --data text:/usr/share/common-licenses/GPL-3 \
    --device cuda --steps 1
  run_cmd "$T" --device auto --steps 2 --log-every 1
  expect_match "auto falls back to the CPU" "on cpu" "$err"
fi
mkdir -p trunc
cp /usr/share/datasets/fashion-mnist/*-labels-idx1-ubyte.gz /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz trunc/
zcat /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz | head -c 100000 | gzip >trunc/train-images-idx3-ubyte.gz
check_err "truncated data" 1 "truncated IDX file" --data fashion-mnist:"$LOOM_TMP/trunc" --steps 1
check_err "negative evaluation interval" 2 "--eval-every must not be negative" --eval-every -5
check_err "export to a missing folder" 1 "cannot create" --steps 2 --export "$LOOM_TMP/no/such/dir/m.h5" --log-every 1000
expect_eq "nothing half-written" "" "$(ls "$LOOM_TMP/no" 2>/dev/null)"

# gpt on a text file, with dropout: trains, evaluates next-character accuracy, exports.
run_cmd "$T" --model gpt --data text:/usr/share/common-licenses/GPL-3 --context 32 --n-embd 32 --n-head 4 --dropout 0.1 \
  --optimizer adamw --lr 0.003 --global-batch 8 --steps 120 --log-every 40 --export gpt.h5
expect_eq "gpt run" 0 "$rc"
expect_match "gpt evaluates" "test accuracy 0\.[0-9]+" "$err"
loss_falls() {  # WHAT FROM TO TOTAL: the loss logged at step TO is below the one at step FROM
  local first last
  first=$(grep -oE "step $2/$4 .*loss [0-9.]+" <<<"$err" | awk '{print $NF}')
  last=$(grep -oE "step $3/$4 .*loss [0-9.]+" <<<"$err" | awk '{print $NF}')
  /usr/bin/python3 -c "import sys; sys.exit(0 if $last < $first else 1)" && pass || fail "$1: loss did not fall ($first -> $last)"
}
loss_falls "gpt" 40 120 120
# A small file (4 KB: a pass is ~14 steps): evaluated every --log-every steps and at the end, not
# after each of its five passes; --eval-every 1 asks for every pass.
head -c 4000 /usr/share/common-licenses/GPL-3 >small.txt
small="--model gpt --data text:$LOOM_TMP/small.txt --context 32 --n-embd 32 --n-head 4 --global-batch 8 --steps 60 --log-every 20"
run_cmd "$T" $small
expect_eq "gpt on a small file: evaluated every --log-every steps, not every pass" 3 "$(grep -cE "epoch [0-9]+ test accuracy" <<<"$err")"
expect_match "gpt on a small file: the last pass evaluated" "epoch 4 test accuracy" "$err"
run_cmd "$T" $small --eval-every 1
expect_eq "gpt on a small file, --eval-every 1: every pass" 5 "$(grep -cE "epoch [0-9]+ test accuracy" <<<"$err")"
/usr/bin/python3 -c 'import h5py,json,sys; c=json.loads(h5py.File(sys.argv[1])["/"].attrs["model.config"]); assert c["type"]=="gpt" and c["vocab"]==len(c["vocab_bytes"])' gpt.h5 && pass || fail "gpt model.config"

# Any text trains: byte-level tokens, so UTF-8 (and bytes that are not UTF-8) round-trip through
# the export and a checkpoint.
printf 'caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac \xff\xfe ' >utf8.txt
for i in $(seq 9); do cat utf8.txt utf8.txt >utf8.2 && mv utf8.2 utf8.txt; done
run_cmd "$T" --model gpt --data text:"$LOOM_TMP/utf8.txt" --context 16 --n-embd 16 --n-head 2 --global-batch 4 --steps 6 \
  --log-every 3 --export utf8.h5 --ckpt-dir utf8.d --ckpt-every 3
expect_eq "gpt on UTF-8 text: exit" 0 "$rc"
/usr/bin/python3 - utf8.h5 utf8.txt <<'PY' && pass || fail "gpt on UTF-8 text: the vocabulary does not round-trip"
import h5py, json, sys
c = json.loads(h5py.File(sys.argv[1])["/"].attrs["model.config"])
assert bytes(c["vocab_bytes"]) == bytes(sorted(set(open(sys.argv[2], "rb").read()))), c["vocab_bytes"]
PY
run_cmd "$T" --model gpt --data text:"$LOOM_TMP/utf8.txt" --context 16 --n-embd 16 --n-head 2 --global-batch 4 --steps 9 \
  --log-every 3 --ckpt-dir utf8.d --ckpt-every 3
expect_match "gpt on UTF-8 text: resumes from its checkpoint" "resumed from utf8.d/ckpt-0*6.h5 at step 6" "$err"
run_cmd "$T" --inspect utf8.h5
expect_eq "gpt on UTF-8 text: --inspect" 0 "$rc"

# llm.c's token files (a 256-int32 header: magic 20240520, version 1, the count; uint16 tokens;
# or Llama 3's: magic 20240801, version 7, uint32 tokens): two shards by glob train a gpt, a
# Llama 3 file too; every bad file is one clear error naming it.
/usr/bin/python3 - <<'PY'
import numpy as np
def write(path, toks, magic=20240520, version=1, count=None, header_only=False, dtype=np.uint16):
    h = np.zeros(256, dtype=np.int32); h[0], h[1], h[2] = magic, version, len(toks) if count is None else count
    with open(path, "wb") as f:
        f.write(h.tobytes() if not header_only else h.tobytes()[:600])
        if not header_only: f.write(np.asarray(toks, dtype=dtype).tobytes())
toks = np.tile(np.arange(3, 203), 240)
write("tok_train_000.bin", toks[:24000]); write("tok_train_001.bin", toks[24000:])
write("bad_magic.bin", toks[:5000], magic=20240521); write("bad_version.bin", toks[:5000], version=2)
write("truncated.bin", toks[:5000], count=6000); write("headless.bin", [], header_only=True)
write("big_token.bin", list(toks[:4000]) + [300] + list(toks[:999]))
write("llama3.bin", list(toks[:6000]) + [70000] * 10, magic=20240801, version=7, dtype=np.uint32)
write("llama3_v1.bin", toks[:5000], magic=20240801, version=1, dtype=np.uint32)
write("eval.bin", toks[:5000], magic=20240522)
PY
run_cmd "$T" --model gpt --data "tokens:$LOOM_TMP/tok_train_*.bin" --vocab 256 --context 32 --n-embd 32 --n-head 4 \
  --optimizer adamw --lr 0.003 --global-batch 16 --steps 60 --log-every 20 --export tok.h5
expect_eq "gpt on token files: exit" 0 "$rc"
expect_match "gpt on token files: both shards" "on 48000 tokens of 2 token files \(vocabulary 256\)" "$err"
loss_falls "gpt on tokens" 20 60 60
/usr/bin/python3 -c 'import h5py,json,sys; c=json.loads(h5py.File(sys.argv[1])["/"].attrs["model.config"]); assert c["vocab"]==256 and c["tokens"] and "vocab_bytes" not in c' tok.h5 \
  && pass || fail "gpt on tokens: model.config"
tok_err() {  # WHAT FILE REGEX [ARGS...]
  local what=$1 file=$2 re=$3
  shift 3
  check_err "token file: $what" 1 "$re" --model gpt --data "tokens:$LOOM_TMP/$file" --vocab 256 --context 16 --global-batch 4 "$@"
}
tok_err "bad magic" bad_magic.bin "bad_magic.bin: not an llm.c token file \(magic 20240521, expected 20240520 or Llama 3's 20240801\)"
tok_err "Llama 3 magic, GPT-2 version" llama3_v1.bin "llama3_v1.bin: token file version 1 \(magic 20240801 goes with version 7\)"
tok_err "an eval file" eval.bin "eval.bin: an llm.c eval file \(HellaSwag or MMLU"
tok_err "Llama 3 token >= vocab" llama3.bin "llama3.bin: token 70000 at position 6000 is outside the vocabulary \(--vocab 256\)"
run_cmd "$T" --model gpt --data "tokens:$LOOM_TMP/llama3.bin" --vocab 70001 --context 16 --n-embd 16 --n-head 2 \
  --global-batch 4 --steps 2 --log-every 1000 --export llama3.h5
expect_eq "gpt on a Llama 3 token file (uint32, a vocabulary beyond uint16): exit" 0 "$rc"
expect_match "gpt on a Llama 3 token file: read" "on 6010 tokens of 1 token file" "$err"
/usr/bin/python3 -c 'import h5py,json,sys; c=json.loads(h5py.File(sys.argv[1])["/"].attrs["model.config"]); assert c["vocab"]==70001 and c["tokens"]=="llm.c uint32", c' llama3.h5 \
  && pass || fail "gpt on a Llama 3 token file: model.config"
tok_err "version" bad_version.bin "bad_version.bin: token file version 2"
tok_err "truncated" truncated.bin "truncated.bin: the header says 6000 tokens, the file holds 5000 \(truncated\)"
tok_err "shorter than the header" headless.bin "headless.bin: 600 bytes is shorter than the 1024-byte header"
tok_err "token >= vocab" big_token.bin "big_token.bin: token 300 at position 4000 is outside the vocabulary \(--vocab 256\)"
tok_err "no match" "none_*.bin" "tokens:.*none_\*.bin: no file matches"
check_err "token files for mlp" 2 "--data tokens:FILE is for --model gpt" --data "tokens:$LOOM_TMP/tok_train_000.bin"
check_err "vocab without token files" 2 "--vocab is for --data tokens:FILE" --model gpt --data text:/usr/share/common-licenses/GPL-3 --vocab 300
check_err "vocab for the mlp" 2 "--vocab is for --data tokens:FILE" --vocab 300
check_err "vocab too large" 2 "--vocab must be from 2 to 16777216" --model gpt --data "tokens:$LOOM_TMP/tok_train_000.bin" --vocab 20000000

# --recompute: the blocks' activations computed again in backward give the same weights bit
# for bit (dropout included: its masks are drawn again from the saved generator state), in less
# memory; the summary reports the peak.
rg="--model gpt --data text:/usr/share/common-licenses/GPL-3 --context 128 --n-layer 4 --n-embd 64 --n-head 8 --global-batch 16 --steps 4 --dropout 0.1 --optimizer adamw --lr 0.001 --log-every 1000"
peak() { grep -oE "peak memory [0-9.]+ MiB" <<<"$1" | grep -oE "[0-9.]+"; }
run_cmd "$T" $rg --export rc0.h5
plain_peak=$(peak "$err")
run_cmd "$T" $rg --recompute --export rc1.h5
expect_eq "--recompute: exit" 0 "$rc"
recompute_peak=$(peak "$err")
h5diff rc0.h5 rc1.h5 /params /params >/dev/null && pass || fail "--recompute: weights differ from the run that keeps its activations"
echo "train_cli: peak memory of the gpt, 4 steps: ${plain_peak} MiB, with --recompute ${recompute_peak} MiB"
/usr/bin/python3 -c "import sys; sys.exit(0 if $recompute_peak < 0.85 * $plain_peak else 1)" && pass || fail "--recompute: peak $recompute_peak MiB, without $plain_peak MiB"
check_err "--recompute for the mlp" 2 "--recompute is for --model gpt" --recompute

# --attention flash: no T x T matrix per head. The same losses as the full softmax within fp32
# rounding (its sums run in another order), in less memory at a long context; auto (the
# default) takes it from context 256 on.
fa="--model gpt --data text:/usr/share/common-licenses/GPL-3 --context 512 --n-layer 2 --n-embd 64 --n-head 8 --global-batch 4 --steps 3 --optimizer adamw --lr 0.001 --log-every 1 --log-format json"
run_cmd "$T" $fa --attention full --metrics-file fa_full.jsonl
expect_eq "--attention full: exit" 0 "$rc"
full_peak=$(peak "$err")
run_cmd "$T" $fa --metrics-file fa_auto.jsonl
expect_eq "--attention auto at context 512: exit" 0 "$rc"
expect_match "--attention auto at context 512: flash" "on cpu, flash attention" "$err"
flash_peak=$(peak "$err")
/usr/bin/python3 - fa_full.jsonl fa_auto.jsonl <<'PY' && pass || fail "--attention flash: losses differ from the full softmax's"
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"loss"' in l and "event" not in json.loads(l)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("train_cli: losses, full", a, "flash", b)
sys.exit(0 if len(a) == 3 and len(a) == len(b) and all(abs(x - y) <= 1e-4 * abs(x) for x, y in zip(a, b)) else 1)
PY
echo "train_cli: peak memory of the gpt at context 512: full attention ${full_peak} MiB, flash ${flash_peak} MiB"
/usr/bin/python3 -c "import sys; sys.exit(0 if $flash_peak < 0.8 * $full_peak else 1)" && pass || fail "--attention flash: peak $flash_peak MiB, full $full_peak MiB"
check_err "--attention bad" 2 "--attention must be auto, full or flash, not .fast." --model gpt --data text:/usr/share/common-licenses/GPL-3 --attention fast
check_err "--attention for the mlp" 2 "--attention is for --model gpt" --attention flash

# A config file takes the same keys; the command line wins.
printf 'steps = 20\nglobal-batch = 64\nlr = 0.02\nseed = 9\nlog-every = 10\n' >cfg.ini
run_cmd "$T" --config cfg.ini --log-format json --metrics-file m.jsonl --export a.h5
expect_eq "config run" 0 "$rc"
expect_match "json log lines" '^\{"ts":"20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z","level":"info","component":"loom-train","rank":0' "$err"
/usr/bin/python3 - "$LOOM_TMP/m.jsonl" <<'PY' && pass || fail "metrics file fields"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "step" in l and "event" not in l]
assert steps and all(k in steps[0] for k in ("step", "epoch", "loss", "samples_per_s", "rank_batch", "comm_bytes", "loss_scale")), steps[:1]
assert steps[-1]["step"] == 20 and steps[0]["rank_batch"] == [64]
ev = [l for l in lines if l.get("event") == "eval"]
su = [l for l in lines if l.get("event") == "summary"]
assert ev and 0 < ev[-1]["test_accuracy"] <= 1
assert len(su) == 1 and su[0]["steps"] == 20 and su[0]["samples_per_s"] > 0 and "comm_bytes" in su[0] and "test_accuracy" in su[0]
PY
printf 'steps = 20\ncolour = blue\n' >bad.ini
check_err "unknown config key" 2 "colour" --config bad.ini

# Deterministic: same seed and threads give the same weights; another seed does not.
run_cmd "$T" --config cfg.ini --export b.h5
expect_eq "second run" 0 "$rc"
h5diff a.h5 b.h5 /params /params >/dev/null && pass || fail "same seed gave different weights"
run_cmd "$T" --config cfg.ini --seed 10 --export c.h5
h5diff a.h5 c.h5 /params /params >/dev/null && fail "another seed gave the same weights" || pass
for gemm in openblas onednn; do
  run_cmd "$T" --config cfg.ini --threads 2 --gemm "$gemm" --export "d-$gemm-1.h5"
  run_cmd "$T" --config cfg.ini --threads 2 --gemm "$gemm" --export "d-$gemm-2.h5"
  h5diff "d-$gemm-1.h5" "d-$gemm-2.h5" /params /params >/dev/null && pass || fail "GEMM $gemm, 2 threads: not deterministic"
done

# The accuracy goal: the 784-512-512-10 MLP reaches 88% within 10 epochs.
run_cmd "$T" --epochs 10 --threads 2 --lr 0.1 --lr-schedule cosine --warmup-steps 200 --log-every 100000 --metrics-file acc.jsonl
expect_eq "10 epochs exit" 0 "$rc"
acc=$(/usr/bin/python3 -c 'import json,sys; print(max(json.loads(l)["test_accuracy"] for l in open(sys.argv[1]) if "\"eval\"" in l))' acc.jsonl)
echo "train_cli: best test accuracy within 10 epochs: $acc"
/usr/bin/python3 -c "import sys; sys.exit(0 if $acc >= 0.88 else 1)" && pass || fail "accuracy $acc < 0.88"
finish
