// kernels.hpp — CPU kernels: GEMM through OpenBLAS, and the element-wise and reduction kernels
// the layers need (fused bias + activation, softmax cross-entropy). Row-major throughout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::rt::cpu {

enum class Act { kNone, kRelu, kGelu };

// Settings that libraries read only as they load, so this re-executes the program (same pid,
// same arguments; call it first in main, before any thread or MPI) with them in its environment,
// named in LOOM_LIBRARY_ENV. Returns when nothing is to do or the exec failed.
// - GOMP_SPINCOUNT=`spin`, unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set: OpenMP's workers
//   (libgomp, which oneDNN uses too) spin ~300,000 rounds before they sleep; with another
//   process busy on the node, the thread a barrier waits for cannot run meanwhile, and
//   --threads 2 fell below --threads 1. A short spin, then a passive wait. Training's steps are
//   long parallel regions: 1000 (kTrainingSpin). Inference runs many short regions in a row, one
//   a node, and a worker asleep between two of them takes longer to wake than the node takes:
//   10,000 (kInferenceSpin), about ten microseconds of spinning.
constexpr const char* kTrainingSpin = "1000";
constexpr const char* kInferenceSpin = "10000";
// - OPENBLAS_CORETYPE, unless set: OpenBLAS 0.3.21 (Debian 12) takes CPUs it does not know (the
//   5th-generation Xeon, model 207) for a Prescott and runs SSE3 kernels, 4-5x slower GEMMs.
//   SkylakeX's kernels where the CPU has AVX-512, Haswell's where it has AVX2 and FMA.
void settle_library_env(char** argv, const char* spin = kTrainingSpin);
void set_threads(int n);  // OpenBLAS threads and OpenMP threads (oneDNN and our loops)
// Buffers below `bytes` come from the heap and go back to it (glibc's M_MMAP_THRESHOLD; the top of
// the heap is trimmed past 256 MiB): a loop that allocates and frees the same sizes each step (a
// training step's activations, an inference's outputs, HDF5's chunk buffers) otherwise maps fresh
// zeroed pages each time and faults them in. Process-wide; the last call's threshold holds.
void keep_buffers_on_heap(size_t bytes);
int threads();

// The GEMM behind gemm(): OpenBLAS's cblas_sgemm, or oneDNN's dnnl_sgemm when built with it
// (faster on AVX-512 machines; "auto" picks it). Throws Error for an unknown or absent one.
void set_gemm_backend(const std::string& name);
const char* gemm_backend();
// Whether element-wise loops may use OpenMP threads: only when the GEMM runs on OpenMP too
// (oneDNN). Beside OpenBLAS's own pthreads, spinning OpenMP workers would steal its cores.
bool openmp_loops();

// The scope runs oneDNN's parallel work on the calling thread alone when `macs` (its multiply-adds)
// are below `below`, about a million unless said: oneDNN spreads even a one-sequence product or a 16 x 16 image's
// convolution over every thread, where waking them costs more than the work (an int8 GEMM of
// 16 x 96 x 32 took 2.6 times its one-thread time on two threads).
class AloneBelow {
 public:
  explicit AloneBelow(int64_t macs, int64_t below = int64_t{1} << 20);
  ~AloneBelow();
  AloneBelow(const AloneBelow&) = delete;
  AloneBelow& operator=(const AloneBelow&) = delete;

 private:
  int threads_ = 0;  // the threads to give back; 0: nothing was changed
};

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);

// C[M,N] = (A - a_zero)(B - b_zero) in int32 (wrapping) for A uint8 or int8 (a_signed) [M,K] and
// B int8 [K,N], row-major, on oneDNN's int8 GEMM. False, with nothing done, where that would not
// be exact (exact_int8_gemm): a build without oneDNN, or a CPU without VNNI, whose u8 x s8
// multiply-adds sum pairs of products in int16 and saturate; or a zero point outside its type.
bool gemm_int8(int m, int n, int k, const void* a, bool a_signed, int a_zero, const int8_t* b, int b_zero, int32_t* c);
bool exact_int8_gemm();

// y[r, c] = act(y[r, c] + bias[c]) in place
void bias_act(float* y, const float* bias, int64_t rows, int64_t cols, Act act);
// dy *= (y > 0), for y the ReLU output
void relu_backward(float* dy, const float* y, int64_t n);
// db[c] += sum_r dy[r, c]
void bias_grad(const float* dy, float* db, int rows, int cols);
// Mean softmax cross-entropy over rows; writes dlogits = (softmax - onehot) / grad_rows when
// non-null (grad_rows 0: rows; a rank's share of a global batch passes the global batch's rows, so
// that its gradients, summed over the ranks, are those of the global mean). Labels outside
// [0, cols) are an error (throws loom::rt::Error).
double softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int rows, int cols, int64_t grad_rows = 0);
// Mean distillation loss over rows (Hinton et al. 2015): alpha T^2 KL(softmax(t/T) || softmax(s/T))
// + (1 - alpha) CE(s, y), for student logits s and teacher logits t; writes its gradient with
// respect to s into dlogits: (alpha T (softmax(s/T) - softmax(t/T)) + (1 - alpha)(softmax(s) - onehot)) / grad_rows
// (0: rows, as softmax_xent).
double distill_xent(const float* student, const float* teacher, const int32_t* labels, float* dlogits, int rows, int cols,
                    float temperature, float alpha, int64_t grad_rows = 0);
// Index of each row's largest value.
void argmax_rows(const float* x, int rows, int cols, int32_t* out);

}  // namespace loom::rt::cpu
