#!/usr/bin/env bash
# gpt_parity.sh — runs tests/parity/gpt_parity.py with Debian's Python (PyTorch, h5py).
. "$(dirname "$0")/../integration/lib.sh"
/usr/bin/python3 -c 'import torch, h5py' 2>/dev/null || skip "python3-torch and python3-h5py are needed"
[ -x "$LOOM_BUILDDIR/loom-train" ] || skip "loom-train not built"
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || skip "$text missing"
if /usr/bin/python3 "$LOOM_SRCDIR/tests/parity/gpt_parity.py" "$LOOM_BUILDDIR/loom-train" \
     "$LOOM_BUILDDIR/tests/parity/parity_tool" "$text" "$LOOM_TMP/work"; then pass; else fail "PyTorch parity"; fi
finish
