#!/usr/bin/env bash
# topo_golden.sh — loom-topo's output on every fixture machine, compared with the expected
# files in tests/fixtures/topology/golden. LOOM_REGEN_GOLDEN=1 rewrites them (review the diff).
. "$(dirname "$0")/lib.sh"
T=$LOOM_TOPO
F=$LOOM_FIXTURES
G=$F/golden

cases() {  # NAME | ARGS...
  local m
  for m in dgx1-v100 dgx-a100 mixed-a100-v100 cpu-only local-mixed local-a100 local-v100; do
    echo "$m.show|--xml $F/$m.xml show"
    echo "$m.export|--xml $F/$m.xml export"
    echo "$m.gres|--xml $F/$m.xml gres"
    echo "$m.node-conf|--xml $F/$m.xml node-conf"
    echo "$m.nccl-xml|--xml $F/$m.xml nccl-xml"
    echo "$m.place-2|--xml $F/$m.xml place --ntasks 2 --format json"
    echo "$m.place-numa|--xml $F/$m.xml place --ntasks 2 --mode numa"
  done
  for m in dgx1-v100 dgx-a100; do
    echo "$m.place-4|--xml $F/$m.xml place --ntasks 4"
    echo "$m.place-8|--xml $F/$m.xml place --ntasks 8 --format json"
    echo "$m.place-gpu|--xml $F/$m.xml place --ntasks 4 --mode gpu --cpus 0-7,64-71"
  done
  for m in dgx1-v100 dgx-a100 mixed-a100-v100; do
    echo "$m.nvsmi.show|--nvidia-smi $F/$m.nvsmi.txt --host node01 show"
    echo "$m.nvsmi.gres|--nvidia-smi $F/$m.nvsmi.txt --host node01 gres"
    echo "$m.nvsmi.node-conf|--nvidia-smi $F/$m.nvsmi.txt --host node01 node-conf --format json"
    echo "$m.nvsmi.place-4|--nvidia-smi $F/$m.nvsmi.txt --host node01 place --ntasks 4 --format json"
  done
}

regen=${LOOM_REGEN_GOLDEN:-0}
[ "$regen" = 1 ] && mkdir -p "$G"
while IFS='|' read -r name args; do
  # shellcheck disable=SC2086
  actual=$(cd "$F" && "$T" $args 2>&1; echo "--- exit $?")
  actual=${actual//$F\//}
  if [ "$regen" = 1 ]; then
    printf '%s\n' "$actual" >"$G/$name"
    pass
  elif [ ! -f "$G/$name" ]; then
    fail "$name: no golden file (run with LOOM_REGEN_GOLDEN=1)"
  elif [ "$(cat "$G/$name")" == "$actual" ]; then
    pass
  else
    fail "$name differs from golden:"
    diff <(cat "$G/$name") <(printf '%s\n' "$actual") | head -20 >&2
  fi
done < <(cases)
# gres.conf Cores= are Slurm's core ids whichever input they come from: nvidia-smi's CPU
# affinities (OS CPU ids, hyperthread siblings included) give the same cores as hwloc's XML.
for m in dgx1-v100 dgx-a100 mixed-a100-v100; do
  a=$("$T" --nvidia-smi "$F/$m.nvsmi.txt" gres 2>/dev/null | grep -oE 'nvidia[0-9]+ Cores=[^ ]+')
  b=$("$T" --xml "$F/$m.xml" gres 2>/dev/null | grep -oE 'nvidia[0-9]+ Cores=[^ ]+')
  expect_eq "$m: Cores= from nvidia-smi text equal those from hwloc XML" "$b" "$a"
done
finish
