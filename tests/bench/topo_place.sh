#!/usr/bin/env bash
# topo_place.sh — how long `loom-topo place` takes for 8 GPUs (the whole command: reading the
# hwloc XML, ring search, placement, output), against hwloc's own `lstopo` reading and writing
# the same XML in the same run. Prints both, and the ratio.
set -euo pipefail
T=${LOOM_TOPO:?set LOOM_TOPO}
F=${LOOM_FIXTURES:?set LOOM_FIXTURES}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v hyperfine >/dev/null || { echo "topo_place: hyperfine missing (apt-get install hyperfine)"; exit 1; }
for m in dgx1-v100 dgx-a100; do
  hyperfine -N --warmup 5 --runs 60 --export-json "$tmp/$m.json" \
    "$T --xml $F/$m.xml place --ntasks 8 --format json" \
    "lstopo --if xml -i $F/$m.xml --of xml -" >/dev/null
  python3 - "$tmp/$m.json" "$m" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
loom, peer = r[0]["median"] * 1e3, r[1]["median"] * 1e3
print(f"topo_place {sys.argv[2]}: loom-topo place 8 GPUs median {loom:.2f} ms; "
      f"peer lstopo XML read+write median {peer:.2f} ms; ratio {loom / peer:.2f}x; "
      f"target < 10 ms: {'met' if loom < 10 else 'MISSED'}")
PY
done
