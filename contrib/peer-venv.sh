#!/usr/bin/env bash
# peer-venv.sh — a virtual environment of test and benchmark peers from PyPI (Triton's client,
# KServe, ONNX Runtime, ...), never a dependency of Loom itself: made once with Debian's python3
# under $LOOM_PEER_VENVS/NAME (default: $LOOM_BUILDDIR/peers/NAME) and reused while the package
# list is the same. LOOM_PEER_SYSTEM_SITE=1: the environment sees Debian's packages too (a peer
# that runs beside Debian's PyTorch).
# Usage: contrib/peer-venv.sh NAME PACKAGE...   prints the environment's folder; exits 1 saying why
# when it cannot be made (no python3-venv, PyPI out of reach).
set -uo pipefail
name=$1
shift
peer=${LOOM_PEER_VENVS:-${LOOM_BUILDDIR:-.}/peers}/$name
mkdir -p "$(dirname "$peer")"
exec 9>"$peer.lock"  # tests run in parallel (make -j check) make it once, not over each other
flock 9
site=()
[ "${LOOM_PEER_SYSTEM_SITE:-0}" = 1 ] && site=(--system-site-packages)
if [ "$(cat "$peer/.complete" 2>/dev/null)" != "${site[*]} $*" ]; then  # made, with these packages
  rm -rf "$peer"
  mkdir -p "$(dirname "$peer")"
  /usr/bin/python3 -m venv "${site[@]}" "$peer" >/dev/null 2>&1 || { echo "python3 -m venv failed (python3-venv is needed)" >&2; exit 1; }
  if ! "$peer/bin/pip" install -q --disable-pip-version-check "$@" >"$peer/pip.log" 2>&1; then
    echo "pip install $* failed (no PyPI here?): $(tail -n 2 "$peer/pip.log" | tr '\n' ' ')" >&2
    exit 1
  fi
  echo "${site[*]} $*" >"$peer/.complete"
fi
echo "$peer"
