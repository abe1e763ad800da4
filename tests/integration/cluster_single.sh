#!/usr/bin/env bash
# cluster_single.sh — the one-node local cluster that contrib/check.sh starts: real slurmctld
# and slurmd with the fake A100/V100 gres that loom-topo wrote, jobs through srun and sbatch.
. "$(dirname "$0")/lib.sh"
require_cluster
dir=$(dirname "$SLURM_CONF")
host=$(hostname -s)

run_cmd sinfo -h -N -p debug -o '%N %T %G'  # the default partition (spot lists the nodes again)
expect_eq "node idle with gres" "$host idle gpu:a100:2(S:0),gpu:v100:2(S:1)" "$out"
# gres.conf came from loom-topo: types, character devices, Cores= and NVLink counts.
expect_match "gres.conf a100 line" "Type=a100 File=$dir/dev/$host/nvidia0 Cores=0 Links=-1,12,0,0" "$(cat "$dir/gres.conf")"
expect_match "gres.conf v100 line" "Type=v100 File=$dir/dev/$host/nvidia3 Cores=1 Links=0,0,2,-1" "$(cat "$dir/gres.conf")"
[ -c "$dir/dev/$host/nvidia2" ] && pass || fail "fake GPU device is not a character device"
expect_match "NodeName from loom-topo" "^NodeName=$host CPUs=2 .*Gres=gpu:a100:2,gpu:v100:2" "$(cat "$dir/nodes.conf")"

run_cmd timeout 60 srun -n1 --gpus=a100:2 bash -c 'echo $CUDA_VISIBLE_DEVICES/$SLURM_STEP_GPUS'
expect_eq "a100 step GPUs" "0,1/0,1" "$out"
run_cmd timeout 60 srun -n1 --gpus=v100:2 bash -c 'echo $SLURM_STEP_GPUS'
expect_eq "v100 step GPUs" "2,3" "$out"
run_cmd timeout 60 srun -n4 --overcommit --gpus=4 bash -c 'echo $SLURM_PROCID'
expect_eq "4 tasks on 2 CPUs" "0 1 2 3" "$(echo $out | tr ' ' '\n' | sort | tr '\n' ' ' | sed 's/ $//')"
run_cmd timeout 60 srun -n1 --gpus=a100:3 true
[ "$rc" -ne 0 ] && pass || fail "a request for 3 A100s on a node with 2 was not refused"

# sbatch, through to completion.
cat >"$LOOM_TMP/job.sbatch" <<JOB
#!/bin/bash
#SBATCH -n2 --gpus=v100:1 -o $LOOM_TMP/job.out
srun bash -c 'echo task \$SLURM_PROCID gpu \$SLURM_STEP_GPUS'
JOB
jid=$(sbatch --parsable "$LOOM_TMP/job.sbatch")
for _ in $(seq 150); do squeue -h -j "$jid" 2>/dev/null | grep -q . || break; sleep 0.2; done
expect_match "sbatch job ran both tasks" "task 1 gpu [23]" "$(cat "$LOOM_TMP/job.out" 2>/dev/null)"

# MPI over PMIx on the one node.
if [ -x "$LOOM_BUILDDIR/tests/integration/mpi_hello" ]; then
  run_cmd timeout 60 srun -n2 --mpi=pmix "$LOOM_BUILDDIR/tests/integration/mpi_hello"
  expect_eq "srun --mpi=pmix exit" 0 "$rc"
  expect_match "one MPI world of 2" "rank 1 size 2 host $host ranksum 1" "$out"
fi

pgrep -F "$dir/slurmctld.pid" >/dev/null && pass || fail "slurmctld died"
pgrep -F "$dir/slurmd-$host.pid" >/dev/null && pass || fail "slurmd died"
finish
