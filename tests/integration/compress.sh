#!/usr/bin/env bash
# compress.sh — loom-compress end to end on Fashion-MNIST: pruning shrinks widths, parameters
# and the file; INT8 files are a third of the size and keep their accuracy; QAT's export is the
# model it evaluated; distillation writes the student; every bad input gives one error and
# writes nothing; loom-serve answers with the INT8 model and says its precision.
. "$(dirname "$0")/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
B=$LOOM_BUILDDIR
[ -x "$B/loom-compress" ] || skip "loom-compress not built"
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
cd "$LOOM_TMP"
json() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print(d$1)"; }
check() { /usr/bin/python3 -c "import json,sys; d=json.load(sys.stdin); print('yes' if $1 else 'no: %s' % d)"; }

# The training options are loom-train's own table (one place): each reads as loom-train's --help
# says it, default included.
help_of() {  # option -> its description and default, whitespace collapsed
  /usr/bin/python3 -c '
import re, sys
opts, name = {}, None
for line in sys.stdin:
    m = re.match(r"  (?:-\w \[ )?--([\w-]+)( \])?(.*)", line)
    if m:
        name = m.group(1)
        opts[name] = m.group(3)
    elif name and line.startswith("    "):
        opts[name] += " " + line
for k in sys.argv[1:]:
    print(k, " ".join(opts.get(k, "MISSING").split()))' "$@"
}
train_opts="data global-batch lr optimizer momentum lr-schedule seed threads ckpt-dir ckpt-every resume tensorboard"
expect_eq "loom-compress distill's training options are loom-train's" \
  "$("$B/loom-train" --help | help_of $train_opts)" "$("$B/loom-compress" distill --help | help_of $train_opts)"

run_cmd "$B/loom-train" --layers 784,64,64,10 --epochs 2 --seed 4 --export fp32.h5 --log-every 1000
expect_eq "train the float model" 0 "$rc"
fp=$("$B/loom-compress" eval fp32.h5 --format json)
fp_acc=$(echo "$fp" | json '["test_accuracy"]'); fp_bytes=$(echo "$fp" | json '["file_bytes"]')
fp_params=$(echo "$fp" | json '["params"]')

# Pruning: 30% of each hidden layer's neurons, physically removed.
run_cmd "$B/loom-compress" prune fp32.h5 -o pruned.h5 --sparsity 0.3
expect_eq "prune" 0 "$rc"
pr=$("$B/loom-compress" eval pruned.h5 --format json)
expect_eq "pruned widths" "784,45,45,10" "$(echo "$pr" | json '["layers"]')"
expect_eq "params shrink" yes "$(echo "$pr" | check "d['params'] < 0.72 * $fp_params")"
expect_eq "file shrinks" yes "$(echo "$pr" | check "d['file_bytes'] < 0.8 * $fp_bytes")"
expect_match "the table says before and after" "params +$fp_params" "$out"

# INT8: about a quarter of the size (HDF5's overhead weighs more on this small model than on
# 784-512-512-10, where it is 0.26x), accuracy within half a point.
run_cmd "$B/loom-compress" quantize fp32.h5 -o int8.h5 --calib-samples 1000
expect_eq "quantize" 0 "$rc"
q=$("$B/loom-compress" eval int8.h5 --format json)
expect_eq "int8 precision" "int8" "$(echo "$q" | json '["precision"]')"
expect_eq "int8 weights" "int8" "$(echo "$q" | json '["weights_dtype"]')"
expect_eq "int8 file <= 0.35x" yes "$(echo "$q" | check "d['file_bytes'] <= 0.35 * $fp_bytes")"
expect_eq "int8 accuracy within 0.5 pt" yes "$(echo "$q" | check "abs(d['test_accuracy'] - $fp_acc) <= 0.005")"
for obs in percentile entropy; do
  run_cmd "$B/loom-compress" quantize fp32.h5 -o "int8-$obs.h5" --observer "$obs" --calib-samples 500
  expect_eq "quantize --observer $obs" 0 "$rc"
done
run_cmd "$B/loom-compress" quantize pruned.h5 -o pruned-int8.h5 --weights-only
expect_eq "weights-only of the pruned model" "int8-weights" "$("$B/loom-compress" eval pruned-int8.h5 --format json | json '["precision"]')"

# QAT: the INT8 export computes what the fake-quantized model evaluated.
run_cmd "$B/loom-train" --qat --init fp32.h5 --steps 100 --lr 0.01 --export qat.h5 --log-every 1000
expect_eq "loom-train --qat" 0 "$rc"
qat_acc=$(echo "$out$err" | grep -oE "done: .*test accuracy [0-9.]+" | grep -oE "[0-9.]+$")
expect_eq "QAT export is INT8" "int8" "$("$B/loom-compress" eval qat.h5 --format json | json '["precision"]')"
expect_eq "QAT export's accuracy is the accuracy QAT evaluated ($qat_acc)" yes \
  "$("$B/loom-compress" eval qat.h5 --format json | check "abs(d['test_accuracy'] - ${qat_acc:-9}) <= 0.002")"

# Distillation: a 784-32-10 student of a 784-512-512-10 teacher beats the same student trained
# alone (same seed, same schedule).
run_cmd "$B/loom-compress" distill --teacher fp32.h5 --student-layers 784,16,10 -o student.h5 --steps-note 2>/dev/null
expect_eq "unknown option is a usage error" 2 "$rc"
run_cmd "$B/loom-train" --layers 784,512,512,10 --epochs 5 --lr 0.1 --lr-schedule cosine --threads 2 --export teacher.h5 \
  --log-every 100000
expect_eq "train the teacher" 0 "$rc"
run_cmd "$B/loom-compress" distill --teacher teacher.h5 --student-layers 784,32,10 -o student.h5 --epochs 3 --lr 0.1 \
  --lr-schedule cosine --threads 2 --compare --tensorboard tb
expect_eq "distill --compare" 0 "$rc"
expect_eq "distill --compare --tensorboard: an event file for each training (distilled, alone)" 2 "$(ls tb | grep -c '^events\.out\.tfevents\.')"
expect_eq "student widths" "784,32,10" "$("$B/loom-compress" eval student.h5 --format json | json '["layers"]')"
distilled=$(echo "$out" | grep "(distilled" | grep -oE "accuracy [0-9.]+" | cut -d' ' -f2)
alone=$(echo "$out" | grep "(trained alone" | grep -oE "accuracy [0-9.]+" | cut -d' ' -f2)
expect_eq "distilled student ($distilled) beats the student alone ($alone)" yes \
  "$(/usr/bin/python3 -c "print('yes' if ${distilled:-0} > ${alone:-1} else 'no')")"

# Bad inputs: one line on stderr, the exit status, nothing written.
refused "prune an INT8 file" 1 "int8 model; prune takes the float model" "$B/loom-compress" prune int8.h5 -o out.h5 --sparsity 0.3
refused "prune a pruned file" 1 "pruned already" "$B/loom-compress" prune pruned.h5 -o out.h5 --sparsity 0.3
refused "sparsity 0" 2 "sparsity must be in \(0, 1\)" "$B/loom-compress" prune fp32.h5 -o out.h5 --sparsity 0
refused "sparsity 1.5" 2 "sparsity must be in \(0, 1\)" "$B/loom-compress" prune fp32.h5 -o out.h5 --sparsity 1.5
refused "quantize an INT8 file" 1 "int8 model; quantize takes the float model" "$B/loom-compress" quantize int8.h5 -o out.h5
head -c 4096 /dev/urandom > junk.h5
refused "not a Loom file" 1 "junk.h5: not an HDF5 file" "$B/loom-compress" quantize junk.h5 -o out.h5
refused "unknown observer" 2 "observer must be minmax, percentile or entropy" "$B/loom-compress" quantize fp32.h5 -o out.h5 --observer kl
refused "convert .onnx to .h5" 1 "onnx -> .h5 is not supported" "$B/loom-compress" convert x.onnx out.h5
refused "convert to .txt" 2 "convert goes .h5 -> .onnx" "$B/loom-compress" convert fp32.h5 out.txt
refused "convert a file that is not Loom's" 1 "junk.h5: not an HDF5 file" "$B/loom-compress" convert junk.h5 out.onnx
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  # mlp_file FILE W0,W1,W2: a float Loom MLP file written by h5py, every weight 0.01.
  mlp_file() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import h5py, json, sys, numpy as np
w = [int(x) for x in sys.argv[2].split(",")]
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["loom.format"] = "model"
    f.attrs["loom.version"] = np.int32(1)
    f.attrs["model.config"] = json.dumps({"type": "mlp", "layers": w, "activation": "relu"})
    for i in range(len(w) - 1):
        f.create_dataset(f"params/fc{i + 1}.weight", data=np.full((w[i + 1], w[i]), 0.01, np.float32))
        f.create_dataset(f"params/fc{i + 1}.bias", data=np.full((w[i + 1],), 0.01, np.float32))
PY
  }
  mlp_file narrow.h5 100,8,10
  refused "calibration data of the wrong width" 1 "takes 100 inputs, the data has 784" "$B/loom-compress" quantize narrow.h5 -o out.h5
  mlp_file five.h5 784,8,5
  refused "teacher of another output width" 1 "teacher five.h5 maps 784 inputs to 5 outputs but the student maps 784 to 10" \
    "$B/loom-compress" distill --teacher five.h5 --student-layers 784,16,10 -o out.h5
fi

# ONNX export: the float model as Gemm/Relu, the INT8 one as QDQ, loom-train's own export;
# ONNX's checker (python3-onnx) accepts each, and loom-serve answers from them as from the HDF5.
onnx_built=0
[ -x "$B/tests/parity/onnx_run" ] && onnx_built=1
mkdir -p repo/fp/1 repo/q/1 repo/fpo/1 repo/qo/1 repo/to/1
if [ $onnx_built = 1 ]; then
  run_cmd "$B/loom-compress" convert fp32.h5 repo/fpo/1/model.onnx
  expect_eq "convert the float model" 0 "$rc"
  run_cmd "$B/loom-compress" convert int8.h5 repo/qo/1/model.onnx
  expect_eq "convert the INT8 model" 0 "$rc"
  run_cmd "$B/loom-train" --layers 784,16,10 --steps 5 --global-batch 64 --export repo/to/1/model.onnx --log-every 1000
  expect_eq "loom-train --export FILE.onnx" 0 "$rc"
  echo "hello" > t.txt
  refused "loom-train --export .onnx of a gpt" 2 "only mlp models export to ONNX" "$B/loom-train" --model gpt --data text:t.txt --export g.onnx
  if /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
    ops=$(/usr/bin/python3 - repo/fpo/1/model.onnx repo/qo/1/model.onnx repo/to/1/model.onnx <<'PY'
import collections, onnx, sys
for p in sys.argv[1:]:
    m = onnx.load(p)
    onnx.checker.check_model(m, full_check=True)
    print(p.split("/")[1], m.opset_import[0].version, m.graph.input[0].type.tensor_type.elem_type,
          ",".join(sorted(collections.Counter(n.op_type for n in m.graph.node))))
PY
    )
    expect_match "the checker accepts the float export: Gemm/Relu, UINT8 pixels in" "fpo 13 2 Add,Cast,Gemm,Mul,Relu" "$ops"
    expect_match "the checker accepts the INT8 export: QDQ" "qo 13 2 Add,Cast,Clip,DequantizeLinear,Gemm,Mul,QuantizeLinear,Relu" "$ops"
    expect_match "the checker accepts loom-train's export" "to 13 2" "$ops"
  fi
fi

# loom-serve serves the INT8 file with the INT8 kernels and says so.
cp fp32.h5 repo/fp/1/model.h5
cp int8.h5 repo/q/1/model.h5
serve_start serve --model-repository repo --grpc-port 0
[ -n "$http" ] && pass || fail "loom-serve did not start: $(cat serve.log)"
expect_match "metadata says int8" '"parameters":\{"precision":"int8"\}' "$(curl -s "$http/v2/models/q")"
expect_match "metadata says fp32" '"parameters":\{"precision":"fp32"\}' "$(curl -s "$http/v2/models/fp")"
/usr/bin/python3 - > req.json <<'PY'
import gzip, json, numpy as np
with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)[:8]
print(json.dumps({"inputs": [{"name": "input", "shape": [8, 784], "datatype": "UINT8", "data": x.flatten().tolist()}]}))
PY
a=$(curl -s -d @req.json "$http/v2/models/fp/infer"); b=$(curl -s -d @req.json "$http/v2/models/q/infer")
verdict=$(/usr/bin/python3 -c "
import json, sys, numpy as np
a = np.array(json.loads(sys.argv[1])['outputs'][0]['data']).reshape(8, 10)
b = np.array(json.loads(sys.argv[2])['outputs'][0]['data']).reshape(8, 10)
print('same' if (a.argmax(1) == b.argmax(1)).sum() >= 7 and np.abs(a - b).max() < 0.1 * np.abs(a).max() + 0.1 else 'differ %s' % np.abs(a - b).max())
" "$a" "$b" 2>&1)
expect_eq "INT8 logits near the float model's" "same" "$verdict"
if [ $onnx_built = 1 ]; then
  c=$(curl -s -d @req.json "$http/v2/models/fpo/infer"); d=$(curl -s -d @req.json "$http/v2/models/qo/infer")
  verdict=$(/usr/bin/python3 -c "
import json, sys, numpy as np
o = [np.array(json.loads(t)['outputs'][0]['data']).reshape(8, 10) for t in sys.argv[1:]]
fp, q, fpo, qo = o
print('fp', 'same' if np.abs(fp - fpo).max() <= 1e-4 * np.abs(fp).max() else 'differ %g' % np.abs(fp - fpo).max(),
      'int8', 'same' if (q.argmax(1) == qo.argmax(1)).all() and np.abs(q - qo).max() <= 0.02 * np.abs(q).max() else 'differ %g' % np.abs(q - qo).max())
" "$a" "$b" "$c" "$d" 2>&1)
  expect_eq "the ONNX exports answer as the HDF5 models (float 1e-4, INT8 same classes)" "fp same int8 same" "$verdict"
  expect_match "the ONNX model's metadata: UINT8 pixels in" '"inputs":\[\{"datatype":"UINT8","name":"input","shape":\[-1,784\]\}\]' "$(curl -s "$http/v2/models/fpo")"
fi
expect_match "metrics say the precision" 'loom_serve_model_info\{model="q",version="1",precision="int8"\} 1' "$(curl -s "$http/metrics")"
kill "$pid"; wait "$pid" 2>/dev/null
finish
