#!/usr/bin/env bash
# compress_figures.sh — the figures of loom-compress, measured in one run on this machine:
# the int8 GEMM against sgemm, INT8 inference against fp32, and Fashion-MNIST accuracy for
# pruning, PTQ (each observer) and distillation, each beside its peer with the ratio.
# Usage: LOOM_BUILDDIR=_build tests/bench/compress_figures.sh   (about three minutes on 2 cores)
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-compress-figures.XXXXXX")
trap 'rm -rf "$work"' EXIT
acc() { "$B/loom-compress" eval "$1" --format json | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["test_accuracy"], d["params"], d["file_bytes"])'; }
echo "== loom-bench gemm (1024^3, one thread; target int8 >= 2.5x sgemm)"
"$B/loom-bench" gemm --threads 1
echo "== the float model: 784-512-512-10, 10 epochs"
"$B/loom-train" --epochs 10 --threads 2 --export "$work/fp32.h5" --log-every 100000 2>&1 | tail -1
read -r fa fp fb < <(acc "$work/fp32.h5")
echo "== loom-bench infer (batch 256, one thread; target int8 >= 2x fp32)"
"$B/loom-compress" quantize "$work/fp32.h5" -o "$work/int8.h5" --calib-samples 2000 >/dev/null
"$B/loom-bench" infer --model "$work/fp32.h5" --compare "$work/int8.h5" --batch 256 --threads 1
echo "== PTQ (target: <= 0.5 pt lost, file <= 0.3x)"
for obs in minmax percentile entropy; do
  "$B/loom-compress" quantize "$work/fp32.h5" -o "$work/q-$obs.h5" --observer "$obs" --calib-samples 2000 >/dev/null
  read -r qa _ qb < <(acc "$work/q-$obs.h5")
  /usr/bin/python3 -c "print('int8 %-10s accuracy %.4f vs fp32 %.4f (%+.2f pt), file %.2fx' % ('$obs', $qa, $fa, 100 * ($qa - $fa), $qb / $fb))"
done
echo "== pruning 30% of the hidden neurons, one epoch of fine-tuning (target: <= 0.6 pt lost, >= 28% fewer params)"
"$B/loom-compress" prune "$work/fp32.h5" -o "$work/pruned.h5" --sparsity 0.3 --finetune-epochs 1 --threads 2 >/dev/null 2>&1
read -r pa pp pb < <(acc "$work/pruned.h5")
/usr/bin/python3 -c "print('pruned accuracy %.4f vs %.4f (%+.2f pt), params %d vs %d (%.1f%% fewer), file %.2fx' % ($pa, $fa, 100 * ($pa - $fa), $pp, $fp, 100 * (1 - $pp / $fp), $pb / $fb))"
echo "== distillation of a 784-32-10 student (target: >= 50% of the gap closed)"
"$B/loom-compress" distill --teacher "$work/fp32.h5" --student-layers 784,32,10 -o "$work/student.h5" --epochs 3 \
  --lr 0.1 --lr-schedule cosine --threads 2 --compare 2>/dev/null
