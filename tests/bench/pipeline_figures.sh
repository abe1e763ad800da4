#!/usr/bin/env bash
# pipeline_figures.sh — the pipeline figure of issue 15, measured in one run: the seed's
# multimodal pipeline (examples/multimodal/: three models exported by PyTorch, one loom-serve
# each) served by a fourth loom-serve, its p50 against the same client calling the three
# services one after another (target: not slower), and the latency each hop adds (target
# <= 1 ms p50), by loom-bench pipeline; for the example's small models and for wider ones
# (make_models.py --size medium), whose steps cost more than a hop.
# Usage: LOOM_BUILDDIR=_build LOOM_SRCDIR=. tests/bench/pipeline_figures.sh   (about a minute)
set -euo pipefail
B=${LOOM_BUILDDIR:-.}
S=${LOOM_SRCDIR:-$(dirname "$0")/../..}
work=$(mktemp -d "${TMPDIR:-/tmp}/loom-pipeline-figures.XXXXXX")
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
start() {  # start NAME ARGS...: a loom-serve in the background; sets $addr to its gRPC address
  local name=$1 n=0
  shift
  "$B/loom-serve" --http-port 0 --grpc-port 0 --max-queue-delay-us 0 "$@" >/dev/null 2>"$work/$name.log" &
  pids+=($!)
  until grep -q "listening:" "$work/$name.log" 2>/dev/null || [ $n -gt 300 ]; do sleep 0.05; n=$((n + 1)); done
  addr=$(grep -oE "grpc [0-9.]+:[0-9]+" "$work/$name.log" | cut -d' ' -f2)
}
figures() {  # SIZE: the three services and the pipeline on make_models.py --size SIZE, timed
  local size=$1 t i f p rows
  /usr/bin/python3 "$S/examples/multimodal/make_models.py" "$work/$size" --size "$size" 2>/dev/null
  start text --model-repository "$work/$size"
  t=$addr
  start image --model-repository "$work/$size"
  i=$addr
  start fusion --model-repository "$work/$size"
  f=$addr
  sed -e "s/127.0.0.1:9101/$t/" -e "s/127.0.0.1:9201/$i/" -e "s/127.0.0.1:9301/$f/" \
    "$S/examples/multimodal/pipeline.yaml" >"$work/pipeline.yaml"
  start pipeline --spec "$work/pipeline.yaml"
  p=$addr
  for rows in 1 8 32; do
    echo "== $size models, $rows rows (target: not slower than the steps one after another; <= 1 ms per hop)"
    "$B/loom-bench" pipeline --spec "$work/pipeline.yaml" --addr "$p" --requests $((rows == 1 ? 500 : 200)) --batch $rows \
      --int-max 200 --seq 8
  done
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  pids=()
}
figures small
figures medium
