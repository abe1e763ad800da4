#!/usr/bin/env bash
# quant_parity.sh — runs tests/parity/quant_parity.py with Debian's Python (PyTorch, h5py).
. "$(dirname "$0")/../integration/lib.sh"
/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch and python3-h5py are needed"
[ -x "$LOOM_BUILDDIR/loom-compress" ] || skip "loom-compress not built"
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || skip "dataset-fashion-mnist not installed"
if /usr/bin/python3 "$LOOM_SRCDIR/tests/parity/quant_parity.py" "$LOOM_BUILDDIR/loom-train" \
     "$LOOM_BUILDDIR/loom-compress" "$LOOM_TMP/work"; then pass; else fail "INT8 and pruning parity with PyTorch"; fi
h5dump -H "$LOOM_TMP/work/int8.h5" >/dev/null 2>&1 && pass || fail "h5dump cannot read the INT8 model"
finish
