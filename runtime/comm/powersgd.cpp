// powersgd.cpp — GradExchange's PowerSGD step (Vogels et al. 2019): each large gradient as the
// product of two rank-r factors, with error feedback.
#include <algorithm>
#include <cmath>
#include <random>

#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

namespace {

// Orthonormalise the r columns of a [rows, r] row-major matrix in place: Gram-Schmidt with a
// second pass ("twice is enough"); a column with nothing left after projection (the gradient
// has lower rank than r) becomes zero instead of amplified rounding noise.
void orthogonalise(float* p, int rows, int r) {
  auto norm_of = [&](int j) {
    double n = 0;
    for (int i = 0; i < rows; ++i) n += static_cast<double>(p[i * r + j]) * p[i * r + j];
    return std::sqrt(n);
  };
  for (int j = 0; j < r; ++j) {
    const double before = norm_of(j);
    for (int pass = 0; pass < 2; ++pass)
      for (int k = 0; k < j; ++k) {
        double dot = 0;
        for (int i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + j]) * p[i * r + k];
        for (int i = 0; i < rows; ++i) p[i * r + j] -= static_cast<float>(dot) * p[i * r + k];
      }
    const double after = norm_of(j);
    const float inv = after > 1e-4 * before && after > 1e-30 ? static_cast<float>(1.0 / after) : 0.0f;
    for (int i = 0; i < rows; ++i) p[i * r + j] *= inv;
  }
}

}  // namespace

// PowerSGD where the gradients live: the GEMMs and the error feedback on their device; only P
// and Q (and the tensors sent as they are) cross to the host, where they are summed over the
// ranks and P is orthogonalised ([rows, r]: small).
void GradExchange::powersgd(std::vector<Param>& params, std::vector<float>& extras, int64_t step) {
  Communicator& comm = *comm_;
  const Device d = dev_;
  const bool compress = step >= c_.start && !matrices_.empty();
  const int r = c_.rank;
  auto plain = [&](size_t i) { return !compress || std::find(plain_.begin(), plain_.end(), i) != plain_.end(); };
  auto to_buf = [&](const float* src, size_t n) {  // appends n floats of the device's to buf_
    const size_t at = buf_.size();
    buf_.resize(at + n);
    ops::download(d, buf_.data() + at, src, n * sizeof(float));
  };
  float *pdev = compress ? psgd_scratch_.f32() : nullptr, *qdev = nullptr;
  // Round 1: the plain tensors, the extras, and P = (G + E) Q for every compressed matrix.
  buf_.clear();
  for (size_t i = 0; i < params.size(); ++i)
    if (plain(i)) to_buf(params[i].grad.f32(), static_cast<size_t>(params[i].grad.numel()));
  buf_.insert(buf_.end(), extras.begin(), extras.end());
  const size_t p_begin = buf_.size();
  if (compress) {
    for (auto& m : matrices_) {
      float* g = params[m.param].grad.f32();
      ops::axpy(d, g, m.error.f32(), 1.0f, m.error.numel());  // error feedback: M = G + E
      qdev = pdev + static_cast<size_t>(m.rows) * r;
      ops::upload(d, qdev, m.q.data(), m.q.size() * sizeof(float));
      ops::gemm(d, false, false, m.rows, r, m.cols, 1.0f, g, m.cols, qdev, r, 0.0f, pdev, r);
      to_buf(pdev, static_cast<size_t>(m.rows) * r);
    }
  }
  comm.allreduce_sum(buf_.data(), buf_.size());
  last_bytes_ = buf_.size() * sizeof(float);
  size_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!plain(i)) continue;
    const size_t n = static_cast<size_t>(params[i].grad.numel());
    ops::upload(d, params[i].grad.f32(), buf_.data() + at, n * sizeof(float));
    at += n;
  }
  for (float& e : extras) e = buf_[at++];
  if (!compress) return;
  // Round 2: orthogonalise P, then Q = M^T P, summed; the estimate is P Q^T.
  std::vector<float> qbuf;
  std::vector<std::vector<float>> ps;
  at = p_begin;
  for (auto& m : matrices_) {
    const size_t pn = static_cast<size_t>(m.rows) * r;
    std::vector<float> p(buf_.begin() + static_cast<long>(at), buf_.begin() + static_cast<long>(at + pn));
    at += pn;
    orthogonalise(p.data(), m.rows, r);
    qdev = pdev + pn;
    ops::upload(d, pdev, p.data(), pn * sizeof(float));
    ops::gemm(d, true, false, m.cols, r, m.rows, 1.0f, params[m.param].grad.f32(), m.cols, pdev, r, 0.0f, qdev, r);
    const size_t q_at = qbuf.size();
    qbuf.resize(q_at + m.q.size());
    ops::download(d, qbuf.data() + q_at, qdev, m.q.size() * sizeof(float));
    ps.push_back(std::move(p));
  }
  comm.allreduce_sum(qbuf.data(), qbuf.size());
  last_bytes_ += qbuf.size() * sizeof(float);
  size_t q_at = 0;
  const float inv_ranks = 1.0f / static_cast<float>(comm.size());
  for (size_t j = 0; j < matrices_.size(); ++j) {
    Matrix& m = matrices_[j];
    std::copy(qbuf.begin() + static_cast<long>(q_at), qbuf.begin() + static_cast<long>(q_at + m.q.size()), m.q.begin());
    q_at += m.q.size();
    float* g = params[m.param].grad.f32();  // holds this rank's M = G + E
    const int64_t n = m.error.numel();
    qdev = pdev + ps[j].size();
    ops::upload(d, pdev, ps[j].data(), ps[j].size() * sizeof(float));
    ops::upload(d, qdev, m.q.data(), m.q.size() * sizeof(float));
    // This rank's error is its M minus its part of the summed estimate; the gradient becomes
    // the estimate.
    ops::scale_copy(d, m.error.f32(), g, 1.0f, n);
    ops::gemm(d, false, true, m.rows, m.cols, r, 1.0f, pdev, r, qdev, r, 0.0f, g, m.cols);
    ops::axpy(d, m.error.f32(), g, -inv_ranks, n);
  }
}

}  // namespace loom::rt
