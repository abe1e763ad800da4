#!/usr/bin/env bash
# plugin_cluster.sh — spank_loom.so loaded by the real local cluster (check.sh starts it with the
# mixed 2 A100 + 2 V100 topology on CPUs 0 and 1): srun, sbatch and salloc placement, the task
# environment and affinity, bad options, corrupt topologies with strict=0 and strict=1, and
# the daemons still up afterwards.
. "$(dirname "$0")/lib.sh"
require_cluster
dir=$(dirname "$SLURM_CONF")
grep -q spank_loom.so "$dir/plugstack.conf" || skip "the cluster was started before spank_loom.so was built"
host=$(hostname -s)
cp "$dir/plugstack.conf" "$LOOM_TMP/plugstack.orig"
trap 'cp "$LOOM_TMP/plugstack.orig" "$dir/plugstack.conf"; rm -rf "$LOOM_TMP"' EXIT
plugin=$(awk '/spank_loom.so/ {print $2}' "$LOOM_TMP/plugstack.orig")
set_plugstack() { echo "optional $plugin $*" >"$dir/plugstack.conf"; }

report='echo "rank=$SLURM_PROCID gpu=$LOOM_GPU class=$LOOM_GPU_CLASS cvd=$CUDA_VISIBLE_DEVICES nic=$LOOM_NIC ucx=$UCX_NET_DEVICES hca=$NCCL_IB_HCA cpus=$LOOM_CPUS allowed=$(grep Cpus_allowed_list /proc/self/status | cut -f2) omp=$OMP_NUM_THREADS ring=$LOOM_RING weight=$LOOM_DEVICE_WEIGHT memory=$LOOM_DEVICE_MEMORY bind=$LOOM_BIND topo=$LOOM_TOPOLOGY nccl=$NCCL_TOPO_FILE"'

# Options are registered for srun, sbatch and salloc.
for cmd in srun sbatch salloc; do
  expect_match "$cmd --help lists --loom-bind" "--loom-bind=MODE" "$($cmd --help 2>&1)"
done
run_cmd srun --loom-bind=help true
expect_eq "--loom-bind=help exit" 0 "$rc"
expect_match "--loom-bind=help text" "ring .*fastest GPU ring" "$err"

# srun -n4 on the mixed node: distinct GPUs, own GPU first, class, NIC and CPUs near the GPU.
run_cmd timeout 60 srun -n4 --overcommit -c2 --gpus=4 --loom-bind=ring --loom-verbose bash -c "$report"
expect_eq "srun ring exit" 0 "$rc"
printf '%s\n' "$out" >"$LOOM_TMP/ring.out"
expect_eq "four distinct GPUs" "0 1 2 3" "$(sed -n 's/.* gpu=\([0-9]*\) .*/\1/p' "$LOOM_TMP/ring.out" | sort | tr '\n' ' ' | sed 's/ $//')"
while read -r line; do
  g=$(sed -n 's/.* gpu=\([0-9]*\) .*/\1/p' <<<"$line")
  [ -n "$g" ] || { fail "no LOOM_GPU in: $line"; continue; }
  cls=v100; nic=mlx5_1; cpu=1
  [ "$g" -lt 2 ] && { cls=a100; nic=mlx5_0; cpu=0; }
  expect_match "GPU $g class" " class=$cls " "$line"
  expect_match "GPU $g first in CUDA_VISIBLE_DEVICES" " cvd=$g," "$line"
  expect_match "GPU $g near NIC" " nic=$nic ucx=$nic:1 hca==$nic " "$line"
  expect_match "GPU $g CPUs of its NUMA node" " cpus=$cpu allowed=$cpu " "$line"
  expect_match "GPU $g weight" " weight=$([ $cls = a100 ] && echo 312 || echo 125) " "$line"
  expect_match "GPU $g memory (bytes)" " memory=$([ $cls = a100 ] && echo 42949672960 || echo 34359738368) " "$line"
  expect_match "GPU $g ring and bind" " ring=0,1,2,3 .*bind=ring " "$line"
  expect_match "GPU $g exported topology" " topo=/tmp/loom-$(id -u)-[0-9]+\.[0-9]+/topology.json nccl=/tmp/loom-.*/nccl-topo.xml" "$line"
done <"$LOOM_TMP/ring.out"
expect_eq "--loom-verbose: one line per task" 4 "$(grep -c '^spank_loom: rank [0-3] (local [0-3]) on '"$host"': gpu' <<<"$err")"
expect_eq "exported files removed after the step" "" "$(ls -d /tmp/loom-"$(id -u)"-* 2>/dev/null)"

# A forged SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES (4 KB of ranges that would expand to 20
# million entries) in the job's environment: the task gets the GPU Slurm allocated, at once, and
# without GPUs the forged list gives none.
forged=$(/usr/bin/python3 -c 'print(",".join(f"{i * 70000}-{i * 70000 + 65535}" for i in range(300)))')
t0=$(date +%s)
run_cmd timeout 60 env SLURM_STEP_GPUS="$forged" CUDA_VISIBLE_DEVICES="$forged" srun -n1 --gpus=1 --loom-bind=ring bash -c "$report"
expect_eq "forged GPU lists: the step runs" 0 "$rc"
expect_match "forged GPU lists: Slurm's GPU is the task's" " gpu=([0-3]) class=[av]100 cvd=\1[ ,]" "$out"
expect_eq "forged GPU lists: no time spent on them" 1 "$([ $(($(date +%s) - t0)) -lt 20 ] && echo 1)"
run_cmd timeout 60 srun -n1 --export=ALL,SLURM_STEP_GPUS=0,1,2,3,CUDA_VISIBLE_DEVICES=0,1,2,3 --loom-bind=ring bash -c "$report"
expect_match "forged GPU lists without a GPU allocation: no GPU" "rank=0 gpu= " "$out"
sinfo -h >/dev/null 2>&1 && pass || fail "slurmctld died after the forged lists"

# none: Loom sets nothing.
run_cmd timeout 60 srun -n1 --gpus=1 --loom-bind=none bash -c 'echo "[$LOOM_BIND$LOOM_GPU$LOOM_RING]"'
expect_eq "--loom-bind=none sets nothing" "[]" "$out"

# Defaults from the environment: the contract's variable and Slurm's own SPANK option variable.
run_cmd env SLURM_SPANK__SLURM_SPANK_OPTION_loom_bind=gpu timeout 60 srun -n1 --gpus=1 bash -c 'echo "[$LOOM_BIND]"'
expect_eq "SLURM_SPANK__SLURM_SPANK_OPTION_loom_bind default" "[gpu]" "$out"
run_cmd env SLURM_SPANK__SLURM_SPANK_OPTION_loom_loom_bind=numa timeout 60 srun -n1 --gpus=1 bash -c 'echo "[$LOOM_BIND]"'
expect_eq "Slurm's SPANK option variable" "[numa]" "$out"
run_cmd env SLURM_SPANK__SLURM_SPANK_OPTION_loom_bind=gpu timeout 60 srun -n1 --gpus=1 --loom-bind=ring bash -c 'echo "[$LOOM_BIND]"'
expect_eq "the option beats the environment" "[ring]" "$out"
run_cmd env SLURM_SPANK__SLURM_SPANK_OPTION_loom_bind=fast timeout 60 srun -n1 bash -c 'echo "[$LOOM_BIND]"'
expect_eq "a bad environment default places nothing" "[]" "$out"
expect_match "bad environment default named" "SLURM_SPANK__SLURM_SPANK_OPTION_loom_bind: --loom-bind: unknown value 'fast'" "$err"

# sbatch with #SBATCH --loom-bind=ring: the batch step is left alone, its srun steps placed.
cat >"$LOOM_TMP/ring.sbatch" <<JOB
#!/bin/bash
#SBATCH -n2 -c1 --gpus=v100:2 --loom-bind=ring -o $LOOM_TMP/sbatch.out
echo "batch bind=[\$LOOM_BIND]"
srun bash -c '$report'
JOB
jid=$(sbatch --parsable "$LOOM_TMP/ring.sbatch")
for _ in $(seq 150); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.2; done
sb=$(cat "$LOOM_TMP/sbatch.out" 2>/dev/null)
expect_match "sbatch: batch step untouched" "batch bind=\[\]" "$sb"
expect_match "sbatch: step placed on a V100" "rank=[01] gpu=[23] class=v100 .*bind=ring" "$sb"
expect_eq "sbatch: two placed tasks" 2 "$(grep -c 'class=v100' <<<"$sb")"

# salloc --loom-bind=ring, then srun inside the allocation.
run_cmd timeout 60 salloc -n2 --gpus=a100:2 --loom-bind=gpu srun bash -c "$report"
expect_eq "salloc exit" 0 "$rc"
expect_match "salloc: mode gpu reached the step" "gpu=0 class=a100 .*bind=gpu" "$out"
expect_match "salloc: second task" "gpu=1 class=a100 .*bind=gpu" "$out"

# Data-parallel loom-train as 4 MPI ranks under srun with the plugin's placement: the shares
# follow the GPUs' weights (A100 312, V100 125) and the weights equal a single process's.
train=$LOOM_BUILDDIR/loom-train
if [ -x "$train" ] && [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  targs="--steps 20 --global-batch 120 --seed 5 --log-every 1000"
  run_cmd "$train" $targs --export "$LOOM_TMP/one.h5"
  run_cmd timeout 120 srun -n4 --overcommit -c1 --gpus=4 --mpi=pmix --loom-bind=ring "$train" $targs \
    --balance static --export "$LOOM_TMP/srun4.h5"
  expect_eq "srun loom-train, 4 ranks exit" 0 "$rc"
  expect_match "shares from the plugin's device weights" "balance static: shares (42|18),(42|18),(42|18),(42|18)" "$err"
  expect_match "4 ranks in one ring" "allreduce ring over 4 ranks \(mpi\)" "$err"
  h5diff -d 2e-6 "$LOOM_TMP/one.h5" "$LOOM_TMP/srun4.h5" /params /params >/dev/null && pass ||
    fail "srun, 4 ranks: weights differ from 1 process"
else
  fail "loom-train or the Fashion-MNIST data set missing"
fi

# --cpu-bind beside --loom-bind: srun says which wins.
run_cmd timeout 60 srun -n1 --gpus=1 --cpu-bind=cores --loom-bind=ring true
expect_match "--cpu-bind conflict explained" "spank_loom: --loom-bind=ring wins over --cpu-bind=cores" "$err"

# Bad options fail before launch, naming the option and the allowed values.
run_cmd timeout 60 srun -n1 --loom-bind=bogus true
[ "$rc" -ne 0 ] && pass || fail "--loom-bind=bogus was accepted"
expect_match "bogus bind message" "--loom-bind: unknown value 'bogus' \(allowed: ring, gpu, numa, none, help\)" "$err"
run_cmd timeout 60 srun -n1 '--loom-nic=x;rm' true
[ "$rc" -ne 0 ] && pass || fail "--loom-nic with a ';' was accepted"

# A corrupt or missing topology: strict=0 warns and runs unbound; strict=1 fails the step.
printf '<topology><object type="Machine"' >"$LOOM_TMP/corrupt.xml"
chmod 0644 "$LOOM_TMP/corrupt.xml"; chmod 0755 "$LOOM_TMP"
for topo in "$LOOM_TMP/corrupt.xml" "$LOOM_TMP/missing.xml"; do
  set_plugstack "topology=$topo strict=0"
  run_cmd timeout 60 srun -n1 --gpus=1 --loom-bind=ring bash -c 'echo "ran [$LOOM_GPU]"'
  expect_eq "strict=0 $(basename "$topo"): task ran" "ran []" "$out"
  expect_match "strict=0 $(basename "$topo"): warning" "spank_loom: warning: topology $topo: .*tasks run without Loom's placement" "$err"
  set_plugstack "topology=$topo strict=1"
  run_cmd timeout 60 srun -n1 --gpus=1 --loom-bind=ring bash -c 'echo ran'
  [ "$rc" -ne 0 ] && pass || fail "strict=1 $(basename "$topo"): the step did not fail"
  expect_eq "strict=1 $(basename "$topo"): task did not run" "" "$out"
  expect_match "strict=1 $(basename "$topo"): reason shown" "spank_loom: error: topology $topo: .*strict=1: the task does not run" "$err"
done
# An unknown plugstack key: the plugin refuses to load and says why; jobs that ask for Loom
# are refused rather than run unplaced.
set_plugstack "topology=$dir/topology.xml colour=blue"
run_cmd timeout 60 srun -n1 --loom-bind=ring true
[ "$rc" -ne 0 ] && pass || fail "--loom-bind was accepted although the plugin did not load"
expect_match "unknown plugstack key named" "spank_loom: plugstack.conf: unknown key 'colour'" "$err"
cp "$LOOM_TMP/plugstack.orig" "$dir/plugstack.conf"

# default_bind from plugstack.conf applies without any option.
set_plugstack "topology=$dir/topology.xml default_bind=gpu"
run_cmd timeout 60 srun -n1 --gpus=1 bash -c 'echo "[$LOOM_BIND]"'
expect_eq "default_bind=gpu" "[gpu]" "$out"
cp "$LOOM_TMP/plugstack.orig" "$dir/plugstack.conf"

# Everything still up.
pgrep -F "$dir/slurmctld.pid" >/dev/null && pass || fail "slurmctld died"
pgrep -F "$dir/slurmd-$host.pid" >/dev/null && pass || fail "slurmd died"
expect_eq "node still idle" "idle" "$(sinfo -h -N -o '%T' | sort -u)"
finish
