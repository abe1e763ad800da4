// mpi_hello.cpp — the smallest real MPI program for the cluster tests: every rank reports its
// host, the world size and an allreduce of the ranks, so a test can see one world span nodes.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0, sum = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  auto env = [](const char* k) { const char* v = std::getenv(k); return v && *v ? v : "-"; };
  std::printf("rank %d size %d host %s ranksum %d gpus %s loom %s %s %s\n", rank, size, host, sum,
              env("CUDA_VISIBLE_DEVICES"), env("LOOM_BIND"), env("LOOM_GPU_CLASS"), env("LOOM_RING"));
  MPI_Finalize();
  return sum == size * (size - 1) / 2 ? 0 : 1;
}
