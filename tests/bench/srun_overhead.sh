#!/usr/bin/env bash
# srun_overhead.sh — launch overhead of spank_loom.so: `srun -n4 --overcommit --gpus=4 true` with the
# plugin loaded and --loom-bind=ring, against the same srun with no plugin loaded, measured
# alternately by hyperfine in one run on the local cluster. Prints both medians and the ratio
# (target <= 1.10).
set -euo pipefail
[ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ] || { echo "srun_overhead: skipped: no local cluster (export SLURM_CONF)"; exit 0; }
dir=$(dirname "$SLURM_CONF")
grep -q spank_loom.so "$dir/plugstack.conf" || { echo "srun_overhead: skipped: spank_loom.so not in $dir/plugstack.conf"; exit 0; }
tmp=$(mktemp -d)
cp "$dir/plugstack.conf" "$tmp/with.conf"
echo "# no plugins" >"$tmp/without.conf"
trap 'cp "$tmp/with.conf" "$dir/plugstack.conf"; rm -rf "$tmp"' EXIT
runs=${RUNS:-30}
hyperfine -N --warmup 3 --runs "$runs" --export-json "$tmp/r.json" \
  --prepare "cp $tmp/with.conf $dir/plugstack.conf" "srun -n4 --overcommit --gpus=4 --loom-bind=ring true" \
  --prepare "cp $tmp/without.conf $dir/plugstack.conf" "srun -n4 --overcommit --gpus=4 true" >/dev/null
python3 - "$tmp/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
loom, peer = r[0]["median"] * 1e3, r[1]["median"] * 1e3
ratio = loom / peer
print(f"srun_overhead: srun -n4 with spank_loom --loom-bind=ring median {loom:.1f} ms; "
      f"peer: same srun without the plugin median {peer:.1f} ms; ratio {ratio:.3f} "
      f"(target <= 1.10: {'met' if ratio <= 1.10 else 'MISSED'})")
PY
