#!/usr/bin/env bash
# onnx_quant_parity.sh — quantized ONNX as onnxruntime.quantization writes it, through the graph
# executor against ONNX Runtime: the MLP, BERT, GPT-2 block, nn.TransformerEncoderLayer and ResNet
# models of tests/parity/onnx_models.py (torch.onnx.export, opset 17; and a BERT 128 wide in QDQ, whose
# MatMuls run on the int8 GEMMs) quantized by quantize_dynamic
# (DynamicQuantizeLinear + MatMulInteger / ConvInteger; int8 and uint8 weights, per tensor and per
# channel), by quantize_static in the QDQ format, and (but the encoder, whose masked scores
# calibrate to an infinite range) in the QOperator format (QLinearConv, QLinearMatMul and ORT's
# QLinearAdd, QLinearMul, QGemm, QLinearSoftmax, the quantized pools; uint8, and int8 per
# channel); each output equal to ORT's within its own rounding (far below what quantization moved
# it from the float model).
. "$(dirname "$0")/../integration/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
require_onnx_graph
/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "python3-torch is needed to export the models"
peer_venv ortq onnxruntime onnx numpy sympy
cd "$LOOM_TMP" || exit 99

export_onnx_families mlp bert gpt2 encoder resnet bert_wide

# The quantized models, by ORT's own tools.
run_cmd "$peer/bin/python" - <<'PY'
import glob, os
import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
NP = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}
class Feeds(CalibrationDataReader):
    def __init__(self, fam):
        self.items = [{}]
        for spec in open(f"{fam}/inputs").read().split():
            name, dt, shape, path = spec.split(":")
            self.items[0][name] = np.fromfile(path, NP[dt]).reshape([int(x) for x in shape.split("x")])
    def get_next(self):
        return self.items.pop() if self.items else None
for fam in ("mlp", "bert", "gpt2", "encoder", "resnet"):
    f = f"{fam}/float.onnx"
    quantize_dynamic(f, f"{fam}/dyn_s8.onnx", weight_type=QuantType.QInt8)
    quantize_dynamic(f, f"{fam}/dyn_u8.onnx", weight_type=QuantType.QUInt8)
    quantize_dynamic(f, f"{fam}/dyn_s8_channel.onnx", weight_type=QuantType.QInt8, per_channel=True)
    quantize_static(f, f"{fam}/qdq.onnx", Feeds(fam), quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul", "Gemm", "Conv"])
    if fam == "encoder":  # its masked scores calibrate to an infinite range
        quantize_static(f, f"{fam}/infinite.onnx", Feeds(fam), quant_format=QuantFormat.QOperator)
    else:
        quantize_static(f, f"{fam}/qop_u8.onnx", Feeds(fam), quant_format=QuantFormat.QOperator)
        quantize_static(f, f"{fam}/qop_s8_channel.onnx", Feeds(fam), quant_format=QuantFormat.QOperator,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)
    print(fam, "quantized")
# A BERT wide enough for the int8 GEMMs to take its QDQ MatMuls, int8 and uint8 activations.
f = "bert_wide/float.onnx"
quantize_static(f, "bert_wide/qdq.onnx", Feeds("bert_wide"), quant_format=QuantFormat.QDQ)
quantize_static(f, "bert_wide/qdq_u8.onnx", Feeds("bert_wide"), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8)
PY
expect_eq "onnxruntime.quantization writes the models" 0 "$rc"
[ "$rc" = 0 ] || echo "$err" | tail -5

for model in */dyn_*.onnx */qdq*.onnx */qop_*.onnx */float.onnx; do
  fam=${model%%/*}
  out=${model%.onnx}
  mkdir -p "$out"
  # shellcheck disable=SC2046
  run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" "$model" "$out" $(cat "$fam/inputs")
  expect_eq "$model runs on Loom's executor" 0 "$rc"
  [ "$rc" = 0 ] || echo "$err" | tail -3
done

run_cmd "$peer/bin/python" - <<'PY'
import glob
import numpy as np
import onnxruntime as ort
NP = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}
def run(path, feeds):
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return s.get_outputs(), s.run(None, feeds)
for model in sorted(glob.glob("*/dyn_*.onnx") + glob.glob("*/qdq*.onnx") + glob.glob("*/qop_*.onnx")):
    fam = model.split("/")[0]
    feeds = {}
    for spec in open(f"{fam}/inputs").read().split():
        name, dt, shape, path = spec.split(":")
        feeds[name] = np.fromfile(path, NP[dt]).reshape([int(x) for x in shape.split("x")])
    outs, refs = run(model, feeds)
    _, floats = run(f"{fam}/float.onnx", feeds)
    for o, ref, flt in zip(outs, refs, floats):
        got = np.fromfile(model[:-5] + f"/{o.name}.bin", ref.dtype).reshape(ref.shape)
        scale = max(1e-6, float(np.max(np.abs(ref))))
        err, moved = float(np.max(np.abs(got - ref))) / scale, float(np.max(np.abs(flt - ref))) / scale
        # ORT's rounding: a value quantized one step apart where a float sum differs in its last bit
        # (a tie rounded the other way); a normalization after it spreads that over its row. At most
        # one row in 16 may hold such a step.
        off = np.abs(got.reshape(ref.shape) - ref) > 1e-4 * scale
        rows = off.reshape(-1, ref.shape[-1]).any(axis=1) if ref.ndim else off.reshape(1)
        same = err <= max(1e-4, 0.05 * moved) or (rows.sum() * 16 <= rows.size and err <= 0.5 * moved)
        note = f", {rows.sum()} of {rows.size} rows a rounding step apart" if same and rows.any() else ""
        print(f"{model} {o.name} {'same' if same else 'DIFFERENT'} {err:.1e} (quantization moved it {moved:.1e}{note})")
PY
[ "$rc" = 0 ] || echo "$err" | tail -5
echo "$out"
expect_eq "every quantized output compared (5 families x 4 quantizations, 4 x 2 QOperator, 2 wide QDQ)" 30 "$(echo "$out" | grep -E '^[a-z0-9_]+/' | cut -d' ' -f1 | sort -u | wc -l)"
expect_no_match "every output equals ONNX Runtime's within its rounding" "DIFFERENT" "$out"

# A scale that is not finite is refused at load, naming the node.
# shellcheck disable=SC2046
run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" encoder/infinite.onnx "$LOOM_TMP" $(cat encoder/inputs)
expect_eq "the encoder's QOperator model refused" 1 "$rc"
expect_match "its refusal names the QuantizeLinear" "QuantizeLinear '.*': a scale must be positive and finite" "$err"

# A dynamically quantized model is served one request at a time, the refusal naming the node.
# shellcheck disable=SC2046
run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" bert/dyn_s8.onnx bert/dyn_s8 $(cat bert/inputs)
expect_match "the rows pass names DynamicQuantizeLinear" "rows: DynamicQuantizeLinear .*its scale and zero point are computed over all the rows" "$err"
# Static QDQ models keep their rows apart: served batched.
for model in bert/qdq encoder/qdq gpt2/qdq resnet/qdq bert/qop_u8 gpt2/qop_s8_channel resnet/qop_u8 mlp/qop_s8_channel; do
  # shellcheck disable=SC2046
  run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" $model.onnx $model $(cat "${model%%/*}/inputs")
  expect_match "$model.onnx: rows proven independent" "rows: independent" "$err"
done
finish
