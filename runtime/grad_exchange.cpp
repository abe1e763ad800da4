// grad_exchange.cpp — plain and PowerSGD gradient exchange.
#include "loom/rt/grad_exchange.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "loom/rt/kernels.hpp"

namespace loom::rt {

CompressConfig parse_grad_compress(const std::string& text) {
  CompressConfig c;
  auto colon = text.find(':');
  c.kind = text.substr(0, colon);
  if (c.kind == "fp16") throw Error("--grad-compress fp16 is not available in this build yet (none, powersgd)");
  if (c.kind != "none" && c.kind != "powersgd")
    throw Error("--grad-compress must be none or powersgd[:rank=R,start=S], not '" + text + "'");
  if (colon == std::string::npos) return c;
  if (c.kind != "powersgd") throw Error("--grad-compress " + c.kind + " takes no parameters");
  std::stringstream ss(text.substr(colon + 1));
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    auto eq = kv.find('=');
    std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9)
      throw Error("--grad-compress: '" + kv + "' needs a non-negative integer value");
    if (k == "rank") c.rank = std::stoi(v);
    else if (k == "start") c.start = std::stoll(v);
    else throw Error("--grad-compress: unknown parameter '" + k + "' (rank, start)");
  }
  if (c.rank <= 0) throw Error("--grad-compress: rank must be positive");
  return c;
}

size_t GradExchange::plain_floats(const std::vector<Param>& params, size_t extras) {
  size_t n = extras;
  for (const auto& p : params) n += static_cast<size_t>(p.grad.numel());
  return n;
}

void GradExchange::plan(const std::vector<Param>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& g = params[i].grad;
    const int64_t r = c_.rank;
    bool matrix = g.ndim() == 2 && c_.kind == "powersgd";
    // Sent as P [rows, r] and Q [cols, r]: only worth it when that halves the size at least.
    if (matrix && g.numel() >= 2 * (g.dim(0) + g.dim(1)) * r) {
      Matrix m{i, static_cast<int>(g.dim(0)), static_cast<int>(g.dim(1)), {}, {}};
      std::mt19937 rng(1234 + static_cast<unsigned>(i));  // the same Q on every rank
      std::normal_distribution<float> nd;
      m.q.resize(static_cast<size_t>(m.cols) * static_cast<size_t>(r));
      for (auto& v : m.q) v = nd(rng);
      m.error.assign(static_cast<size_t>(g.numel()), 0.0f);
      matrices_.push_back(std::move(m));
    } else {
      plain_.push_back(i);
    }
  }
  planned_ = true;
}

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

void GradExchange::exchange(Communicator& comm, std::vector<Param>& params, std::vector<float>& extras, int64_t step) {
  if (!planned_) plan(params);
  const bool compress = c_.kind == "powersgd" && step >= c_.start && !matrices_.empty();
  const int r = c_.rank;
  // Round 1: uncompressed tensors, the extras, and P = (G + E) Q for every compressed matrix.
  buf_.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    bool is_plain = !compress || std::find(plain_.begin(), plain_.end(), i) != plain_.end();
    if (!is_plain) continue;
    const float* g = params[i].grad.f32();
    buf_.insert(buf_.end(), g, g + params[i].grad.numel());
  }
  buf_.insert(buf_.end(), extras.begin(), extras.end());
  const size_t p_begin = buf_.size();
  if (compress) {
    for (auto& m : matrices_) {
      float* g = params[m.param].grad.f32();
      for (size_t k = 0; k < m.error.size(); ++k) g[k] += m.error[k];  // error feedback: M = G + E
      size_t at = buf_.size();
      buf_.resize(at + static_cast<size_t>(m.rows) * r);
      cpu::gemm(false, false, m.rows, r, m.cols, 1.0f, g, m.cols, m.q.data(), r, 0.0f, buf_.data() + at, r);
    }
  }
  comm.allreduce_sum(buf_.data(), buf_.size());
  last_floats_ = buf_.size();
  size_t at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    bool is_plain = !compress || std::find(plain_.begin(), plain_.end(), i) != plain_.end();
    if (!is_plain) continue;
    float* g = params[i].grad.f32();
    const size_t n = static_cast<size_t>(params[i].grad.numel());
    std::copy(buf_.begin() + static_cast<long>(at), buf_.begin() + static_cast<long>(at + n), g);
    at += n;
  }
  for (float& e : extras) e = buf_[at++];
  if (!compress) return;
  // Round 2: orthogonalise P, then Q = M^T P, summed; the estimate is P Q^T.
  std::vector<float> qbuf;
  std::vector<std::vector<float>> ps;
  at = p_begin;
  for (auto& m : matrices_) {
    std::vector<float> p(buf_.begin() + static_cast<long>(at), buf_.begin() + static_cast<long>(at + static_cast<size_t>(m.rows) * r));
    at += static_cast<size_t>(m.rows) * r;
    orthogonalise(p.data(), m.rows, r);
    size_t q_at = qbuf.size();
    qbuf.resize(q_at + static_cast<size_t>(m.cols) * r);
    cpu::gemm(true, false, m.cols, r, m.rows, 1.0f, params[m.param].grad.f32(), m.cols, p.data(), r, 0.0f,
              qbuf.data() + q_at, r);
    ps.push_back(std::move(p));
  }
  comm.allreduce_sum(qbuf.data(), qbuf.size());
  last_floats_ += qbuf.size();
  size_t q_at = 0;
  const float inv_ranks = 1.0f / static_cast<float>(comm.size());
  for (size_t j = 0; j < matrices_.size(); ++j) {
    Matrix& m = matrices_[j];
    std::copy(qbuf.begin() + static_cast<long>(q_at), qbuf.begin() + static_cast<long>(q_at + m.q.size()), m.q.begin());
    q_at += m.q.size();
    float* g = params[m.param].grad.f32();  // holds this rank's M = G + E
    std::vector<float> approx(static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols));
    cpu::gemm(false, true, m.rows, m.cols, r, 1.0f, ps[j].data(), r, m.q.data(), r, 0.0f, approx.data(), m.cols);
    // This rank's error is its M minus its part of the summed estimate.
    for (size_t k = 0; k < approx.size(); ++k) {
      m.error[k] = g[k] - approx[k] * inv_ranks;
      g[k] = approx[k];
    }
  }
}

}  // namespace loom::rt
