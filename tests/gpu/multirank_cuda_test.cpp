// multirank_cuda_test.cpp — data-parallel training on CUDA: loom-train's trainer as 2 ranks
// (threads over the in-process transport, as OpenMPI cannot be carried to the GPU machine; both
// ranks on the one GPU, whose gradients go through host memory) must end with the weights of
// 1 rank training the whole batch, for the mlp and the gpt, as tests/integration/train_mpi.sh
// shows on the CPU; with fp16 or PowerSGD gradients (lossy, so not equal to 1 rank) the 2 CUDA
// ranks must end where 2 CPU ranks do, and with --zero 1 (AdamW) where 2 unsharded ranks do.
// NCCL refuses two ranks on one GPU, so this is the MPI-style fallback path.
// usage: multirank_cuda_test [FASHION_MNIST_DIR [TEXT_FILE [cuda|cpu]]]  (cpu: the harness itself;
// defaults: Debian's dataset-fashion-mnist and GPL-3 text)
// Exits 77 (skip) without a usable GPU.
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/rt/comm/comm.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/tensor/ops.hpp"
#include "loom/rt/train/trainer.hpp"

using namespace loom::rt;

namespace {

void quiet(const std::string&) {}

// Trains c on `ranks` threads (1: no communicator); rank 0 exports to `path`.
void train_as(TrainConfig c, int ranks, const std::string& path) {
  c.export_path = path;
  if (ranks == 1) {
    train(c, quiet);
    return;
  }
  auto transports = make_inproc_group(ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        Communicator comm(std::move(transports[static_cast<size_t>(r)]), 60.0);
        TrainConfig mine = c;
        mine.comm = &comm;
        train(mine, quiet);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

double largest_difference(const std::string& a, const std::string& b) {
  const ModelFile x = load_model(a), y = load_model(b);
  if (x.params.size() != y.params.size()) throw Error(a + " and " + b + " hold different parameters");
  double worst = 0;
  for (size_t i = 0; i < x.params.size(); ++i) {
    const Tensor& p = x.params[i].second;
    const Tensor& q = y.params[i].second;
    for (int64_t k = 0; k < p.numel(); ++k) worst = std::fmax(worst, std::fabs(p.f32()[k] - q.f32()[k]));
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string data = argc > 1 ? argv[1] : TrainConfig{}.data_dir;
  const std::string text = argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3";
  const std::string device = argc > 3 ? argv[3] : "cuda";
  std::string why;
  if (device == "cuda" && !ops::cuda_usable(&why)) {
    std::printf("SKIP: no usable CUDA device (%s)\n", why.c_str());
    return 77;
  }
  char dir_template[] = "/tmp/multirank_cuda_test.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }
  int failures = 0;
  try {
    for (const std::string model : {"mlp", "gpt"}) {
      TrainConfig c;
      c.model = loom::parse_choice<ModelKind>(model);
      c.device = loom::parse_choice<DeviceChoice>(device);
      c.steps = 12;
      c.seed = 3;
      c.evaluate = false;
      c.log_every = 1 << 30;
      c.balance = Balance::kStatic;  // uneven shares when the ranks differ; equal here
      if (model == "mlp") {
        c.data_dir = data;
        c.global_batch = 64;
        c.lr = 0.05f;
      } else {
        c.text_path = text;
        c.context = 32;
        c.gpt_layers = 2;
        c.heads = 4;
        c.embd = 32;
        c.global_batch = 12;
        c.lr = 0.1f;
      }
      const std::string one = std::string(dir) + "/" + model + "-1.h5", two = std::string(dir) + "/" + model + "-2.h5";
      train_as(c, 1, one);
      train_as(c, 2, two);
      const double d = largest_difference(one, two);
      const bool ok = d < 1e-5;
      std::printf("multirank_cuda_test: %s on %s, 12 steps: 2 ranks against 1, largest weight difference %.3g %s\n",
                  model.c_str(), device.c_str(), d, ok ? "ok" : "FAIL");
      failures += !ok;
      if (model != "mlp") continue;
      {  // ZeRO-1: AdamW's moments sharded (held and updated in host memory) against unsharded
        TrainConfig z = c;
        z.optim.kind = OptimKind::kAdamw;
        z.lr = 0.002f;
        const std::string whole = std::string(dir) + "/adam-2.h5", sharded = std::string(dir) + "/adam-zero.h5";
        train_as(z, 2, whole);
        z.zero = 1;
        train_as(z, 2, sharded);
        const double dz = largest_difference(whole, sharded);
        const bool okz = dz < 1e-5;
        std::printf("multirank_cuda_test: mlp, adamw, --zero 1, 2 ranks on %s against 2 unsharded: largest weight "
                    "difference %.3g %s\n", device.c_str(), dz, okz ? "ok" : "FAIL");
        failures += !okz;
      }
      for (const char* compress : {"fp16", "powersgd:rank=4,start=2"}) {
        TrainConfig z = c;
        z.grad_compress = compress;
        const std::string here = std::string(dir) + "/z-" + device + ".h5", cpu = std::string(dir) + "/z-cpu.h5";
        train_as(z, 2, here);
        z.device = DeviceChoice::kCpu;
        train_as(z, 2, cpu);
        const double dz = largest_difference(here, cpu);
        const bool okz = dz < 1e-4;
        std::printf("multirank_cuda_test: mlp, --grad-compress %s, 2 ranks on %s against 2 on the CPU: largest weight "
                    "difference %.3g %s\n", compress, device.c_str(), dz, okz ? "ok" : "FAIL");
        failures += !okz;
      }
    }
  } catch (const std::exception& e) {
    std::printf("multirank_cuda_test: FAIL: %s\n", e.what());
    failures = 1;
  }
  std::string rm = std::string("rm -rf '") + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "multirank_cuda_test: could not remove %s\n", dir);
  return failures ? 1 : 0;
}
