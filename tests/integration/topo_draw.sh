#!/usr/bin/env bash
# topo_draw.sh — loom-topo draw: every topology fixture (hwloc XML, nvidia-smi text) as SVG, alone
# and with a placement over it: well-formed XML naming every GPU and NIC, each task's colour on
# its GPU, the ring's order; rendered by headless Chromium into a picture that is not blank. A name
# in a topology file is text in the picture, never markup; bad requests are refused.
. "$(dirname "$0")/lib.sh"
T=$LOOM_BUILDDIR/loom-topo
[ -x "$T" ] || skip "loom-topo not built"
F=$LOOM_SRCDIR/tests/fixtures/topology
cd "$LOOM_TMP" || exit 99
chrome=$(command -v chromium || command -v chromium-browser || true)
render() {  # SVG PNG: Chromium's picture of it, at least 10 KB (a blank page is about 3)
  [ -n "$chrome" ] || return 0
  timeout 60 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1000 \
    --screenshot="$PWD/$2" "file://$PWD/$1" >/dev/null 2>&1
  [ "$(stat -c %s "$2" 2>/dev/null || echo 0)" -gt 10000 ] && pass || fail "Chromium's picture of $1 is missing or blank"
}
[ -n "$chrome" ] || echo "SKIP (part): no chromium: the SVGs are checked as XML only"
for f in "$F"/*.xml "$F"/*.nvsmi.txt; do
  name=$(basename "$f")
  run_cmd "$T" --topology "$f" draw
  expect_eq "draw $name" 0 "$rc"
  printf '%s' "$out" >"$name.svg"
  gpus=$("$T" --topology "$f" show --format json | /usr/bin/python3 -c 'import json, sys; t = json.load(sys.stdin); print(len(t["gpus"]), len(t["nics"]))')
  run_cmd /usr/bin/python3 - "$name.svg" $gpus <<'PY'
import sys, xml.etree.ElementTree as E
ns = "{http://www.w3.org/2000/svg}"
texts = [t.text or "" for t in E.parse(sys.argv[1]).iter(ns + "text")]
gpus = sum(t.startswith("GPU ") for t in texts)
nics = sum(t.startswith("NIC ") for t in texts)
assert (gpus, nics) == (int(sys.argv[2]), int(sys.argv[3])), (gpus, nics, sys.argv[2:])
PY
  expect_eq "draw $name: well-formed SVG with every GPU and NIC ($err)" 0 "$rc"
  render "$name.svg" "$name.png"
  [ "${gpus%% *}" -gt 0 ] || continue
  n=${gpus%% *}
  run_cmd "$T" --topology "$f" draw --ntasks "$n" --oversubscribe
  expect_eq "draw --ntasks $n $name" 0 "$rc"
  expect_match "draw --ntasks $n $name: the tasks and the ring" "$n tasks \\(mode ring\\); ring order: GPU [0-9]" "$out"
  expect_match "draw --ntasks $n $name: task 0 in its colour" 'fill="#1f77b4"' "$out"
  printf '%s' "$out" >"$name.placed.svg"
  render "$name.placed.svg" "$name.placed.png"
done
# A name in a topology file is text, not markup.
"$T" --topology "$F/dgx-a100.xml" export --as json | /usr/bin/python3 -c '
import json, sys
t = json.load(sys.stdin)
t["gpus"][0]["name"] = t["gpus"][0]["class"] = "<script>alert(1)</script>"
t["host"] = "h\"><svg onload=x>"
json.dump(t, open("evil.json", "w"))'
run_cmd "$T" --topology evil.json draw --ntasks 2
expect_eq "draw of a topology with markup in its names" 0 "$rc"
expect_no_match "no markup from a name reaches the SVG" "<script|<svg onload" "$out"
expect_match "the name is there as text" "&lt;script&gt;" "$out"
run_cmd "$T" --topology "$F/cpu-only.xml" draw --ntasks 2
expect_ne "draw --ntasks on a node without GPUs (mode ring)" 0 "$rc"
expect_match "draw --ntasks: place's reason" "no GPUs to place tasks on" "$err"
run_cmd "$T" --topology "$F/dgx-a100.xml" draw --ntasks x
expect_eq "draw --ntasks x: a usage error" 2 "$rc"
finish
