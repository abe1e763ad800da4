// loom_train_main.cpp — `loom-train`: options (command line and --config file, the same keys)
// parsed with Boost.Program_options, validated, then handed to the runtime's trainer.
#include <boost/program_options.hpp>

#include "config.h"
#ifdef LOOM_HAVE_MPI
#include <mpi.h>
#endif

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <fstream>
#include <map>
#include <vector>
#include <iostream>
#include <string>
#include <thread>

#include "loom/rt/comm/grad_exchange.hpp"
#include "loom/rt/nn/mlp.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/json.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"
#include "loom/rt/io/text.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/train/options.hpp"
#include "loom/rt/train/trainer.hpp"

namespace po = boost::program_options;

namespace {

using Usage = loom::UsageError;

// What an option's value is refused with (rt::Error from the runtime's checks) is a usage error.
template <typename F>
auto as_usage(F f) {
  try {
    return f();
  } catch (const loom::rt::Error& e) {
    throw Usage{e.what()};
  }
}

// The checks that need the whole configuration, and what the launcher's environment adds.
void finish_config(loom::rt::TrainConfig& c) {
  as_usage([&] { return loom::rt::parse_grad_compress(c.grad_compress); });
  as_usage([&] { loom::rt::cpu::set_gemm_backend(loom::word_of(c.gemm)); return 0; });
  auto env_number = [](const char* name, double fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    double d = std::strtod(v, &end);
    if (*end) throw loom::rt::Error(std::string(name) + "='" + v + "' is not a number");
    return d;
  };
  c.device_weight = env_number("LOOM_DEVICE_WEIGHT", 1.0);
  if (const char* cls = std::getenv("LOOM_GPU_CLASS")) c.gpu_class = cls;
  c.emulate_speed = env_number("LOOM_EMULATE_SPEED", 1.0);
  c.device_memory = env_number("LOOM_DEVICE_MEMORY", 0.0);
  c.inject_overflow_step = static_cast<int64_t>(env_number("LOOM_INJECT_OVERFLOW_STEP", -1));  // tests only
  as_usage([&] { loom::rt::validate(c); return 0; });  // a bad option value is a usage error (exit 2)
}

// The command line, then --config FILE, into vm. A later occurrence of an option wins, as job
// scripts append the user's overrides; Boost's errors are usage errors.
void store_options(int argc, char** argv, const po::options_description& opts, po::variables_map& vm) {
  try {
    po::parsed_options parsed = po::parse_command_line(argc, argv, opts);
    std::map<std::string, size_t> last;
    for (size_t i = 0; i < parsed.options.size(); ++i) last[parsed.options[i].string_key] = i;
    std::vector<po::option> kept;
    for (size_t i = 0; i < parsed.options.size(); ++i)
      if (last[parsed.options[i].string_key] == i) kept.push_back(parsed.options[i]);
    parsed.options = kept;
    po::store(parsed, vm);
    if (vm.count("config")) {
      std::ifstream in(vm["config"].as<std::string>());
      if (!in) throw loom::rt::Error("--config: cannot read " + vm["config"].as<std::string>());  // a file, not usage: 1
      po::store(po::parse_config_file(in, opts), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw Usage{e.what()};
  }
}

// --model, --data and what follows from them (the data source, --layers, --qat-weight-scales).
void parse_data(const po::variables_map& vm, loom::rt::TrainOptionText& in, loom::rt::TrainConfig& c) {
  c.config_path = in.config;
  std::string& data = in.data;
  const std::string model = loom::word_of(c.model);
  if (data.empty()) {
    if (model == "gpt") throw Usage{"--model gpt needs --data text:FILE or --data tokens:FILE"};
    data = "fashion-mnist";
  }
  if (data.rfind("fashion-mnist", 0) == 0) {
    if (model != "mlp") throw Usage{"--data fashion-mnist is for --model mlp"};
    if (data.size() > 13) {
      if (data[13] != ':' || data.size() == 14) throw Usage{"--data: expected fashion-mnist or fashion-mnist:DIR"};
      c.data_dir = data.substr(14);
    }
    c.layers = as_usage([&] { return loom::rt::parse_widths(in.layers); });
    if (in.qat_scales != "per-channel" && in.qat_scales != "per-tensor")
      throw Usage{"--qat-weight-scales must be per-channel or per-tensor, not '" + in.qat_scales + "'"};
    c.qat_per_tensor = in.qat_scales == "per-tensor";
    if (!c.init_path.empty() && c.model == loom::rt::ModelKind::kMlp && vm["layers"].defaulted()) c.layers = loom::rt::load_mlp(c.init_path).widths();
  } else if (data.rfind("text:", 0) == 0 && data.size() > 5) {
    if (model != "gpt") throw Usage{"--data text:FILE is for --model gpt"};
    c.text_path = data.substr(5);
  } else if (data.rfind("tokens:", 0) == 0 && data.size() > 7) {
    if (model != "gpt") throw Usage{"--data tokens:FILE is for --model gpt"};
    c.token_files = data.substr(7);
  } else {
    throw Usage{"--data must be fashion-mnist[:DIR], text:FILE or tokens:FILE, not '" + data + "'"};
  }
  if (!vm["vocab"].defaulted() && c.token_files.empty())
    throw Usage{"--vocab is for --data tokens:FILE (a text's vocabulary is its distinct bytes)"};
}

// The checks of what Boost reads without knowing its meaning (validate() checks the rest).
void check_values(const po::variables_map& vm, const loom::rt::TrainOptionText& in, loom::rt::TrainConfig& c) {
  c.seed = loom::rt::parse_seed(in.seed);
  // Counts left out take their defaults; given, they must be positive (validate() checks the rest).
  if (vm.count("steps") && c.steps <= 0)
    throw Usage{"--steps must be positive, not " + std::to_string(c.steps) + " (leave it out to train --epochs)"};
  if (vm.count("ckpt-every") && c.ckpt_every <= 0)
    throw Usage{"--ckpt-every must be positive, not " + std::to_string(c.ckpt_every) + " (leave it out for none)"};
  if ((vm.count("ckpt-every") || c.ckpt_every_min > 0 || c.ckpt_async) && c.ckpt_dir.empty())
    throw Usage{"--ckpt-every, --ckpt-every-min and --ckpt-async need --ckpt-dir"};
}

loom::rt::TrainConfig parse(int argc, char** argv, bool* help_only, std::string* inspect) {
  loom::rt::TrainConfig c;
  loom::rt::TrainOptionText in;
  const po::options_description opts = loom::rt::train_options(c, in);
  po::variables_map vm;
  store_options(argc, argv, opts, vm);
  if (vm.count("version")) {
    std::printf("loom-train (Loom) %s\n", PACKAGE_VERSION);
    *help_only = true;
    return c;
  }
  if (vm.count("help")) {
    std::cout << "usage: loom-train [options]\n" << opts
              << "\nExit status: 0 done, 1 error, 2 bad usage, 75 stopped by SIGUSR1/SIGTERM after a checkpoint\n"
                 "(requeue the job: it resumes from the checkpoint).\n";
    *help_only = true;
    return c;
  }
  if (vm.count("inspect")) {
    *inspect = vm["inspect"].as<std::string>();
    return c;
  }
  parse_data(vm, in, c);
  check_values(vm, in, c);
  finish_config(c);
  return c;
}

}  // namespace

std::atomic<int> g_stop{0};

// Preemption (SIGTERM) and Slurm's warning signal (--signal=USR1@T) ask for a checkpoint and a
// stop (exit 75, EX_TEMPFAIL, so that the job script requeues). The signals are blocked in every
// thread, MPI's and oneDNN's included (they inherit the mask), and taken by one thread in
// sigwait(): a signal never interrupts a system call inside MPI (an interrupted shared-memory
// copy corrupted memory in a test) or the training loop.
extern "C" void on_stop_signal(int sig) { g_stop.store(sig); }

void watch_stop_signals() {
  // Threads that libraries started before main() (OpenBLAS's pool) still take these signals:
  // there the handler only sets the flag (they never run MPI).
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) == 0) g_stop.store(sig);
  }).detach();
}

// Text a file holds, shortened for the terminal (a hostile config can be megabytes).
std::string shown(const std::string& text) {
  if (text.size() <= 4096) return text;
  return text.substr(0, 4096) + "... (" + std::to_string(text.size()) + " bytes)";
}

// What the read verified: every dataset with a Fletcher32 checksum, and those without one.
std::string checksums_text(const std::vector<std::string>& unchecked) {
  if (unchecked.empty()) return "every checksum verified";
  std::string names;
  for (size_t i = 0; i < unchecked.size() && i < 8; ++i) names += (i ? ", " : "") + unchecked[i];
  if (unchecked.size() > 8) names += ", ...";
  return std::to_string(unchecked.size()) + " dataset(s) carry no checksum and were not verified (" + names +
         "); every other checksum verified";
}

// What a resume would say of checkpoint `k`: 0 when it would use it (loom.torch's own are
// restored by loom.torch, which checks them itself), 1 with the reason.
int inspect_resume(const std::string& path, const loom::rt::Checkpoint& k) {
  try {
    const auto st = loom::rt::parse_json_text(k.state_json, path + ": state/json");
    if (st.is_object() && st.contains("format") && st["format"] == "loom.torch 1") {
      std::printf("resume: a loom.torch checkpoint (Checkpoint.restore() reads it)\n");
      return 0;
    }
    loom::rt::check_train_state(path, k);
  } catch (const loom::rt::Error& e) {
    std::printf("resume: refused: %s\n", e.what());
    std::fprintf(stderr, "loom-train: --inspect: a resume would refuse it: %s\n", e.what());
    return 1;
  }
  std::printf("resume: the state is whole (loom-train --resume can use it)\n");
  return 0;
}

// --inspect FILE: what a checkpoint or model file holds; reading it verifies every checksum.
int inspect(const std::string& path) {
  try {
    try {
      loom::rt::Checkpoint k = loom::rt::load_checkpoint(path);
      std::printf("%s: Loom checkpoint, format version %d, %s\n", path.c_str(), loom::rt::kFormatVersion,
                  checksums_text(k.unchecked).c_str());
      std::printf("state: %s\nmodel.config: %s\ntrain.config: %s\n", shown(k.state_json).c_str(),
                  shown(k.model_config).c_str(), shown(k.train_config).c_str());
      for (const auto& p : k.params) std::printf("  /params/%s %s\n", p.first.c_str(), p.second.shape_str().c_str());
      std::printf("  /optimizer: %zu first moments, %zu second moments; rng state %zu bytes\n", k.opt_m.size(),
                  k.opt_v.size(), k.rng.size());
      if (k.shards > 0) {
        std::printf("  sharded: %d shards, every one verified:", k.shards);
        for (int r = 0; r < k.shards; ++r)
          std::printf(" %s (%zu rank tensors)", loom::rt::shard_path(path, r, k.shards).c_str(), k.rank_state[static_cast<size_t>(r)].size());
        std::printf("\n");
      }
      return inspect_resume(path, k);
    } catch (const loom::rt::Error& e) {
      if (std::string(e.what()).find("a Loom model file, not a checkpoint") == std::string::npos) throw;
    }
    loom::rt::ModelFile m = loom::rt::load_model(path);
    std::printf("%s: Loom model, format version %d, %s\nmodel.config: %s\n", path.c_str(), m.version,
                checksums_text(m.unchecked).c_str(), shown(m.config_json).c_str());
    for (const auto& p : m.params) std::printf("  /params/%s %s\n", p.first.c_str(), p.second.shape_str().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-train: --inspect: %s\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  loom::rt::cpu::settle_library_env(argv);  // OpenMP waits that do not starve a busy node; OpenBLAS kernels for this CPU
  bool help_only = false;
  std::string inspect_path;
  loom::rt::TrainConfig c;
  try {
    c = parse(argc, argv, &help_only, &inspect_path);
    if (help_only) return 0;
    if (!inspect_path.empty()) return inspect(inspect_path);
  } catch (const Usage& u) {
    std::fprintf(stderr, "loom-train: %s\nTry 'loom-train --help'.\n", u.what());
    return 2;
  } catch (const std::exception& e) {
    return loom::report("loom-train", e);
  }
  watch_stop_signals();  // before MPI starts its threads
  std::unique_ptr<loom::rt::Communicator> comm;
#ifdef LOOM_HAVE_MPI
  if (loom::rt::launched_by_mpi()) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);  // overlap needs SERIALIZED
    comm = std::make_unique<loom::rt::Communicator>(loom::rt::make_mpi_transport(), c.comm_timeout);
    c.comm = comm.get();
    try {
      comm->set_nodes(loom::rt::mpi_node_ids());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-train: %s\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
#endif
  c.stop_signal = &g_stop;
  int rc = 0;
  try {
    loom::rt::TrainResult r = loom::rt::train(c, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
    if (r.preempted) rc = 75;
  } catch (const std::exception& e) {
    const std::string what = e.what();  // collectives' errors already name the rank
    const std::string who = comm && what.rfind("rank ", 0) != 0 ? "rank " + std::to_string(comm->rank()) + ": " : "";
    std::fprintf(stderr, "loom-train: %s%s\n", who.c_str(), what.c_str());
    rc = 1;
#ifdef LOOM_HAVE_MPI
    if (comm) MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks would wait for this one
#endif
  }
#ifdef LOOM_HAVE_MPI
  if (comm) {
    comm.reset();
    MPI_Finalize();
  }
#endif
  return rc;
}
