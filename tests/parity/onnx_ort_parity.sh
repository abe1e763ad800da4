#!/usr/bin/env bash
# onnx_ort_parity.sh — the graph executor against ONNX Runtime: every model of
# tests/parity/onnx_models.py, exported by torch.onnx.export at opsets 13 and 17, run on the same
# inputs by Loom's executor (tests/parity/onnx_run) and by ONNX Runtime (PyPI, a peer in a virtual
# environment, never a dependency of Loom), output for output within 1e-4 relative error.
. "$(dirname "$0")/../integration/lib.sh"
[ "${LOOM_DISTCHECK:-0}" = 1 ] && skip "LOOM_DISTCHECK=1: ran in make check of the same sources (contrib/check.sh)"
require_onnx_graph
/usr/bin/python3 -c 'import torch' 2>/dev/null || skip "python3-torch is needed to export the models"
peer_venv ort onnxruntime numpy
cd "$LOOM_TMP" || exit 99

# The models and their inputs (raw little-endian files), with Debian's PyTorch.
/usr/bin/python3 - "$LOOM_SRCDIR/tests/parity" <<'PY' 2>exporter.log || { cat exporter.log; exit 99; }
import os, sys
sys.path.insert(0, sys.argv[1])
import onnx_models as om
for fam in ("mlp", "resnet", "bert", "gpt2", "encoder"):
    for opset in (13, 17):
        name = f"{fam}-{opset}"
        os.makedirs(name, exist_ok=True)
        om.export(fam, f"{name}/model.onnx", opset)
        om.write_inputs(fam, name)
PY

for dir in */; do
  name=${dir%/}
  [ -f "$name/inputs" ] || continue
  mkdir -p "$name/loom"
  # shellcheck disable=SC2046
  run_cmd "$LOOM_BUILDDIR/tests/parity/onnx_run" "$name/model.onnx" "$name/loom" $(cat "$name/inputs")
  expect_eq "$name runs on Loom's executor" 0 "$rc"
  [ "$rc" = 0 ] || echo "$err"
done

run_cmd "$peer/bin/python" - <<'PY'
import glob, os
import numpy as np
import onnxruntime as ort
NP = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}
worst = {}
for d in sorted(glob.glob("*-1[37]")):
    s = ort.InferenceSession(f"{d}/model.onnx", providers=["CPUExecutionProvider"])
    feeds = {}
    for spec in open(f"{d}/inputs").read().split():
        name, dt, shape, path = spec.split(":")
        feeds[name] = np.fromfile(path, NP[dt]).reshape([int(x) for x in shape.split("x")])
    for o, ref in zip(s.get_outputs(), s.run(None, feeds)):
        got = np.fromfile(f"{d}/loom/{o.name}.bin", ref.dtype).reshape(ref.shape)
        err = float(np.max(np.abs(got - ref)) / max(1e-6, float(np.max(np.abs(ref)))))
        worst[d] = max(worst.get(d, 0.0), err)
        print(f"{d} {o.name} {'same' if err <= 1e-4 else 'DIFFERENT'} {err:.1e}")
print("onnx_ort_parity: ONNX Runtime", ort.__version__, "worst relative error per model:",
      ", ".join(f"{k} {v:.1e}" for k, v in sorted(worst.items())))
PY
[ "$rc" = 0 ] || echo "$err"
echo "$out" | tail -n 1
expect_eq "every output compared (5 families x 2 opsets)" 10 "$(echo "$out" | grep -E '^[a-z0-9]+-1[37] ' | cut -d' ' -f1 | sort -u | wc -l)"
expect_no_match "every output equals ONNX Runtime's within 1e-4" "DIFFERENT" "$out"
finish
