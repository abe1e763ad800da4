// loom_torch.cpp — the C ABI of loom_torch.h over the runtime's Communicator, GradExchange and
// Balancer: the same collectives, buckets, PowerSGD and shares that loom-train uses.
#include "loom_torch.h"

#ifdef LOOM_HAVE_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/comm/balancer.hpp"
#include "loom/rt/comm/comm.hpp"
#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "torch_abi.hpp"

using loom::rt::Error;

struct lt_world {
  std::unique_ptr<loom::rt::Communicator> comm;
  std::unique_ptr<loom::rt::DeviceCollectives> device;  // NCCL for uneven chunks on GPUs, once asked
  std::string device_why;                               // why there is none
  bool device_asked = false;
  bool started_mpi = false;
  int local_rank = 0, local_size = 1;
};

struct lt_exchange {
  lt_world* w;
  std::unique_ptr<loom::rt::DeviceCollectives> nccl;  // before ex: it outlives the exchange that uses it
  std::string route;                                  // how CUDA gradients travel, and why
  loom::rt::GradExchange ex;
  std::vector<loom::rt::Param> params;
  std::vector<std::vector<int64_t>> shapes;  // as the exchange sees them
  std::vector<char> cuda, seen;
  bool powersgd = false;
  int gpu = -1;
  bool begun = false;
  lt_exchange(lt_world* world, loom::rt::CompressConfig c, double bucket_mb) : w(world), ex(std::move(c), bucket_mb) {}
};

struct lt_balancer {
  loom::rt::Balancer b;
  int ranks;
};

std::string& lt::last_error() {
  thread_local std::string message;
  return message;
}

namespace {

using lt::guarded;
using lt::need;

// The ranks that share this rank's node: its index among them, and how many there are.
void local_place(lt_world* w, const std::vector<int>& node_of_rank) {
  const int me = w->comm->rank();
  w->local_rank = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.begin() + me, node_of_rank[me]));
  w->local_size = static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), node_of_rank[me]));
}

void start_world(lt_world* w, double timeout_s) {
  if (!(timeout_s > 0) || timeout_s > 86400) throw Error("the collective timeout must be in (0, 86400] seconds");
#ifdef LOOM_HAVE_MPI
  if (loom::rt::launched_by_mpi()) {
    int init = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&init);
    if (!init) {  // SERIALIZED: the exchange's thread drives MPI while backward runs
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      w->started_mpi = true;
    }
    w->comm = std::make_unique<loom::rt::Communicator>(loom::rt::make_mpi_transport(), timeout_s);
    const std::vector<int> nodes = loom::rt::mpi_node_ids();
    w->comm->set_nodes(nodes);
    local_place(w, nodes);
    return;
  }
#else
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v))
      throw Error(std::string("started by an MPI launcher (") + v + " is set), but this Loom was built without MPI");
#endif
  auto group = loom::rt::make_inproc_group(1);
  w->comm = std::make_unique<loom::rt::Communicator>(std::move(group[0]), timeout_s);
}

// The shape the exchange sees: PowerSGD takes a tensor of 3+ dimensions as [dim 0, the rest].
std::vector<int64_t> exchange_shape(const int64_t* dims, int ndim) {
  if (ndim < 0 || ndim > 16) throw Error("a parameter has " + std::to_string(ndim) + " dimensions");
  std::vector<int64_t> s(dims, dims + ndim);
  if (s.size() > 2) {
    int64_t rest = 1;
    for (size_t i = 1; i < s.size(); ++i) rest *= s[i];
    s = {s[0], rest};
  }
  if (s.empty()) s = {1};
  return s;
}

// Several ranks' CUDA gradients: summed by NCCL in device memory where it can be used (as
// loom-train does), else staged through host memory over the ranks' transport.
void route_cuda_gradients(lt_exchange* x) {
  if (x->gpu < 0) {
    x->route = "host memory";
    return;
  }
  std::string why = "one rank";
  if (x->w->comm->size() > 1) {
    loom::rt::ops::use_gpu(x->gpu);
    x->nccl = loom::rt::gpu_collectives(*x->w->comm, x->w->comm->timeout(), x->powersgd, &why);
  }
  if (x->nccl) {
    x->ex.set_device_comm(x->nccl.get());
    x->route = "nccl: " + x->nccl->describe();
  } else {
    x->route = "GPU gradients staged through host memory: " + why;
  }
}

void start_step(lt_exchange* x) {
  if (x->begun) return;
  if (x->gpu >= 0) loom::rt::ops::use_gpu(x->gpu);
  x->ex.begin(*x->w->comm, x->params);
  std::fill(x->seen.begin(), x->seen.end(), 0);
  x->begun = true;
}

void check_param(const lt_exchange* x, int param) {
  if (param < 0 || static_cast<size_t>(param) >= x->params.size())
    throw Error("parameter " + std::to_string(param) + " is not one of the " + std::to_string(x->params.size()) +
                " the exchange was made with");
}

// A collective of uneven chunks: the counts (one per rank) checked, then `run`.
template <class Run>
int uneven(lt_world* w, const float* data, const size_t* counts, const char* what, Run run) {
  return guarded([&] {
    need(w, "the world");
    if (!counts) throw Error(std::string(what) + " without counts");
    const std::vector<size_t> c(counts, counts + w->comm->size());
    if (!data && std::any_of(c.begin(), c.end(), [](size_t k) { return k > 0; }))
      throw Error(std::string(what) + " of a null buffer");
    run(c);
  });
}

}  // namespace

extern "C" {

const char* lt_last_error(void) { return lt::last_error().c_str(); }

int lt_init(double timeout_s, lt_world** out) {
  return guarded([&] {
    need(out, "lt_init's out");
    auto w = std::make_unique<lt_world>();
    start_world(w.get(), timeout_s);
    *out = w.release();
  });
}

int lt_rank(const lt_world* w) { return w ? w->comm->rank() : -1; }
int lt_size(const lt_world* w) { return w ? w->comm->size() : -1; }
int lt_local_rank(const lt_world* w) { return w ? w->local_rank : -1; }
int lt_local_size(const lt_world* w) { return w ? w->local_size : -1; }

int lt_describe(const lt_world* w, char* out, size_t cap) {
  return guarded([&] {
    need(w, "the world");
    need(out, "lt_describe's out");
    const std::string s = w->comm->size() > 1 ? std::string(w->comm->backend()) + ": " + w->comm->describe() : "one process";
    if (cap == 0) throw Error("lt_describe needs room");
    std::snprintf(out, cap, "%s", s.c_str());
  });
}

int lt_shutdown(lt_world* w) {
  return guarded([&] {
    if (!w) return;
    const bool mpi = w->started_mpi;
    delete w;
#ifdef LOOM_HAVE_MPI
    int done = 0;
    if (mpi && (MPI_Finalized(&done), !done)) MPI_Finalize();
#else
    (void)mpi;
#endif
  });
}

void lt_abort(lt_world* w, int code) {
#ifdef LOOM_HAVE_MPI
  if (w && w->comm->size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
#else
  (void)w;
  (void)code;
#endif
}

int lt_allreduce_sum(lt_world* w, float* data, size_t n, int half_payload) {
  return guarded([&] {
    need(w, "the world");
    if (n && !data) throw Error("allreduce of a null buffer");
    if (half_payload) w->comm->allreduce_sum_half(data, n);
    else w->comm->allreduce_sum(data, n);
  });
}

int lt_reduce_scatter_sum_v(lt_world* w, float* data, const size_t* counts) {
  return uneven(w, data, counts, "reduce-scatter", [&](const std::vector<size_t>& c) { w->comm->reduce_scatter_sum_v(data, c); });
}

int lt_device_route(lt_world* w, int gpu, int* nccl, char* why, size_t why_size) {
  return guarded([&] {
    need(w, "the world");
    if (!nccl) throw Error("lt_device_route without a result");
    if (!w->device_asked) {
      w->device_asked = true;
      w->device_why = "one rank";
      if (w->comm->size() > 1) {
        loom::rt::ops::use_gpu(gpu);
        w->device = loom::rt::gpu_collectives(*w->comm, w->comm->timeout(), false, &w->device_why);
      }
    }
    *nccl = w->device ? 1 : 0;
    const std::string text = w->device ? "nccl: " + w->device->describe() : w->device_why;
    if (why && why_size) std::snprintf(why, why_size, "%s", text.c_str());
  });
}

int lt_device_reduce_scatter_sum_v(lt_world* w, float* data, const size_t* counts) {
  return uneven(w, data, counts, "reduce-scatter", [&](const std::vector<size_t>& c) {
    if (!w->device) throw Error("no NCCL communicator: call lt_device_route first");
    w->device->reduce_scatter_sum_v(data, c);
  });
}

int lt_device_allgather_v(lt_world* w, float* data, const size_t* counts) {
  return uneven(w, data, counts, "allgather", [&](const std::vector<size_t>& c) {
    if (!w->device) throw Error("no NCCL communicator: call lt_device_route first");
    w->device->allgather_v(data, c);
  });
}

int lt_allgather_v(lt_world* w, float* data, const size_t* counts) {
  return uneven(w, data, counts, "allgather", [&](const std::vector<size_t>& c) { w->comm->allgather_v(data, c); });
}

// Doubles (metadata, integers up to 2^53) travel whole, one broadcast from each rank, and are
// added in rank order: the same sum on every rank. Not for gradients (those are float32).
int lt_allreduce_sum_f64(lt_world* w, double* data, size_t n) {
  return guarded([&] {
    need(w, "the world");
    if (n && !data) throw Error("allreduce of a null buffer");
    std::vector<double> total(n, 0.0), theirs(n);
    for (int r = 0; r < w->comm->size(); ++r) {
      if (r == w->comm->rank()) std::copy(data, data + n, theirs.begin());
      w->comm->broadcast(theirs.data(), n * sizeof(double), r);
      for (size_t i = 0; i < n; ++i) total[i] += theirs[i];
    }
    std::copy(total.begin(), total.end(), data);
  });
}

int lt_broadcast(lt_world* w, void* data, size_t bytes, int root) {
  return guarded([&] {
    need(w, "the world");
    if (bytes && !data) throw Error("broadcast of a null buffer");
    w->comm->broadcast(data, bytes, root);
  });
}

int lt_exchange_new(lt_world* w, const char* compress, double bucket_mb, int n_params, const int* ndims,
                    const int64_t* shapes, const int* on_cuda, int cuda_device, lt_exchange** out) {
  return guarded([&] {
    need(w, "the world");
    need(out, "lt_exchange_new's out");
    if (n_params <= 0) throw Error("the exchange needs at least one parameter");
    need(ndims, "ndims");
    need(shapes, "shapes");
    need(on_cuda, "on_cuda");
    const loom::rt::CompressConfig cc = loom::rt::parse_grad_compress(compress ? compress : "none");
    auto x = std::make_unique<lt_exchange>(w, cc, bucket_mb);
    x->powersgd = cc.kind == "powersgd";
    const int64_t* dims = shapes;
    for (int i = 0; i < n_params; ++i) {
      std::vector<int64_t> s = exchange_shape(dims, ndims[i]);
      dims += ndims[i];
      const bool cuda = on_cuda[i] != 0;
#ifndef LOOM_HAVE_CUDA
      if (cuda) throw Error("a gradient lives on a GPU, but this Loom was built without CUDA");
#endif
      if (cuda != (on_cuda[0] != 0)) throw Error("the parameters are on different devices (host and CUDA)");
      loom::rt::Param p;
      p.name = std::to_string(i);
      p.grad = cuda ? loom::rt::Tensor::borrow(nullptr, s, loom::rt::DType::kF32, loom::rt::Device::kCuda)
                    : loom::rt::Tensor::zeros(s);
      x->params.push_back(std::move(p));
      x->shapes.push_back(std::move(s));
      x->cuda.push_back(cuda ? 1 : 0);
    }
    x->seen.assign(x->params.size(), 0);
    x->gpu = on_cuda[0] ? cuda_device : -1;
    route_cuda_gradients(x.get());
    *out = x.release();
  });
}

int lt_exchange_ready(lt_exchange* x, int param, void* grad) {
  return guarded([&] {
    need(x, "the exchange");
    check_param(x, param);
    need(grad, "the gradient");
    start_step(x);
    loom::rt::Param& p = x->params[static_cast<size_t>(param)];
    if (x->cuda[static_cast<size_t>(param)])
      p.grad = loom::rt::Tensor::borrow(grad, x->shapes[static_cast<size_t>(param)], loom::rt::DType::kF32,
                                        loom::rt::Device::kCuda);
    else
      std::memcpy(p.grad.f32(), grad, p.grad.bytes());
    x->seen[static_cast<size_t>(param)] = 1;
    x->ex.ready(static_cast<size_t>(param));
  });
}

int lt_exchange_finish(lt_exchange* x, float* extras, size_t n_extras, int64_t step) {
  return guarded([&] {
    need(x, "the exchange");
    if (n_extras && !extras) throw Error("null extras");
    start_step(x);
    for (size_t i = 0; i < x->params.size(); ++i) {  // what backward never reached adds nothing
      if (x->seen[i]) continue;
      if (x->cuda[i]) throw Error("parameter " + std::to_string(i) + " has no gradient on the GPU this step");
      x->params[i].grad.fill(0.0f);
    }
    std::vector<float> e(extras, extras + n_extras);
    x->begun = false;  // a failed step starts afresh
    x->ex.finish(e, step);
    std::copy(e.begin(), e.end(), extras);
  });
}

int lt_exchange_result(lt_exchange* x, int param, void* dst) {
  return guarded([&] {
    need(x, "the exchange");
    check_param(x, param);
    need(dst, "the destination");
    const loom::rt::Param& p = x->params[static_cast<size_t>(param)];
    if (x->cuda[static_cast<size_t>(param)]) throw Error("a GPU gradient is summed where it lies");
    std::memcpy(dst, p.grad.f32(), p.grad.bytes());
  });
}

int lt_exchange_stats(const lt_exchange* x, size_t* last_bytes, size_t* plain_bytes, size_t* buckets) {
  return guarded([&] {
    need(x, "the exchange");
    if (last_bytes) *last_bytes = x->ex.last_bytes();
    if (plain_bytes) *plain_bytes = x->ex.plain_bytes();
    if (buckets) *buckets = x->ex.buckets();
  });
}

int lt_exchange_route(const lt_exchange* x, char* out, size_t cap) {
  return guarded([&] {
    need(x, "the exchange");
    need(out, "lt_exchange_route's out");
    if (cap == 0) throw Error("lt_exchange_route needs room");
    std::snprintf(out, cap, "%s", x->route.c_str());
  });
}

void lt_exchange_free(lt_exchange* x) { delete x; }

int lt_balancer_new(const char* mode, int global_batch, int ranks, int replan_every, const double* weights,
                    lt_balancer** out) {
  return guarded([&] {
    need(out, "lt_balancer_new's out");
    need(mode, "the mode");
    need(weights, "the weights");
    const std::string m = mode;
    if (m != "off" && m != "static" && m != "dynamic") throw Error("balance must be off, static or dynamic, not '" + m + "'");
    if (ranks < 1) throw Error("a balancer needs at least one rank");
    if (global_batch < ranks)
      throw Error("the global batch (" + std::to_string(global_batch) + ") is smaller than the world (" +
                  std::to_string(ranks) + " ranks): every rank needs at least one sample a step");
    if (replan_every < 1) throw Error("replan_every must be positive");
    auto b = std::make_unique<lt_balancer>(lt_balancer{loom::rt::Balancer(loom::parse_choice<loom::rt::Balance>(m), global_batch, ranks, replan_every), ranks});
    b->b.start(std::vector<double>(weights, weights + ranks));
    *out = b.release();
  });
}

int lt_balancer_shares(const lt_balancer* b, int* out) {
  return guarded([&] {
    need(b, "the balancer");
    need(out, "lt_balancer_shares' out");
    const auto& s = b->b.shares();
    std::copy(s.begin(), s.end(), out);
  });
}

int lt_balancer_observe(lt_balancer* b, const double* seconds, int* replanned) {
  return guarded([&] {
    need(b, "the balancer");
    need(seconds, "the seconds");
    const bool r = b->b.observe(std::vector<double>(seconds, seconds + b->ranks));
    if (replanned) *replanned = r ? 1 : 0;
  });
}

void lt_balancer_free(lt_balancer* b) { delete b; }

}  // extern "C"
