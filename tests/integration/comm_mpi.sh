#!/usr/bin/env bash
# comm_mpi.sh — Loom's ring collectives over real MPI ranks: mpirun with OpenMPI's default
# transport (ob1/shared memory) and with UCX, and srun --mpi=pmix on the local cluster. Each
# run checks Loom's allreduce against MPI_Allreduce on the same data (loom-bench exits 1 on a
# mismatch) and prints both bandwidths.
. "$(dirname "$0")/lib.sh"
B=$LOOM_BUILDDIR/loom-bench
[ -x "$B" ] || skip "loom-bench not built"
command -v mpirun >/dev/null || skip "mpirun missing"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for np in 2 3; do
  run_cmd timeout 120 mpirun -np "$np" --oversubscribe "$B" allreduce --bytes 1000004 --iters 2 --format json
  expect_eq "mpirun -np $np (ob1) exit" 0 "$rc"
  expect_match "mpirun -np $np result" "\"ranks\":$np,\"bytes\":1000004,\"loom_busbw_gbps\":[0-9.]+" "$out"
done
run_cmd env OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any \
  timeout 120 mpirun -np 2 --oversubscribe "$B" allreduce --bytes 4194304 --iters 2 --format json
expect_eq "mpirun with UCX exit" 0 "$rc"
expect_match "UCX result" '"ranks":2,"bytes":4194304' "$out"
if [ "${LOOM_SKIP_CLUSTER_TESTS:-0}" != 1 ] && [ -n "${SLURM_CONF:-}" ] && sinfo -h >/dev/null 2>&1; then
  run_cmd timeout 120 srun -n2 --mpi=pmix "$B" allreduce --bytes 262144 --iters 2 --format json
  expect_eq "srun --mpi=pmix exit" 0 "$rc"
  expect_match "srun result" '"ranks":2,"bytes":262144' "$out"
fi
finish
