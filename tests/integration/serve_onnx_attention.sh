#!/usr/bin/env bash
# serve_onnx_attention.sh — attention as PyTorch's exporter writes it is proven row-independent
# at load and batched: nn.MultiheadAttention (reshaped to [T, N·heads, d] and back through
# [T·N, d]), with and without a key padding mask, nn.TransformerEncoder, a decoder layer, timm's
# attention, at opsets 14 and 17 of Debian's PyTorch (LOOM_PYTHON: a Python with PyPI's PyTorch 2
# and onnx adds its opset 14 and 18 exports, SDPA and the dynamo exporter). Four requests sent at
# once share a run, and each answer equals PyTorch's for that request alone. An MHA whose
# dimension 0 is the sequence mixes what the server would stack: it runs one request at a time,
# the node named, and still answers each request right (Debian's export: PyTorch 2's legacy
# exporter fixes that sequence length inside the graph).
. "$(dirname "$0")/lib.sh"
require_onnx_graph
/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "python3-torch is needed"
cd "$LOOM_TMP" || exit 99
script=$LOOM_SRCDIR/tests/parity/onnx_attention.py

repos=(debian)
/usr/bin/python3 "$script" export debian >export.log 2>&1 || { tail -20 export.log; exit 99; }
if [ -n "${LOOM_PYTHON:-}" ] && "$LOOM_PYTHON" -c 'import torch, onnx; assert int(torch.__version__[0]) >= 2' 2>/dev/null; then
  "$LOOM_PYTHON" "$script" export pypi dynamo >export-pypi.log 2>&1 || { tail -20 export-pypi.log; exit 99; }
  repos+=(pypi)
else
  echo "note: LOOM_PYTHON (PyPI's PyTorch 2 with onnx) not given: PyTorch 2's exports (opset 18, SDPA, dynamo) not tested"
fi

for repo in "${repos[@]}"; do
  serve_start "$repo" --model-repository "$repo" --grpc-port -1 --max-queue-delay-us 200000 --max-batch-size 16
  [ -n "$http" ] || { cat "$repo.log"; exit 99; }
  for model in $(/usr/bin/python3 -c "import json; print(' '.join(sorted(json.load(open('$repo/cases.json')))))"); do
    line=$(grep "loaded model $model version" "$repo.log")
    if [ "$model" = seq_first ]; then
      expect_match "$repo $model: the sequence on dimension 0 runs one request at a time, naming the node" \
        "one request at a time \((Softmax|MatMul|Reshape|Gemm|Transpose|Add|Mul)[^)]*'" "$line"
    else
      expect_match "$repo $model: proven row-independent and batched" "batched up to 16 rows" "$line"
    fi
  done
  out=$(/usr/bin/python3 "$script" check "$http" "$repo/cases.json")
  [ -n "${LOOM_TEST_VERBOSE:-}" ] && echo "$out"
  while read -r model rest; do
    expect_match "$repo $model: each answer beside others equals PyTorch's alone" " equal$" "$rest"
  done <<<"$out"
  metrics=$(curl -s "http://$http/metrics")
  for model in encoder14 mha_mask14 decoder; do
    sum=$(echo "$metrics" | grep "^loom_serve_batch_size_sum{model=\"$model\"" | awk '{print $2}')
    count=$(echo "$metrics" | grep "^loom_serve_batch_size_count{model=\"$model\"" | awk '{print $2}')
    [ -n "$count" ] && [ "${sum%.*}" -gt "${count%.*}" ] && pass || fail "$repo $model: requests never shared a run ($sum rows in $count runs)"
  done
  if [ "$repo" = debian ]; then
    count=$(echo "$metrics" | grep '^loom_serve_batch_size_count{model="seq_first"' | awk '{print $2}')
    expect_eq "seq_first: eight requests, eight runs" 8 "${count%.*}"
  fi
  kill -TERM "$pid"
  wait "$pid"
done
finish
