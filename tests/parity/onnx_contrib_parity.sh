#!/usr/bin/env bash
# onnx_contrib_parity.sh — models with ONNX Runtime's own operators (com.microsoft), through the
# graph executor against ONNX Runtime: the BERT, GPT-2 block and nn.TransformerEncoderLayer models
# of tests/parity/onnx_models.py (torch.onnx.export, opset 17) rewritten by ORT's transformer
# optimizer (EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu, FastGelu), and a
# model per operator and variant (masks of each kind, causal, attention bias, present state,
# MultiHeadAttention, the skip norms, the GELUs, FusedMatMul), each output equal to ORT's; the
# optimized BERT served to concurrent clients, batched; what is not run refused by name.
. "$(dirname "$0")/../integration/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
require_onnx_serve
/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "python3-torch is needed to export the models"
peer_venv ortq onnxruntime onnx numpy sympy
cd "$LOOM_TMP" || exit 99

export_onnx_families bert gpt2 encoder
run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/parity/onnx_contrib.py" make .
expect_eq "ORT's optimizer and the operator models" 0 "$rc"
[ "$rc" = 0 ] || { echo "$err" | tail -5; finish; }
echo "$out"
expect_match "ORT's optimizer fused BERT into its own operators" \
  "bert/ortopt.onnx: ORT's optimizer wrote Attention x2, BiasGelu x2, EmbedLayerNormalization x1, SkipLayerNormalization x4" "$out"

for dir in bert gpt2 encoder cases/*; do
  model=$dir/model.onnx
  [ -f "$dir/ortopt.onnx" ] && model=$dir/ortopt.onnx
  mkdir -p "$dir/loom"
  # shellcheck disable=SC2046
  run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" "$model" "$dir/loom" $(cat "$dir/inputs")
  expect_eq "$model runs on Loom's executor" 0 "$rc"
  [ "$rc" = 0 ] || echo "$err" | tail -3
  case $dir in
    bert | gpt2 | encoder | cases/attention | cases/attention-raw-mask | cases/mha-padding | cases/embed | cases/skip-norm)
      expect_match "$model: rows proven independent" "rows: independent" "$err" ;;
  esac
done

run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/parity/onnx_contrib.py" compare .
echo "$out"
[ "$rc" = 0 ] || echo "$err" | tail -5
expect_eq "every output compared (3 optimized models, $(ls cases | wc -l) operator models)" \
  "$(($(ls cases | wc -l) + 3))" "$(echo "$out" | cut -d: -f1 | sort -u | wc -l)"
expect_no_match "every output equals ONNX Runtime's" "DIFFERENT" "$out"
expect_eq "compare ran clean" 0 "$rc"

# What the executor does not run, refused naming it.
refused() {  # NAME EXPECTED
  # shellcheck disable=SC2046
  run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" "bad/$1/model.onnx" "$LOOM_TMP" $(cat "bad/$1/inputs")
  expect_eq "bad/$1 refused" 1 "$rc"
  expect_match "bad/$1: $2" "$2" "$err"
}
refused unknown-op "operator com.microsoft:Inverse .node 'unknown-op'. is not supported"
refused past-state "Attention 'past-state': a past state .input 4. is not supported"
refused int64-mask "mask_index typestr: M, has unsupported type: tensor.int64."
refused id-outside "EmbedLayerNormalization 'id-outside': input id 99 is outside its table of 30"

run_cmd "$peer/bin/python" "$LOOM_SRCDIR/tests/parity/onnx_contrib.py" serve . "$LOOM_BUILDDIR/loom-serve"
echo "$out"
[ "$rc" = 0 ] || { echo "$err" | tail -5; tail -5 serve.log; }
expect_eq "ORT's optimized BERT served to 12 clients, batched, each answer ORT's" 0 "$rc"
finish
