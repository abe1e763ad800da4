#!/usr/bin/env bash
# mlp_parity.sh — runs tests/parity/mlp_parity.py with Debian's Python (PyTorch, h5py).
. "$(dirname "$0")/../integration/lib.sh"
/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch and python3-h5py are needed"
[ -x "$LOOM_BUILDDIR/loom-train" ] || skip "loom-train not built"
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
if /usr/bin/python3 "$LOOM_SRCDIR/tests/parity/mlp_parity.py" "$LOOM_BUILDDIR/loom-train" \
     "$LOOM_BUILDDIR/tests/parity/parity_tool" "$LOOM_TMP/work"; then pass; else fail "PyTorch parity"; fi
h5dump -H "$LOOM_TMP/work/model.h5" >/dev/null 2>&1 && pass || fail "h5dump cannot read the exported model"
finish
