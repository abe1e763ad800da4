// loom-serve — serves Loom HDF5 models over the Open Inference Protocol (KServe v2), REST and
// gRPC (Contract 5), with a dynamic batcher per model version.
//
//   loom-serve --model-repository DIR [--spec FILE]... [--bind 127.0.0.1] [--http-port 8000]
//              [--grpc-port 8001] [--max-batch-size 32] [--max-queue-delay-us 500]
//              [--max-queue-size 256] [--request-timeout-ms 30000] [--max-request-bytes 67108864]
//              [--auth-token-file F] [--threads N] [--device auto|cpu|cuda] [--poll-s S]
//              [--log-format text|json] [--strict-readiness] [--exit-on-error] [--allow-symlinks]
//
// SIGTERM/SIGINT: not ready, stop accepting, finish every admitted request, exit 0.
// SIGHUP (or every --poll-s seconds): load new or changed model files, unload removed ones.
#include <signal.h>
#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "config.h"
#include "loom/rt/io/timestamp.hpp"
#include "repository.hpp"
#include "spec.hpp"
#include "frontend.hpp"
#include "kserve_json.hpp"

namespace po = boost::program_options;
using namespace loom::serve;

namespace {

std::mutex g_log_mu;
std::string g_log_format = "text";

void log_line(const std::string& level, const std::string& msg) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_log_format == "json") {
    const std::string ts = loom::rt::utc_timestamp();
    std::fprintf(stderr, "%s\n",
                 dump_json({{"ts", ts}, {"level", level}, {"component", "loom-serve"}, {"msg", msg}}).c_str());
  } else {
    std::fprintf(stderr, "loom-serve: %s%s\n", level == "info" ? "" : (level + ": ").c_str(), msg.c_str());
  }
  std::fflush(stderr);
}

// Stop and reload signals: blocked in every thread started from main and taken by sigtimedwait
// there; a thread a library started before main (OpenBLAS's) may still take one, and its
// handler only records it here, so that a SIGTERM during the first load is not lost.
std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal.store(sig); }

// The next stop or reload signal, or SIGHUP every poll_s seconds (0: none).
int next_signal(const sigset_t& set, double poll_s) {
  static auto next_poll = std::chrono::steady_clock::now() + std::chrono::duration<double>(poll_s);
  for (;;) {
    if (int sig = g_signal.exchange(0)) return sig;
    timespec ts{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig > 0) return sig;
    if (poll_s > 0 && std::chrono::steady_clock::now() >= next_poll) {
      next_poll = std::chrono::steady_clock::now() + std::chrono::duration<double>(poll_s);
      return SIGHUP;
    }
  }
}

std::string read_token(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw loom::rt::Error("--auth-token-file " + path + ": cannot read it");
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    log_line("warning", "--auth-token-file " + path + " can be read by others (chmod 600 it)");
  std::ifstream f(path);
  std::string token;
  std::getline(f, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  if (token.empty()) throw loom::rt::Error("--auth-token-file " + path + ": the first line (the token) is empty");
  return token;
}

}  // namespace

int main(int argc, char** argv) {
  std::string repo_dir, bind, token_file;
  std::vector<std::string> specs;
  int http_port = 8000, grpc_port = 8001;
  double poll_s = 0;
  Context ctx;
  po::options_description desc("loom-serve: KServe v2 inference server for Loom models");
  desc.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "model-repository", po::value(&repo_dir), "DIR/<model>/<version>/model.h5")(
      "spec", po::value(&specs)->composing(), "an InferenceService YAML (examples/inferenceservice.yaml); repeatable")(
      "bind", po::value(&bind)->default_value("127.0.0.1"), "address to listen on (0.0.0.0: every interface)")(
      "http-port", po::value(&http_port)->default_value(8000), "HTTP port (0: any free one, printed)")(
      "grpc-port", po::value(&grpc_port)->default_value(8001), "gRPC port (0: any free one; -1: no gRPC)")(
      "max-batch-size", po::value(&ctx.options.max_batch_size)->default_value(32), "rows per batch")(
      "max-queue-delay-us", po::value(&ctx.options.max_queue_delay_us)->default_value(500),
      "how long a batch waits for more requests")(
      "max-queue-size", po::value(&ctx.options.max_queue_size)->default_value(256),
      "requests waiting per model version before 503 / UNAVAILABLE")(
      "request-timeout-ms", po::value(&ctx.options.request_timeout_ms)->default_value(30000), "per-request timeout")(
      "max-request-bytes", po::value(&ctx.max_request_bytes)->default_value(64 << 20), "largest request body")(
      "read-timeout-s", po::value(&ctx.read_timeout_s)->default_value(30), "a request must arrive within this")(
      "write-timeout-s", po::value(&ctx.write_timeout_s)->default_value(30),
      "an answer must be taken by the client within this (else the connection is cut)")(
      "max-connections", po::value(&ctx.max_connections)->default_value(512), "HTTP connections at once")(
      "auth-token-file", po::value(&token_file), "bearer token required on every endpoint but health")(
      "threads", po::value(&ctx.options.threads)->default_value(1), "BLAS threads per model's forward pass")(
      "device", po::value(&ctx.options.device)->default_value("auto"), "auto (CUDA when usable) | cpu | cuda")(
      "poll-s", po::value(&poll_s), "reload changed models every S seconds (default: on SIGHUP only)")(
      "strict-readiness", po::bool_switch(&ctx.strict_readiness),
      "ready only when every model found is loaded (default: ready when the server serves any)")(
      "exit-on-error", po::bool_switch(&ctx.options.exit_on_error), "fail the start when any model fails to load")(
      "allow-symlinks", po::bool_switch(&ctx.options.allow_symlinks),
      "serve model files that resolve outside the repository (symbolic links)")(
      "log-format", po::value(&g_log_format)->default_value("text"), "text | json");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "loom-serve: %s\n%s", e.what(), (std::ostringstream() << desc).str().c_str());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc;
    return 0;
  }
  if (vm.count("version")) {
    std::printf("loom-serve (Loom) %s\n", PACKAGE_VERSION);
    return 0;
  }
  auto usage_error = [](const std::string& m) {
    std::fprintf(stderr, "loom-serve: %s\n", m.c_str());
    return 2;
  };
  if (g_log_format != "text" && g_log_format != "json") return usage_error("--log-format must be text or json");
  if (repo_dir.empty() && specs.empty()) return usage_error("give --model-repository DIR and/or --spec FILE");
  if (ctx.options.max_batch_size < 1 || ctx.options.max_batch_size > 4096) return usage_error("--max-batch-size must be 1-4096");
  if (ctx.options.max_queue_size < 1) return usage_error("--max-queue-size must be at least 1");
  if (ctx.options.max_queue_delay_us < 0 || ctx.options.request_timeout_ms < 1) return usage_error("bad delay or timeout");
  if (ctx.max_request_bytes < 1024) return usage_error("--max-request-bytes must be at least 1024");
  if (ctx.options.threads < 1) return usage_error("--threads must be at least 1");
  if (ctx.max_connections < 1 || ctx.max_connections > 65536) return usage_error("--max-connections must be 1-65536");
  if (ctx.read_timeout_s < 1 || ctx.read_timeout_s > 86400) return usage_error("--read-timeout-s must be 1-86400");
  if (ctx.write_timeout_s < 1 || ctx.write_timeout_s > 86400) return usage_error("--write-timeout-s must be 1-86400");
  if (vm.count("poll-s") && !(poll_s >= 0.1 && poll_s <= 86400)) return usage_error("--poll-s must be 0.1-86400 seconds");
  if (ctx.options.device != "auto" && ctx.options.device != "cpu" && ctx.options.device != "cuda")
    return usage_error("--device must be auto, cpu or cuda, not '" + ctx.options.device + "'");
  if (http_port < 0 || http_port > 65535 || grpc_port < -1 || grpc_port > 65535) return usage_error("bad port");
#ifndef LOOM_HAVE_GRPC
  if (grpc_port >= 0) {
    log_line("warning", "this build has no gRPC (libgrpc++-dev was missing at configure time): HTTP only");
    grpc_port = -1;
  }
#endif

  // Stop and reload signals go to this thread only (sigwait below), never into a handler.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  try {
    if (!token_file.empty()) ctx.token = read_token(token_file);
    Metrics metrics;
    Repository repo(repo_dir, specs, ctx.options, &metrics, log_line);
    ctx.repo = &repo;
    ctx.metrics = &metrics;
    ctx.log = log_line;
    repo.reload(true);
    HttpServer http(ctx, bind, http_port);
#ifdef LOOM_HAVE_GRPC
    std::unique_ptr<GrpcServer> grpc;
    if (grpc_port >= 0) grpc = std::make_unique<GrpcServer>(ctx, bind, grpc_port);
    const std::string grpc_text = grpc ? bind + ":" + std::to_string(grpc->port()) : "off";
#else
    const std::string grpc_text = "off (not built)";
#endif
    ctx.ready = true;
    log_line("info", "listening: http " + bind + ":" + std::to_string(http.port()) + " grpc " + grpc_text +
                         (ctx.token.empty() ? "" : ", bearer token required") + "; max batch " +
                         std::to_string(ctx.options.max_batch_size) + ", queue " + std::to_string(ctx.options.max_queue_size));
    for (;;) {
      const int sig = next_signal(set, vm.count("poll-s") ? poll_s : 0);
      if (sig != SIGHUP) break;
      try {
        repo.reload(false);
      } catch (const std::exception& e) {
        log_line("error", std::string("reload failed, serving what was loaded: ") + e.what());
      }
    }
    log_line("info", "stopping: no new requests; finishing the admitted ones");
    ctx.stopping = true;
    http.stop_accepting();
#ifdef LOOM_HAVE_GRPC
    if (grpc) grpc->shutdown();
#endif
    http.wait_idle();
    repo.stop();
    log_line("info", "stopped");
    return 0;
  } catch (const std::exception& e) {
    log_line("error", e.what());
    return 1;
  }
}
