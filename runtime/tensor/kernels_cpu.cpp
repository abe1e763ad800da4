// kernels_cpu.cpp — CPU kernels. GEMM is oneDNN's dnnl_sgemm or OpenBLAS's cblas_sgemm; the rest
// are simple loops written so that GCC vectorises them (-O2 with contiguous, restrict-free inner
// loops), the bias loops also in AVX2/FMA clones (LOOM_VEC) spread over the threads (vec::for_range).
#include <cblas.h>
#include <omp.h>
#ifdef LOOM_HAVE_DNNL
#include <dnnl.h>
#endif

#include <limits.h>
#include <malloc.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/vec.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace loom::rt::cpu {

namespace {
int g_threads = 1;
#ifdef LOOM_HAVE_DNNL
bool g_onednn = true;
#else
bool g_onednn = false;
#endif


LOOM_VEC void bias_act_rows(float* y, const float* bias, int64_t cols, Act act, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; ++r) {
    float* row = y + r * cols;
    switch (act) {
      case Act::kNone:
        for (int64_t c = 0; c < cols; ++c) row[c] += bias[c];
        break;
      case Act::kRelu:
        for (int64_t c = 0; c < cols; ++c) row[c] = std::max(row[c] + bias[c], 0.0f);
        break;
      case Act::kGelu:
        for (int64_t c = 0; c < cols; ++c) {
          const float x = row[c] + bias[c];
          row[c] = x * vec::normal_cdf(x);
        }
        break;
    }
  }
}

LOOM_VEC void bias_grad_cols(const float* dy, float* db, int rows, int cols, int64_t lo, int64_t hi) {
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<int64_t>(r) * cols;
    for (int64_t c = lo; c < hi; ++c) db[c] += row[c];
  }
}

// One row of the cross-entropy: log-sum-exp minus the label's logit. e receives e^(x - max); with
// scale > 0 it becomes the gradient, softmax(x) * scale less scale at the label.
LOOM_VEC double xent_row(const float* x, int32_t label, float* e, int cols, float scale) {
  const float mx = vec::max(x, cols, x[0]);
  const float sum = vec::exp_sum(x, e, mx, cols);
  if (scale > 0.0f) {
    const float k = scale / sum;
    for (int c = 0; c < cols; ++c) e[c] *= k;
    e[label] -= scale;
  }
  return std::log(static_cast<double>(sum)) + mx - x[label];
}

// The OPENBLAS_CORETYPE that settle_library_env sets (null: none is needed).
const char* openblas_core_override() {
  if (std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  const char* core = openblas_get_corename();
  if (!core || strcasecmp(core, "prescott") != 0) return nullptr;  // its fallback for CPUs it does not know
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

void settle_library_env(char** argv, const char* spin) {
  std::string set;  // what this sets, for LOOM_LIBRARY_ENV
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", spin, 1) == 0)
    set += "GOMP_SPINCOUNT";
  if (const char* core = openblas_core_override())
    if (setenv("OPENBLAS_CORETYPE", core, 1) == 0) set += set.empty() ? "OPENBLAS_CORETYPE" : " OPENBLAS_CORETYPE";
  if (set.empty() || setenv("LOOM_LIBRARY_ENV", set.c_str(), 1) != 0) return;
  // By the binary's own path where it can be read: the kernel names a process after the file it
  // executes, and ps, top, pkill and Slurm's sstat should see loom-serve or loom-train, not "exe".
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);
  }
  execv("/proc/self/exe", argv);  // returns only on failure: run on with the libraries' defaults
}

void set_threads(int n) {
  g_threads = std::max(1, n);
  openblas_set_num_threads(g_threads);
  omp_set_num_threads(g_threads);
}

void keep_buffers_on_heap(size_t bytes) {
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes));
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void set_gemm_backend(const std::string& name) {
#ifdef LOOM_HAVE_DNNL
  const bool have = true;
#else
  const bool have = false;
#endif
  if (name == "auto") g_onednn = have;
  else if (name == "openblas") g_onednn = false;
  else if (name == "onednn" && have) g_onednn = true;
  else if (name == "onednn") throw Error("--gemm onednn: this build has no oneDNN (apt-get install libdnnl-dev)");
  else throw Error("--gemm must be auto, openblas or onednn, not '" + name + "'");
}

const char* gemm_backend() { return g_onednn ? "onednn" : "openblas"; }

bool openmp_loops() { return g_onednn && g_threads > 1; }

int threads() { return g_threads; }

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // a product over nothing: beta C (the BLAS refuse the leading dimension 0 of such an operand)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) c[static_cast<int64_t>(i) * ldc + j] = beta == 0.0f ? 0.0f : beta * c[static_cast<int64_t>(i) * ldc + j];
    return;
  }
  // Row-major: each stored row at least as long as the matrix's, or the BLAS refuse the call and
  // leave C unwritten. A matrix of one stored row never steps by its leading dimension, so any
  // stride its caller read off a view (a dimension of 1 has any stride) stands as the row's length.
  if ((ta ? k : m) == 1) lda = std::max(lda, ta ? m : k);
  if ((tb ? n : k) == 1) ldb = std::max(ldb, tb ? k : n);
  if (m == 1) ldc = std::max(ldc, n);
  LOOM_CHECK(lda >= (ta ? m : k) && ldb >= (tb ? k : n) && ldc >= n,
             "gemm: a leading dimension shorter than its matrix's rows (lda " + std::to_string(lda) + ", ldb " +
                 std::to_string(ldb) + ", ldc " + std::to_string(ldc) + " for " + std::to_string(m) + "x" + std::to_string(n) +
                 "x" + std::to_string(k) + ")");
#ifdef LOOM_HAVE_DNNL
  if (g_onednn) {
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    LOOM_CHECK(st == dnnl_success, "dnnl_sgemm failed with status " + std::to_string(static_cast<int>(st)));
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

AloneBelow::AloneBelow(int64_t macs, int64_t below) {
  const int threads = omp_get_max_threads();
  if (macs >= below || threads <= 1) return;
  threads_ = threads;
  omp_set_num_threads(1);
}

AloneBelow::~AloneBelow() {
  if (threads_) omp_set_num_threads(threads_);
}

bool exact_int8_gemm() {
#ifdef LOOM_HAVE_DNNL
  static const bool vnni = __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
  return vnni;
#else
  return false;
#endif
}

bool gemm_int8(int m, int n, int k, const void* a, bool a_signed, int a_zero, const int8_t* b, int b_zero, int32_t* c) {
  if (!exact_int8_gemm() || m <= 0 || n <= 0 || k <= 0) return false;
  if (a_zero < (a_signed ? -128 : 0) || a_zero > (a_signed ? 127 : 255) || b_zero < -128 || b_zero > 127) return false;
#ifdef LOOM_HAVE_DNNL
  const int32_t c_offset = 0;
  const auto bo = static_cast<int8_t>(b_zero);
  const AloneBelow small(int64_t{m} * n * k);
  const dnnl_status_t st =
      a_signed ? dnnl_gemm_s8s8s32('N', 'N', 'F', m, n, k, 1.0f, static_cast<const int8_t*>(a), k, static_cast<int8_t>(a_zero), b, n, bo, 0.0f, c, n, &c_offset)
               : dnnl_gemm_u8s8s32('N', 'N', 'F', m, n, k, 1.0f, static_cast<const uint8_t*>(a), k, static_cast<uint8_t>(a_zero), b, n, bo, 0.0f, c, n, &c_offset);
  LOOM_CHECK(st == dnnl_success, "oneDNN's int8 GEMM failed with status " + std::to_string(static_cast<int>(st)));
  return true;
#else
  (void)a, (void)b, (void)c;
  return false;
#endif
}

void bias_act(float* y, const float* bias, int64_t rows, int64_t cols, Act act) {
  const int64_t min_rows = vec::kParallelValues / std::max<int64_t>(cols, 1);
  vec::for_range(rows, min_rows, [&](int64_t lo, int64_t hi) { bias_act_rows(y, bias, cols, act, lo, hi); });
}

void relu_backward(float* dy, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// Each column's sum runs over the rows in order whatever the threads: the threads split the columns.
void bias_grad(const float* dy, float* db, int rows, int cols) {
  const bool parallel = int64_t{rows} * cols >= vec::kParallelValues;
  vec::for_range(cols, parallel ? 0 : int64_t{cols} + 1,
                 [&](int64_t lo, int64_t hi) { bias_grad_cols(dy, db, rows, cols, lo, hi); });
}

// Rows spread over the threads; each row's loss is kept and the rows are added in order, so the
// loss does not depend on the threads.
double softmax_xent(const float* logits, const int32_t* labels, float* dlogits, int rows, int cols, int64_t grad_rows) {
  for (int r = 0; r < rows; ++r)  // checked here: an exception must not leave an OpenMP region
    if (labels[r] < 0 || labels[r] >= cols)
      throw Error("label " + std::to_string(labels[r]) + " outside [0, " + std::to_string(cols) + ")");
  const float inv_rows = 1.0f / static_cast<float>(grad_rows > 0 ? grad_rows : rows);
  std::vector<double> loss(static_cast<size_t>(rows));
  vec::for_range(rows, vec::kParallelValues / std::max(cols, 1), [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(dlogits ? 0 : static_cast<size_t>(cols));
    for (int64_t r = lo; r < hi; ++r)
      loss[static_cast<size_t>(r)] = xent_row(logits + r * cols, labels[r], dlogits ? dlogits + r * cols : scratch.data(),
                                              cols, dlogits ? inv_rows : 0.0f);
  });
  double total = 0;
  for (double l : loss) total += l;
  return rows ? total / rows : 0.0;
}

namespace {
// softmax(x / T) of one row into p (double precision).
void softmax_t(const float* x, int cols, double T, std::vector<double>& p) {
  p.resize(static_cast<size_t>(cols));
  const double mx = *std::max_element(x, x + cols) / T;
  double sum = 0;
  for (int c = 0; c < cols; ++c) sum += p[static_cast<size_t>(c)] = std::exp(x[c] / T - mx);
  for (auto& v : p) v /= sum;
}
}  // namespace

double distill_xent(const float* student, const float* teacher, const int32_t* labels, float* dlogits, int rows, int cols,
                    float temperature, float alpha, int64_t grad_rows) {
  const double T = temperature, a = alpha;
  const double n = static_cast<double>(grad_rows > 0 ? grad_rows : rows);
  const double ce = softmax_xent(student, labels, dlogits, rows, cols, grad_rows);  // dlogits = (softmax(s) - onehot) / n
  std::vector<double> ps, pt;
  double kl = 0;
  for (int r = 0; r < rows; ++r) {
    const int64_t o = static_cast<int64_t>(r) * cols;
    softmax_t(student + o, cols, T, ps);
    softmax_t(teacher + o, cols, T, pt);
    for (int c = 0; c < cols; ++c) {
      const double t = pt[static_cast<size_t>(c)], s = ps[static_cast<size_t>(c)];
      if (t > 0) kl += t * (std::log(t) - std::log(std::max(s, 1e-300)));
      if (dlogits)
        dlogits[o + c] = static_cast<float>((1 - a) * dlogits[o + c] + a * T * (s - t) / n);
    }
  }
  return a * T * T * kl / rows + (1 - a) * ce;
}

void argmax_rows(const float* x, int rows, int cols, int32_t* out) {
  for (int r = 0; r < rows; ++r) {
    const float* row = x + static_cast<int64_t>(r) * cols;
    out[r] = static_cast<int32_t>(std::max_element(row, row + cols) - row);
  }
}

}  // namespace loom::rt::cpu
