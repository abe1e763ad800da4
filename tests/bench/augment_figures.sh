#!/usr/bin/env bash
# augment_figures.sh — issue 18's augmentation figure: loom-train on a 2,000-image subset of
# Fashion-MNIST (120 epochs, cosine schedule), test accuracy with --augment shift:1 and
# shift:1,flip and --synthetic 2000 against the same run without (the peer), per seed; target +1 pt.
set -u
T=${LOOM_BUILDDIR:-.}/loom-train
[ -x "$T" ] || { echo "augment_figures: loom-train not built, skipped"; exit 0; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "augment_figures: no dataset-fashion-mnist, skipped"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
acc() {  # SEED ARGS...: the last test accuracy
  local seed=$1
  shift
  "$T" --train-subset 2000 --epochs 120 --global-batch 64 --lr 0.05 --lr-schedule cosine --threads 2 --seed "$seed" \
    --log-every 100000 --metrics-file "$tmp/m.jsonl" "$@" >/dev/null 2>&1 || { echo nan; return; }
  /usr/bin/python3 -c "import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['test_accuracy'])" "$tmp/m.jsonl"
}
for seed in 1 2; do
  base=$(acc $seed --augment none)
  for variant in "--augment shift:1" "--augment shift:1,flip" "--synthetic 2000" "--augment shift:1,flip --synthetic 2000"; do
    a=$(acc $seed $variant)
    awk -v s=$seed -v v="$variant" -v a="$a" -v b="$base" 'BEGIN { d = 100 * (a - b);
      printf "augment: seed %s, 2000 images, %s: test accuracy %.4f vs %.4f without (peer), %+.2f pt, target +1 pt: %s\n",
        s, v, a, b, d, (d >= 1 ? "met" : "missed") }'
  done
done
