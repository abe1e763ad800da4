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
  for_pieces({c.params, c.flat, c.size, 0, c.size, c.per_rank, c.ranks}, params, [&](size_t i, size_t, size_t at, size_t n) { fn(i, at, n); });
}

bool on_cpu(const std::vector<Param>& params) { return params.empty() || params[0].value.device() == Device::kCpu; }

// n floats of t from element `at` to dst on device d.
void copy_floats(Device d, float* dst, const Tensor& t, size_t at, size_t n) {
  if (t.device() == d) ops::scale_copy(d, dst, t.f32() + at, 1.0f, static_cast<int64_t>(n));
  else if (t.device() == Device::kCpu) ops::upload(d, dst, t.f32() + at, n * sizeof(float));
  else ops::download(t.device(), dst, t.f32() + at, n * sizeof(float));
}

}  // namespace

void ZeroOptimizer::shard(Optimizer& opt, const std::vector<Param>& params) {
  const bool adam = opt.keeps_second_moment();
  // Moments restored from a checkpoint (whole, per parameter): this rank keeps its chunks.
  const auto& rm = opt.first_moments();
  const auto& rv = opt.second_moments();
  const bool restored = rm.size() == params.size() && (!adam || rv.size() == params.size());
  shards_.resize(ex_.buckets());
  const Device d = packed() ? ex_.device() : Device::kCpu;  // where the moments live
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);  // known: the first step's gradients are reduced
    Shard& s = shards_[b];
    if (packed()) {
      s.dm = Tensor::zeros({static_cast<int64_t>(c.count)}, DType::kF32, d);
      if (adam) s.dv = Tensor::zeros({static_cast<int64_t>(c.count)}, DType::kF32, d);
    } else {
      s.m.assign(c.count, 0.0f);
      if (adam) s.v.assign(c.count, 0.0f);
      if (!on_cpu(params)) s.w.resize(c.count);
    }
    if (!restored) continue;
    float* m = packed() ? s.dm.f32() : s.m.data();
    float* v = !adam ? nullptr : packed() ? s.dv.f32() : s.v.data();
    for_pieces(c, params, [&](size_t i, size_t p_off, size_t c_off, size_t len) {
      copy_floats(d, m + c_off, rm[i], p_off, len);
      if (adam) copy_floats(d, v + c_off, rv[i], p_off, len);
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

// The sum of squares of each rank's chunks (read from the device where the buckets are packed
// there), summed over the ranks; every chunk scaled where it lies.
void ZeroOptimizer::clip_chunks(float clip) {
  const Device d = packed() ? ex_.device() : Device::kCpu;
  double sq = 0;
  std::vector<float> host;
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    const float* g = c.flat + c.begin;
    if (d != Device::kCpu) {
      host.resize(c.count);
      ops::download(d, host.data(), g, c.count * sizeof(float));
      g = host.data();
    }
    for (size_t k = 0; k < c.count; ++k) sq += static_cast<double>(g[k]) * g[k];
  }
  float total = static_cast<float>(sq);
  comm_.allreduce_sum(&total, 1);
  const float norm = std::sqrt(total);
  if (norm <= clip) return;
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    ops::scale_copy(d, c.flat + c.begin, c.flat + c.begin, clip / (norm + 1e-6f), static_cast<int64_t>(c.count));
  }
}

// Packed buckets on the device: this rank's chunk of the parameters copied into the bucket's
// packed weights, stepped there with the chunk's moments, then every chunk gathered and copied
// back into the parameters. Every copy stays on the device.
size_t ZeroOptimizer::step_packed(Optimizer& opt, std::vector<Param>& params, float lr) {
  DeviceCollectives& dc = *ex_.device_comm();
  const Device d = ex_.device();
  weights_.resize(ex_.buckets());
  std::vector<Optimizer::Span> spans;
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    Shard& s = shards_[b];
    if (static_cast<size_t>(s.dm.numel()) != c.count)
      throw Error("ZeRO-1: bucket " + std::to_string(b) + " changed its chunk between steps");
    Tensor& w = weights_[b];
    if (!w.defined()) w = Tensor::zeros({static_cast<int64_t>(c.padded())}, DType::kF32, d);
    for_pieces(c, params, [&](size_t i, size_t p_off, size_t c_off, size_t len) {
      copy_floats(d, w.f32() + c.begin + c_off, params[i].value, p_off, len);
    });
    spans.push_back({w.f32() + c.begin, c.flat + c.begin, s.dm.f32(), s.dv.defined() ? s.dv.f32() : nullptr,
                     static_cast<int64_t>(c.count)});
  }
  opt.step_spans(spans, lr, d);
  size_t sent = 0;
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    dc.allgather_chunks(weights_[b].f32(), c.per_rank);
    sent += c.size * sizeof(float);
    for_params(c, params, [&](size_t i, size_t at, size_t n) {
      ops::scale_copy(d, params[i].value.f32(), weights_[b].f32() + at, 1.0f, static_cast<int64_t>(n));
    });
  }
  return sent;
}

size_t ZeroOptimizer::step(Optimizer& opt, std::vector<Param>& params, float lr, float clip) {
  if (shards_.empty()) shard(opt, params);
  if (clip > 0) clip_chunks(clip);
  if (packed()) return step_packed(opt, params, lr);
  const bool cpu = on_cpu(params);
  if (cpu) bind_weights(params);
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
  if (packed()) {
    gather_packed(params, false, m);
    if (adam) gather_packed(params, true, v);
    return;
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

// The first (or second) moments of every bucket, each rank's chunk gathered on the device, into
// the host tensors `out` shaped as the parameters.
void ZeroOptimizer::gather_packed(const std::vector<Param>& params, bool second, std::vector<Tensor>* out) {
  DeviceCollectives& dc = *ex_.device_comm();
  const Device d = ex_.device();
  for (size_t b = 0; b < ex_.buckets(); ++b) {
    GradExchange::Chunk c = ex_.chunk(b);
    const Tensor& mine = second ? shards_[b].dv : shards_[b].dm;
    Tensor flat = Tensor::zeros({static_cast<int64_t>(c.padded())}, DType::kF32, d);
    copy_floats(d, flat.f32() + c.begin, mine, 0, c.count);
    dc.allgather_chunks(flat.f32(), c.per_rank);
    for_params(c, params, [&](size_t i, size_t at, size_t n) {
      ops::download(d, (*out)[i].f32(), flat.f32() + at, n * sizeof(float));
    });
  }
}

size_t ZeroOptimizer::state_bytes() const {
  auto floats = [](const Tensor& t) { return t.defined() ? static_cast<size_t>(t.numel()) : 0; };
  size_t n = 0;
  for (const auto& s : shards_) n += (s.m.size() + s.v.size() + floats(s.dm) + floats(s.dv)) * sizeof(float);
  return n;
}

}  // namespace loom::rt
