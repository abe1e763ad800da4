// zero.cpp — the sharded optimizer step of ZeRO-1 and the gathering of its moments.
#include "loom/rt/train/zero.hpp"

#include <algorithm>
#include <cmath>

#include "loom/rt/tensor/ops.hpp"

namespace loom::rt {

namespace {

// Calls fn(param index, offset in the parameter, offset in the chunk, length) for every piece
// of the chunk [begin, begin + count) of a bucket's flat layout.
template <class Fn>
void for_pieces(const GradExchange::Chunk& c, const std::vector<Param>& params, Fn fn) {
  size_t at = 0;
  for (size_t i : c.params) {
    const size_t n = static_cast<size_t>(params[i].value.numel());
    const size_t lo = std::max(at, c.begin), hi = std::min(at + n, c.begin + c.count);
    if (lo < hi) fn(i, lo - at, lo - c.begin, hi - lo);
    at += n;
  }
}

// The whole bucket: flat[offset of parameter i ...] <-> parameter i (for_pieces over it all).
template <class Fn>
void for_params(const GradExchange::Chunk& c, const std::vector<Param>& params, Fn fn) {
  for_pieces({c.params, c.flat, c.size, 0, c.size}, params, [&](size_t i, size_t, size_t at, size_t n) { fn(i, at, n); });
}

bool on_cpu(const std::vector<Param>& params) { return params.empty() || params[0].value.device() == Device::kCpu; }

}  // namespace

void ZeroOptimizer::shard(Optimizer& opt, const std::vector<Param>& params) {
  const bool adam = opt.keeps_second_moment();
  // Moments restored from a checkpoint (whole, per parameter): this rank keeps its chunks.
  const auto& rm = opt.first_moments();
  const auto& rv = opt.second_moments();
  const bool restored = rm.size() == params.size() && (!adam || rv.size() == params.size());
  shards_.resize(ex_.buckets());
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);  // known: the first step's gradients are reduced
    Shard& s = shards_[b];
    s.m.assign(c.count, 0.0f);
    if (adam) s.v.assign(c.count, 0.0f);
    if (!on_cpu(params)) s.w.resize(c.count);
    if (!restored) continue;
    for_pieces(c, params, [&](size_t i, size_t p_off, size_t c_off, size_t len) {  // on the parameters' device
      ops::download(rm[i].device(), s.m.data() + c_off, rm[i].f32() + p_off, len * sizeof(float));
      if (adam) ops::download(rv[i].device(), s.v.data() + c_off, rv[i].f32() + p_off, len * sizeof(float));
    });
  }
  opt.restore({}, {}, opt.steps());  // the whole moments are not kept twice
}

// CPU parameters live in their bucket's flat buffer of weights, each a view of its place (as the
// exchange's gradients live in theirs): the optimizer updates this rank's chunk there and the
// allgather fills in the rest, with no copy in either direction. Bound at the first step, and
// again for a parameter that is not a view of its place (a checkpoint replaced it).
void ZeroOptimizer::bind_weights(std::vector<Param>& params) {
  weights_.resize(ex_.buckets());
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    const GradExchange::Chunk c = ex_.chunk(b);
    bind_flat(&weights_[b], c.size, c.params, params, &Param::value);
  }
}

size_t ZeroOptimizer::step(Optimizer& opt, std::vector<Param>& params, float lr, float clip) {
  if (shards_.empty()) shard(opt, params);
  const bool cpu = on_cpu(params);
  if (cpu) bind_weights(params);
  if (clip > 0) {  // torch's clip_grad_norm_ over the whole gradient: each rank's chunks, summed
    double sq = 0;
    for (size_t b = 0; b < ex_.buckets(); ++b) {
      GradExchange::Chunk c = ex_.chunk(b);
      for (size_t k = c.begin; k < c.begin + c.count; ++k) sq += static_cast<double>(c.flat[k]) * c.flat[k];
    }
    float total = static_cast<float>(sq);
    comm_.allreduce_sum(&total, 1);
    const float norm = std::sqrt(total);
    if (norm > clip)
      for (size_t b = 0; b < ex_.buckets(); ++b) {
        GradExchange::Chunk c = ex_.chunk(b);
        for (size_t k = c.begin; k < c.begin + c.count; ++k) c.flat[k] *= clip / (norm + 1e-6f);
      }
  }
  std::vector<Optimizer::Span> spans;
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    Shard& s = shards_[b];
    if (s.m.size() != c.count) throw Error("ZeRO-1: bucket " + std::to_string(b) + " changed its chunk between steps");
    float* w = cpu ? weights_[b].f32() + c.begin : s.w.data();
    if (!cpu)  // the chunk's parameters, read from the GPU
      for_pieces(c, params, [&](size_t i, size_t p_off, size_t c_off, size_t len) {
        const Tensor& p = params[i].value;
        ops::download(p.device(), s.w.data() + c_off, p.f32() + p_off, len * sizeof(float));
      });
    spans.push_back({w, c.flat + c.begin, s.m.data(), s.v.empty() ? nullptr : s.v.data(), static_cast<int64_t>(c.count)});
  }
  opt.step_spans(spans, lr);
  size_t sent = 0;
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    sent += c.size * sizeof(float);
    if (cpu) {
      comm_.allgather_chunks(weights_[b].f32(), c.size);  // the parameters themselves
      continue;
    }
    std::copy(shards_[b].w.begin(), shards_[b].w.end(), c.flat + c.begin);
    comm_.allgather_chunks(c.flat, c.size);
    for_params(c, params, [&](size_t i, size_t at, size_t n) {
      const Tensor& p = params[i].value;
      ops::upload(p.device(), p.f32(), c.flat + at, n * sizeof(float));
    });
  }
  return sent;
}

void ZeroOptimizer::gather_moments(const Optimizer& opt, const std::vector<Param>& params, std::vector<Tensor>* m,
                                   std::vector<Tensor>* v) {
  m->clear();
  v->clear();
  if (shards_.empty()) {  // no step yet: whatever was restored
    *m = opt.first_moments();
    *v = opt.second_moments();
    return;
  }
  const bool adam = opt.keeps_second_moment();
  for (const auto& p : params) {
    m->push_back(Tensor::zeros(p.value.shape()));
    if (adam) v->push_back(Tensor::zeros(p.value.shape()));
  }
  std::vector<float> flat;
  for (int which = 0; which < (adam ? 2 : 1); ++which) {
    std::vector<Tensor>& out = which == 0 ? *m : *v;
    for (size_t b = 0; b < ex_.buckets(); ++b) {
      GradExchange::Chunk c = ex_.chunk(b);
      const std::vector<float>& mine = which == 0 ? shards_[b].m : shards_[b].v;
      flat.assign(c.size, 0.0f);
      std::copy(mine.begin(), mine.end(), flat.begin() + static_cast<long>(c.begin));
      comm_.allgather_chunks(flat.data(), flat.size());
      for_params(c, params, [&](size_t i, size_t at, size_t n) { std::copy_n(flat.data() + at, n, out[i].f32()); });
    }
  }
}

size_t ZeroOptimizer::state_bytes() const {
  size_t n = 0;
  for (const auto& s : shards_) n += (s.m.size() + s.v.size()) * sizeof(float);
  return n;
}

}  // namespace loom::rt
