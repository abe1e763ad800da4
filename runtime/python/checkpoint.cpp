// checkpoint.cpp — loom_torch.h's checkpoints: the runtime's own checkpoint files
// (save_checkpoint / load_checkpoint), filled from and read into a framework's host memory.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "loom/rt/io/model_io.hpp"
#include "loom_torch.h"
#include "torch_abi.hpp"

struct lt_checkpoint {
  loom::rt::Checkpoint c;
};

namespace {

using Named = std::vector<std::pair<std::string, loom::rt::Tensor>>;

Named& group_of(loom::rt::Checkpoint& c, int group) {
  switch (group) {
    case 0: return c.params;
    case 1: return c.opt_m;
    case 2: return c.opt_v;
    default: throw loom::rt::Error("checkpoint group " + std::to_string(group) + " is not 0, 1 or 2");
  }
}

const Named& group_of(const loom::rt::Checkpoint& c, int group) {
  return group_of(const_cast<loom::rt::Checkpoint&>(c), group);
}

std::string& text_of(loom::rt::Checkpoint& c, int which) {
  switch (which) {
    case 0: return c.model_config;
    case 1: return c.train_config;
    case 2: return c.state_json;
    case 3: return c.rng;
    default: throw loom::rt::Error("checkpoint text " + std::to_string(which) + " is not 0 to 3");
  }
}

const std::pair<std::string, loom::rt::Tensor>& tensor_at(const lt_checkpoint* c, int group, size_t i) {
  lt::need(c, "the checkpoint");
  const Named& g = group_of(c->c, group);
  if (i >= g.size()) throw loom::rt::Error("checkpoint group " + std::to_string(group) + " has no tensor " + std::to_string(i));
  return g[i];
}

}  // namespace

extern "C" {

int lt_ckpt_new(lt_checkpoint** out) {
  return lt::guarded([&] {
    lt::need(out, "lt_ckpt_new's out");
    *out = new lt_checkpoint();
  });
}

int lt_ckpt_add(lt_checkpoint* c, int group, const char* name, const float* data, int ndim, const int64_t* shape) {
  return lt::guarded([&] {
    lt::need(c, "the checkpoint");
    lt::need(name, "the name");
    if (ndim < 0 || ndim > 16 || (ndim > 0 && !shape)) throw loom::rt::Error(std::string(name) + ": a bad shape");
    std::vector<int64_t> s(shape, shape + ndim);
    if (s.empty()) s = {1};  // a scalar (a step count) as one value
    loom::rt::Tensor t = loom::rt::Tensor::empty(s);
    if (t.numel() && !data) throw loom::rt::Error(std::string(name) + ": null data");
    if (t.numel()) std::memcpy(t.f32(), data, t.bytes());
    group_of(c->c, group).emplace_back(name, std::move(t));
  });
}

int lt_ckpt_set_text(lt_checkpoint* c, int which, const char* text, size_t len) {
  return lt::guarded([&] {
    lt::need(c, "the checkpoint");
    if (len && !text) throw loom::rt::Error("null text");
    text_of(c->c, which).assign(text ? text : "", len);
  });
}

int lt_ckpt_save(const lt_checkpoint* c, const char* path) {
  return lt::guarded([&] {
    lt::need(c, "the checkpoint");
    lt::need(path, "the path");
    loom::rt::save_checkpoint(path, c->c);
  });
}

int lt_ckpt_load(const char* path, lt_checkpoint** out) {
  return lt::guarded([&] {
    lt::need(path, "the path");
    lt::need(out, "lt_ckpt_load's out");
    auto c = std::make_unique<lt_checkpoint>();
    c->c = loom::rt::load_checkpoint(path);
    *out = c.release();
  });
}

int lt_ckpt_count(const lt_checkpoint* c, int group, size_t* n) {
  return lt::guarded([&] {
    lt::need(c, "the checkpoint");
    lt::need(n, "the count");
    *n = group_of(c->c, group).size();
  });
}

int lt_ckpt_info(const lt_checkpoint* c, int group, size_t i, char* name, size_t cap, int* ndim, int64_t* shape) {
  return lt::guarded([&] {
    const auto& t = tensor_at(c, group, i);
    lt::need(name, "the name buffer");
    lt::need(ndim, "ndim");
    lt::need(shape, "the shape buffer");
    if (cap == 0 || t.second.ndim() > 16) throw loom::rt::Error("no room for tensor " + t.first);
    std::snprintf(name, cap, "%s", t.first.c_str());
    *ndim = t.second.ndim();
    std::copy(t.second.shape().begin(), t.second.shape().end(), shape);
  });
}

int lt_ckpt_read(const lt_checkpoint* c, int group, size_t i, float* dst) {
  return lt::guarded([&] {
    const auto& t = tensor_at(c, group, i);
    lt::need(dst, "the destination");
    std::memcpy(dst, t.second.f32(), t.second.bytes());
  });
}

int lt_ckpt_text(const lt_checkpoint* c, int which, char* dst, size_t cap, size_t* len) {
  return lt::guarded([&] {
    lt::need(c, "the checkpoint");
    lt::need(len, "the length");
    const std::string& s = text_of(const_cast<loom::rt::Checkpoint&>(c->c), which);
    *len = s.size();
    if (dst) std::memcpy(dst, s.data(), std::min(cap, s.size()));
  });
}

void lt_ckpt_free(lt_checkpoint* c) { delete c; }

}  // extern "C"
