// loom-serve — serves Loom HDF5 models over the Open Inference Protocol (KServe v2), REST and
// gRPC (Contract 5), with a dynamic batcher per model version.
//
//   loom-serve --model-repository DIR [--spec FILE]... [--bind 127.0.0.1] [--http-port 8000]
//              [--grpc-port 8001] [--max-batch-size 32] [--max-queue-delay-us 0]
//              [--max-queue-size 256] [--request-timeout-ms 30000] [--max-request-bytes 67108864]
//              [--auth-token-file F] [--threads N] [--device auto|cpu|cuda] [--poll-s S]
//              [--log-format text|json] [--strict-readiness] [--exit-on-error] [--allow-symlinks]
//
//   loom-serve --controller --spec SERVICE.yaml --state-dir DIR [--partition P] [--tick-s 2]
//              [--stable-window-s 60] [--panic-window-s 6] [--scale-down-delay-s 30] ...
//              (Contract 9: the service's replicas as Slurm jobs, and a router to them)
//
// SIGTERM/SIGINT: not ready, stop accepting, finish every admitted request, exit 0.
// SIGHUP (or every --poll-s seconds): load new or changed model files, unload removed ones.
#include <signal.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

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
#ifdef LOOM_HAVE_TCMALLOC
#include <gperftools/tcmalloc.h>
#endif
#include "controller/controller.hpp"
#include "core/kserve_json.hpp"
#include "frontend/servers.hpp"
#include "loom/log.hpp"
#include "loom/rt/proc/process.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "pipeline/pipeline.hpp"
#include "repository/repository.hpp"
#include "spec/services.hpp"
#include "spec/spec.hpp"

namespace po = boost::program_options;
using namespace loom::serve;

namespace {

std::string g_log_format = "text";

// One log line (loom/log.hpp); in JSON, `fields` join ts/level/component/msg (the controller's
// events).
void log_event(const std::string& level, const std::string& msg, const nlohmann::json& fields) {
  static const loom::Logger text("loom-serve"), json("loom-serve", true);
  const bool as_json = g_log_format == "json";
  (as_json ? json : text).write(loom::parse_level(level), msg, as_json && fields.is_object() ? loom::LogMembers(fields) : loom::LogMembers::object());
}

void log_line(const std::string& level, const std::string& msg) { log_event(level, msg, nlohmann::json::object()); }

// The allocator every request's buffers come from (configure.ac: tcmalloc when it is there).
std::string allocator_text() {
#ifdef LOOM_HAVE_TCMALLOC
  int major = 0, minor = 0;
  const char* patch = "";
  tc_version(&major, &minor, &patch);
  return "tcmalloc " + std::to_string(major) + "." + std::to_string(minor);
#else
  return "glibc malloc";
#endif
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

struct Cli {
  std::string repo_dir, bind, token_file, ready_file, services_dir;
  std::vector<std::string> specs;
  int http_port = 8000, grpc_port = 8001;
  double poll_s = 0;
  size_t held_mb = 256;  // --max-held-mb
  bool controller = false, no_prefix_caching = false;
  ControllerOptions ctl;
};

po::options_description describe(Cli& c, Context& ctx) {
  po::options_description desc("loom-serve: KServe v2 inference server for Loom models");
  desc.add_options()("help,h", "show this help")("version", "print the version and exit")(
      "model-repository", po::value(&c.repo_dir), "DIR/<model>/<version>/model.h5")(
      "spec", po::value(&c.specs)->composing(), "an InferenceService or InferencePipeline YAML (examples/); repeatable")(
      "bind", po::value(&c.bind)->default_value("127.0.0.1"), "address to listen on (0.0.0.0: every interface)")(
      "http-port", po::value(&c.http_port)->default_value(8000), "HTTP port (0: any free one, printed)")(
      "grpc-port", po::value(&c.grpc_port)->default_value(8001), "gRPC port (0: any free one; -1: no gRPC)")(
      "max-batch-size", po::value(&ctx.options.max_batch_size)->default_value(32), "rows per batch")(
      "max-queue-delay-us", po::value(&ctx.options.max_queue_delay_us)->default_value(0),
      "how long a batch waits for more requests")(
      "max-queue-size", po::value(&ctx.options.max_queue_size)->default_value(256),
      "requests waiting per model version before 503 / UNAVAILABLE")(
      "request-timeout-ms", po::value(&ctx.options.request_timeout_ms)->default_value(30000), "per-request timeout")(
      "max-request-bytes", po::value(&ctx.max_request_bytes)->default_value(64 << 20), "largest request body")(
      "max-run-memory-mb", po::value(&ctx.options.max_run_memory_mb)->default_value(1024),
      "an ONNX model's tensors alive at once while it answers one batch (past it: 400 naming the node)")(
      "read-timeout-s", po::value(&ctx.read_timeout_s)->default_value(30), "a request must arrive within this")(
      "write-timeout-s", po::value(&ctx.write_timeout_s)->default_value(30),
      "an answer must be taken by the client within this (else the connection is cut)")(
      "max-connections", po::value(&ctx.max_connections)->default_value(512), "HTTP connections at once")(
      "auth-token-file", po::value(&c.token_file), "bearer token required on every endpoint but health")(
      "threads", po::value(&ctx.options.threads)->default_value(1), "BLAS threads per model's forward pass")(
      "device", po::value(&ctx.options.device)->default_value("auto"), "auto (CUDA when usable) | cpu | cuda")(
      "max-num-seqs", po::value(&ctx.options.llm.max_num_seqs)->default_value(64),
      "language models: sequences decoded together (1: one at a time)")(
      "kv-cache-bytes", po::value(&ctx.options.llm.kv_cache_bytes)->default_value(size_t{512} << 20),
      "language models: the KV cache's pool per model version")(
      "kv-block-tokens", po::value(&ctx.options.llm.kv_block_tokens)->default_value(16), "language models: positions per KV block")(
      "enable-prefix-caching", "language models: share the KV blocks of a common prompt prefix (the default)")(
      "no-prefix-caching", po::bool_switch(&c.no_prefix_caching), "language models: compute every prompt in full")(
      "tool-call-parser", po::value(&ctx.options.llm.tool_call_parser),
      "language models: hermes | llama3_json | mistral, the format tool calls are read in (default: from each model's tokens)")(
      "poll-s", po::value(&c.poll_s), "reload changed models every S seconds (default: on SIGHUP only)")(
      "strict-readiness", po::bool_switch(&ctx.strict_readiness),
      "ready only when every model found is loaded (default: ready when the server serves any)")(
      "exit-on-error", po::bool_switch(&ctx.options.exit_on_error), "fail the start when any model fails to load")(
      "allow-symlinks", po::bool_switch(&ctx.options.allow_symlinks),
      "serve model files that resolve outside the repository (symbolic links)")(
      "log-format", po::value(&g_log_format)->default_value("text"), "text | json")(
      "ready-file", po::value(&c.ready_file), "write {host, http_port, grpc_port, pid} here once listening")(
      "services-dir", po::value(&c.services_dir),
      "where controllers announce their service by name and pipelines find `service:` steps "
      "(default: $LOOM_SERVICES_DIR, else ~/.loom/services)")(
      "controller", po::bool_switch(&c.controller), "run the --spec service's replicas as Slurm jobs and route to them")(
      "state-dir", po::value(&c.ctl.state_dir), "controller: its replica script, their addresses and logs (shared file system)")(
      "partition", po::value(&c.ctl.partition), "controller: the replicas' Slurm partition")(
      "tick-s", po::value(&c.ctl.tick_s)->default_value(2), "controller: seconds between decisions")(
      "stable-window-s", po::value(&c.ctl.stable_window_s)->default_value(60), "controller: the autoscaler's window")(
      "panic-window-s", po::value(&c.ctl.panic_window_s)->default_value(6), "controller: the short window for bursts")(
      "scale-down-delay-s", po::value(&c.ctl.scale_down_delay_s)->default_value(30),
      "controller: a lower replica count must hold this long before replicas are ended")(
      "pending-warn-s", po::value(&c.ctl.pending_warn_s)->default_value(60),
      "controller: report a replica job pending longer, with Slurm's reason")(
      "replica-bind", po::value(&c.ctl.replica_bind)->default_value("127.0.0.1"),
      "controller: the replicas' --bind (0.0.0.0 when they run on other nodes; give a token)")(
      "replica-cpus", po::value(&c.ctl.replica_cpus)->default_value(1), "controller: --cpus-per-task of each replica")(
      "replica-max-outstanding", po::value(&c.ctl.replica_cap)->default_value(256),
      "controller: requests routed to one replica at once at most (beyond: 503)")(
      "start-timeout-s", po::value(&c.ctl.start_timeout_s)->default_value(300),
      "controller: a replica not ready this long after its job started is ended, and the next waits")(
      "activation-timeout-s", po::value(&c.ctl.activation_timeout_s)->default_value(60),
      "controller: with no replica ready, requests wait this long for one (then 503)")(
      "max-held-requests", po::value(&c.ctl.max_held_requests)->default_value(1000),
      "controller: requests waiting for a replica at most (beyond: 429)")(
      "max-held-mb", po::value(&c.held_mb)->default_value(256), "controller: their bytes at most, in MiB (beyond: 429)");
  return desc;
}

std::string check_options(const Cli& c, const Context& ctx, const po::variables_map& vm) {
  if (g_log_format != "text" && g_log_format != "json") return "--log-format must be text or json";
  if (c.repo_dir.empty() && c.specs.empty()) return "give --model-repository DIR and/or --spec FILE";
  if (ctx.options.max_batch_size < 1 || ctx.options.max_batch_size > 4096) return "--max-batch-size must be 1-4096";
  if (ctx.options.max_queue_size < 1) return "--max-queue-size must be at least 1";
  if (ctx.options.max_queue_delay_us < 0 || ctx.options.request_timeout_ms < 1) return "bad delay or timeout";
  if (ctx.max_request_bytes < 1024) return "--max-request-bytes must be at least 1024";
  if (ctx.options.max_run_memory_mb < 1 || ctx.options.max_run_memory_mb > (int64_t{1} << 30))
    return "--max-run-memory-mb must be 1-1073741824";
  if (ctx.options.threads < 1) return "--threads must be at least 1";
  if (ctx.options.llm.max_num_seqs < 1 || ctx.options.llm.max_num_seqs > 4096) return "--max-num-seqs must be 1-4096";
  if (!ctx.options.llm.tool_call_parser.empty() && ctx.options.llm.tool_call_parser != "hermes" &&
      ctx.options.llm.tool_call_parser != "llama3_json" && ctx.options.llm.tool_call_parser != "mistral")
    return "--tool-call-parser must be hermes, llama3_json or mistral";
  if (ctx.options.llm.kv_block_tokens < 1 || ctx.options.llm.kv_block_tokens > 1024) return "--kv-block-tokens must be 1-1024";
  if (ctx.options.llm.kv_cache_bytes < 4096 || ctx.options.llm.kv_cache_bytes > (size_t{1} << 40))
    return "--kv-cache-bytes must be 4096 to 2^40";
  if (vm.count("enable-prefix-caching") && c.no_prefix_caching) return "give --enable-prefix-caching or --no-prefix-caching, not both";
  if (ctx.max_connections < 1 || ctx.max_connections > 65536) return "--max-connections must be 1-65536";
  if (ctx.read_timeout_s < 1 || ctx.read_timeout_s > 86400) return "--read-timeout-s must be 1-86400";
  if (ctx.write_timeout_s < 1 || ctx.write_timeout_s > 86400) return "--write-timeout-s must be 1-86400";
  if (vm.count("poll-s") && !(c.poll_s >= 0.1 && c.poll_s <= 86400)) return "--poll-s must be 0.1-86400 seconds";
  if (ctx.options.device != "auto" && ctx.options.device != "cpu" && ctx.options.device != "cuda")
    return "--device must be auto, cpu or cuda, not '" + ctx.options.device + "'";
  if (c.http_port < 0 || c.http_port > 65535 || c.grpc_port < -1 || c.grpc_port > 65535) return "bad port";
  if (!c.controller) return "";
  if (c.specs.size() != 1 || !c.repo_dir.empty()) return "--controller takes one --spec (an InferenceService) and no --model-repository";
  if (c.ctl.state_dir.empty()) return "--controller needs --state-dir DIR (on a file system the replicas' nodes see)";
  if (!(c.ctl.tick_s >= 0.1 && c.ctl.tick_s <= 600)) return "--tick-s must be 0.1-600";
  if (!(c.ctl.panic_window_s >= c.ctl.tick_s && c.ctl.stable_window_s >= c.ctl.panic_window_s))
    return "the windows must satisfy --tick-s <= --panic-window-s <= --stable-window-s";
  if (!(c.ctl.scale_down_delay_s >= 0) || !(c.ctl.pending_warn_s > 0)) return "bad --scale-down-delay-s or --pending-warn-s";
  if (c.ctl.replica_cpus < 1 || c.ctl.replica_cap < 1) return "--replica-cpus and --replica-max-outstanding must be at least 1";
  if (!(c.ctl.activation_timeout_s > 0 && c.ctl.activation_timeout_s <= 3600)) return "--activation-timeout-s must be 0-3600 seconds";
  if (!(c.ctl.start_timeout_s > 0)) return "--start-timeout-s must be positive";
  if (c.ctl.max_held_requests < 1 || c.held_mb < 1 || c.held_mb > 65536) return "--max-held-requests and --max-held-mb must be at least 1";
  return "";
}

sigset_t block_stop_signals() {
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
  return set;
}

// A spec in KServe's or the seed's dialect may hold fields Loom does not act on: named once.
void warn_ignored(const std::string& file, const InferenceServiceSpec& s) {
  if (s.ignored.empty()) return;
  std::string list;
  for (const auto& f : s.ignored) list += (list.empty() ? "" : ", ") + f;
  log_line("warning", file + ": fields loom-serve does not act on, ignored: " + list);
}

// The --spec files that are pipelines are connected (each step's service reached and its model's
// inputs and outputs checked); the others are InferenceServices for the repository.
std::vector<std::string> connect_pipelines(const std::vector<std::string>& specs, const std::string& services_dir,
                                           Context& ctx) {
  std::vector<std::string> services;
  for (const auto& file : specs) {
    if (spec_kind(file) != "InferencePipeline") {
      warn_ignored(file, load_spec(file));
      services.push_back(file);
      continue;
    }
    const PipelineSpec p = load_pipeline_spec(file, services_dir);
    if (ctx.pipeline(p.name)) throw loom::rt::Error(file + ": a second pipeline named " + p.name);
    ctx.pipelines.push_back(connect_pipeline(p, ctx.token, 5000, static_cast<int>(std::min<size_t>(ctx.max_request_bytes, INT32_MAX))));
    std::string steps;
    for (const auto& st : p.steps)
      steps += (steps.empty() ? "" : ", ") + st.name + " (" + st.model + " at " + st.address +
               (st.service.empty() ? "" : ", service " + st.service) + ")";
    log_line("info", "pipeline " + p.name + " from " + file + ": steps " + steps);
    std::string why;
    if (!ctx.pipelines.back()->ready(&why))
      log_line("warning", "pipeline " + p.name + " is not ready yet (" + why +
                              "); it tries again until every step answers");
  }
  return services;
}

int serve(Cli& c, Context& ctx, const sigset_t& set, bool poll) {
  Metrics metrics;
  const std::vector<std::string> services = connect_pipelines(c.specs, services_dir(c.services_dir), ctx);
  Repository repo(c.repo_dir, services, ctx.options, &metrics, log_line);
  ctx.repo = &repo;
  ctx.metrics = &metrics;
  ctx.log = log_line;
  if (!c.repo_dir.empty() || !services.empty()) repo.reload(true);
  HttpServer http(ctx, c.bind, c.http_port);
  std::unique_ptr<GrpcServer> grpc;
  if (c.grpc_port >= 0) grpc = std::make_unique<GrpcServer>(ctx, c.bind, c.grpc_port);
  const std::string grpc_text = grpc ? c.bind + ":" + std::to_string(grpc->port()) : "off";
  ctx.ready = true;
  log_line("info", "listening: http " + c.bind + ":" + std::to_string(http.port()) + " grpc " + grpc_text +
                       (ctx.token.empty() ? "" : ", bearer token required") + "; max batch " +
                       std::to_string(ctx.options.max_batch_size) + ", queue " + std::to_string(ctx.options.max_queue_size) +
                       "; allocator " + allocator_text());
  if (!c.ready_file.empty()) write_announcement(c.ready_file, c.bind, http.port(), grpc ? grpc->port() : -1);
  for (;;) {
    const int sig = next_signal(set, poll ? c.poll_s : 0);
    if (sig != SIGHUP) break;
    try {
      repo.reload(false);
    } catch (const std::exception& e) {
      log_line("error", std::string("reload failed, serving what was loaded: ") + e.what());
    }
  }
  log_line("info", "stopping: no new requests; finishing the admitted ones");
  ctx.stopping = true;
  if (!c.ready_file.empty()) ::unlink(c.ready_file.c_str());
  http.stop_accepting();
  if (grpc) grpc->shutdown();
  http.wait_idle();
  repo.stop();
  log_line("info", "stopped");
  return 0;
}

// The controller routes; its own metrics count the requests it answered.
int control(Cli& c, Context& ctx, const sigset_t& set) {
  Metrics metrics;
  ctx.metrics = &metrics;
  ctx.log = log_line;
  c.ctl.spec_file = c.specs[0];
  warn_ignored(c.ctl.spec_file, load_spec(c.ctl.spec_file));
  c.ctl.token_file = c.token_file;
  c.ctl.services_dir = services_dir(c.services_dir);
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  c.ctl.loom_serve = n > 0 ? std::string(self, static_cast<size_t>(n)) : "loom-serve";
  c.ctl.serve_args = {"--max-batch-size", std::to_string(ctx.options.max_batch_size), "--max-queue-delay-us",
                      std::to_string(ctx.options.max_queue_delay_us), "--max-queue-size", std::to_string(ctx.options.max_queue_size),
                      "--request-timeout-ms", std::to_string(ctx.options.request_timeout_ms), "--max-request-bytes",
                      std::to_string(ctx.max_request_bytes), "--max-run-memory-mb",
                      std::to_string(ctx.options.max_run_memory_mb), "--device", ctx.options.device, "--max-num-seqs",
                      std::to_string(ctx.options.llm.max_num_seqs), "--kv-cache-bytes", std::to_string(ctx.options.llm.kv_cache_bytes),
                      "--kv-block-tokens", std::to_string(ctx.options.llm.kv_block_tokens)};
  if (!ctx.options.llm.tool_call_parser.empty()) c.ctl.serve_args.insert(c.ctl.serve_args.end(), {"--tool-call-parser", ctx.options.llm.tool_call_parser});
  if (c.no_prefix_caching) c.ctl.serve_args.push_back("--no-prefix-caching");
  c.ctl.max_held_bytes = c.held_mb << 20;
  return run_controller(c.ctl, ctx, c.bind, c.http_port, c.grpc_port, log_event, [&set] {
    while (next_signal(set, 0) == SIGHUP) {
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  // OpenMP waits for inference's short regions that do not starve a busy node; OpenBLAS kernels for this CPU
  loom::rt::cpu::settle_library_env(argv, loom::rt::cpu::kInferenceSpin);
  Cli c;
  Context ctx;
  po::options_description desc = describe(c, ctx);
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
  const std::string bad = check_options(c, ctx, vm);
  if (!bad.empty()) {
    std::fprintf(stderr, "loom-serve: %s\n", bad.c_str());
    return 2;
  }
  ctx.options.llm.prefix_caching = !c.no_prefix_caching;
  const sigset_t set = block_stop_signals();
  try {
    if (!c.token_file.empty()) ctx.token = read_token(c.token_file);
    return c.controller ? control(c, ctx, set) : serve(c, ctx, set, vm.count("poll-s") > 0);
  } catch (const ServeError& e) {
    log_line("error", e.what());
    return c.controller ? 2 : exit_status(e.kind());  // the controller's spec is checked at start: a usage error
  } catch (const std::exception& e) {
    log_line("error", e.what());
    return 1;
  }
}
