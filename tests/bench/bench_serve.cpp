// bench_serve.cpp — `loom-bench serve`: starts loom-serve on a temporary repository and loads it
// over gRPC (binary raw_input_contents, closed-loop clients), measuring against peers taken in
// the same run:
//   1. throughput at saturation (concurrency >= 2 x max batch) against the same model's offline
//      batched forward throughput (the runtime's forward pass on batches of max-batch rows);
//   2. dynamic batching: throughput with --max-batch-size 32 against 1 at concurrency 32, with
//      p50/p99 latency of both;
//   3. added latency: p50 of a tiny model's request over gRPC (one client) minus its compute time
//      measured offline;
//   4. the transport: one-row requests to a tiny model at saturation against a bare gRPC server
//      (a child process) answering the same call at once without a model. With --bare-work-us U
//      the bare server first spins U microseconds a call: how much work a request may carry
//      before the bare server itself falls to a given share of its own rate on this machine.
// With --compare ADDR PEER it measures one client's p50 at ADDR (the serving controller's router)
// against PEER (a replica it routes to): tests/bench/controller_figures.sh.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "grpc_service.grpc.pb.h"
#include "bench_args.hpp"
#include "progress.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/io/model_io.hpp"

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Server {
  pid_t pid = -1;
  std::string grpc;
};

// Starts loom-serve; returns once it printed its ports.
Server start_server(const std::string& exe, const std::string& repo, int max_batch, int64_t delay_us, int threads) {
  int fds[2];
  if (pipe(fds) != 0) throw loom::rt::Error("pipe failed");
  Server s;
  s.pid = fork();
  if (s.pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    const std::string mb = std::to_string(max_batch), d = std::to_string(delay_us), t = std::to_string(threads);
    execl(exe.c_str(), exe.c_str(), "--model-repository", repo.c_str(), "--http-port", "0", "--grpc-port", "0",
          "--max-batch-size", mb.c_str(), "--max-queue-delay-us", d.c_str(), "--threads", t.c_str(),
          "--max-queue-size", "4096", "--device", "cpu", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string log;
  char buf[512];
  ssize_t n;
  while (log.find("listening:") == std::string::npos && (n = read(fds[0], buf, sizeof buf)) > 0) log.append(buf, static_cast<size_t>(n));
  // Keep draining its stderr in the background (a full pipe would block the server).
  std::thread([fd = fds[0]] {
    char b[512];
    while (read(fd, b, sizeof b) > 0) {}
    close(fd);
  }).detach();
  const size_t at = log.find(" grpc ");
  if (at == std::string::npos) throw loom::rt::Error("loom-serve did not start: " + log);
  s.grpc = log.substr(at + 6, log.find_first_of(",; \n", at + 6) - (at + 6));
  return s;
}

// The transport's limit: a gRPC server in a child process answering ModelInfer at once with a
// fixed [1,10] FP32 answer, on the callback API as loom-serve's, with no model and no batcher.
class BareService final
    : public inference::GRPCInferenceService::WithCallbackMethod_ModelInfer<inference::GRPCInferenceService::Service> {
 public:
  explicit BareService(std::chrono::nanoseconds work) : work_(work) {}
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* res) override {
    if (work_.count() > 0) {  // without --bare-work-us the peer stays bare: not even a clock read
      const auto start = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - start < work_) {
      }
    }
    res->set_model_name(req->model_name());
    res->set_model_version("1");
    auto* o = res->add_outputs();
    o->set_name("logits");
    o->set_datatype("FP32");
    o->add_shape(1);
    o->add_shape(10);
    res->add_raw_output_contents(std::string(40, '\0'));
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

 private:
  std::chrono::nanoseconds work_;
};

Server start_bare_server(double work_us) {
  int fds[2];
  if (pipe(fds) != 0) throw loom::rt::Error("pipe failed");
  Server s;
  s.pid = fork();
  if (s.pid == 0) {
    close(fds[0]);
    BareService svc(std::chrono::nanoseconds(static_cast<int64_t>(work_us * 1e3)));
    int port = 0;
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&svc);
    auto server = b.BuildAndStart();
    const std::string p = std::to_string(port) + "\n";
    if (write(fds[1], p.data(), p.size()) < 0) _exit(1);
    server->Wait();  // until SIGTERM ends the process
    _exit(0);
  }
  close(fds[1]);
  char buf[32] = {0};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  if (n <= 0) throw loom::rt::Error("the bare gRPC server did not start");
  s.grpc = "127.0.0.1:" + std::to_string(std::atoi(buf));
  return s;
}

void stop_server(Server& s) {
  if (s.pid <= 0) return;
  kill(s.pid, SIGTERM);
  int st = 0;
  waitpid(s.pid, &st, 0);
  s.pid = -1;
}

struct Load {
  double rows_per_s = 0, p50_ms = 0, p99_ms = 0;
  uint64_t failed = 0;
};

// `clients` closed-loop clients, each with one request in flight at a time, sending requests of
// `rows` rows for `seconds`. Driven asynchronously (completion queues, one driver thread per 32
// clients) so that the load generator takes little of the CPU the server shares with it.
Load run_load(const std::string& addr, const std::string& model, int in_features, int clients, double seconds, int rows = 1) {
  std::string data(static_cast<size_t>(in_features) * rows * sizeof(float), '\0');
  for (size_t i = 0; i < data.size() / 4; ++i) {
    const float v = static_cast<float>(i % 255) / 255.0f;
    std::memcpy(&data[i * 4], &v, 4);
  }
  inference::ModelInferRequest req;
  req.set_model_name(model);
  auto* in = req.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(rows);
  in->add_shape(in_features);
  req.add_raw_input_contents(data);
  struct Call {
    grpc::ClientContext ctx;
    inference::ModelInferResponse res;
    grpc::Status st;
    std::unique_ptr<grpc::ClientAsyncResponseReader<inference::ModelInferResponse>> rpc;
    Clock::time_point t0;
  };
  const int drivers = std::max(1, (clients + 31) / 32);
  std::atomic<uint64_t> failed{0};
  std::vector<std::vector<double>> lat(static_cast<size_t>(drivers));
  const auto t_start = Clock::now();
  const auto end = t_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int d = 0; d < drivers; ++d)
    threads.emplace_back([&, d] {
      grpc::ChannelArguments a;
      a.SetInt("loom.bench.channel", d);  // one connection per driver
      auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), a));
      grpc::CompletionQueue cq;
      auto launch = [&] {
        auto* c = new Call;
        c->t0 = Clock::now();
        c->rpc = stub->PrepareAsyncModelInfer(&c->ctx, req, &cq);
        c->rpc->StartCall();
        c->rpc->Finish(&c->res, &c->st, c);
      };
      int mine = clients / drivers + (d < clients % drivers ? 1 : 0), outstanding = mine;
      for (int i = 0; i < mine; ++i) launch();
      void* tag;
      bool ok;
      while (outstanding > 0 && cq.Next(&tag, &ok)) {
        std::unique_ptr<Call> c(static_cast<Call*>(tag));
        if (ok && c->st.ok()) lat[static_cast<size_t>(d)].push_back(secs(c->t0));
        else ++failed;
        if (Clock::now() < end) launch();
        else --outstanding;
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {}
    });
  for (auto& t : threads) t.join();
  const double took = secs(t_start);
  std::vector<double> all;
  for (const auto& l : lat) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Load r;
  r.failed = failed;
  r.rows_per_s = static_cast<double>(all.size()) * rows / took;
  if (!all.empty()) {
    r.p50_ms = all[all.size() / 2] * 1e3;
    r.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)] * 1e3;
  }
  return r;
}

// The runtime's forward pass on batches of `batch` rows, rows per second (best of 3 runs).
double offline_rows_per_s(const std::string& file, int batch, int threads, double seconds, double* one_row_s) {
  loom::rt::cpu::set_threads(threads);
  loom::rt::Mlp m = loom::rt::load_mlp(file);
  loom::rt::Tensor x = loom::rt::Tensor::empty({batch, m.widths().front()});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i % 255) / 255.0f;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int64_t n = 0;
    const auto t0 = Clock::now();
    while (secs(t0) < seconds / 3) {
      m.forward(x);
      n += batch;
    }
    best = std::max(best, static_cast<double>(n) / secs(t0));
  }
  if (one_row_s) {
    loom::rt::Tensor x1 = loom::rt::Tensor::empty({1, m.widths().front()});
    std::fill(x1.f32(), x1.f32() + x1.numel(), 0.5f);
    std::vector<double> t;
    for (int i = 0; i < 2000; ++i) {
      const auto t0 = Clock::now();
      m.forward(x1);
      t.push_back(secs(t0));
    }
    std::sort(t.begin(), t.end());
    *one_row_s = t[t.size() / 2];
  }
  return best;
}

void write_model(const std::string& path, std::vector<int> widths) {
  loom::rt::Mlp m(std::move(widths), 7);
  loom::rt::save_model(path, m.config_json(), m.params());
}

}  // namespace

// `loom-bench serve --compare A B --model M [--features N] [--seconds S]`: one client's p50 over
// gRPC at A (the controller's router) and at B (a replica, the peer), in alternating rounds.
int bench_compare(const std::string& a, const std::string& b, const std::string& model, int features, double seconds,
                  const std::string& format) {
  std::vector<double> pa, pb;
  uint64_t failed = 0;
  for (int round = 0; round < 3; ++round) {
    const Load la = run_load(a, model, features, 1, seconds / 6), lb = run_load(b, model, features, 1, seconds / 6);
    pa.push_back(la.p50_ms);
    pb.push_back(lb.p50_ms);
    failed += la.failed + lb.failed;
  }
  std::sort(pa.begin(), pa.end());
  std::sort(pb.begin(), pb.end());
  if (format == "json")
    std::printf("{\"bench\":\"serve-compare\",\"p50_ms\":%.4f,\"peer_p50_ms\":%.4f,\"added_ms\":%.4f,\"ratio\":%.3f,\"failed\":%llu}\n",
                pa[1], pb[1], pa[1] - pb[1], pa[1] / pb[1], static_cast<unsigned long long>(failed));
  else
    std::printf("loom-bench serve --compare: one client, one-row FP32 requests to %s over gRPC\n"
                "  p50 through %s %.3f ms; peer: direct to %s %.3f ms; added %.3f ms; ratio %.3f (median of 3 rounds)\n"
                "  failed requests: %llu\n",
                model.c_str(), a.c_str(), pa[1], b.c_str(), pb[1], pa[1] - pb[1], pa[1] / pb[1],
                static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}

int bench_serve(int argc, char** argv, const std::string& self) {
  std::string server = self.substr(0, self.find_last_of('/') + 1) + "loom-serve", format = "text";
  double seconds = 4;
  int threads = 1;
  int64_t delay_us = 0;  // loom-serve's default --max-queue-delay-us
  double bare_work_us = 0;
  std::string compare_a, compare_b, compare_model = "tiny";
  int compare_features = 784;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--server") server = v;
    else if (a == "--seconds") seconds = std::max(0.5, bench_real(a, v, 0));
    else if (a == "--threads") threads = bench_int(a, v);
    else if (a == "--delay-us") delay_us = bench_whole(a, v, 0);
    else if (a == "--format") format = v;
    else if (a == "--bare-work-us") bare_work_us = bench_real(a, v, 0);
    else if (a == "--compare" && i + 2 < argc) compare_a = v, compare_b = argv[i + 2], ++i;
    else if (a == "--model") compare_model = v;
    else if (a == "--features") compare_features = bench_int(a, v);
    else {
      std::fprintf(stderr, "usage: loom-bench serve [--server PATH] [--seconds S] [--threads T] [--bare-work-us U] [--format text|json]\n"
                           "       loom-bench serve --compare GRPC_ADDR PEER_GRPC_ADDR --model M [--features N] [--seconds S]\n");
      return 2;
    }
  }
  if (!compare_a.empty()) return bench_compare(compare_a, compare_b, compare_model, compare_features, seconds, format);
  if (access(server.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "loom-bench serve: %s is not there (give --server PATH)\n", server.c_str());
    return 1;
  }
  char tmpl[] = "/tmp/loom-bench-serve.XXXXXX";
  if (!mkdtemp(tmpl)) return 1;
  const std::string repo = tmpl;
  mkdir((repo + "/mlp").c_str(), 0755);
  mkdir((repo + "/mlp/1").c_str(), 0755);
  mkdir((repo + "/tiny").c_str(), 0755);
  mkdir((repo + "/tiny/1").c_str(), 0755);
  write_model(repo + "/mlp/1/model.h5", {784, 512, 512, 10});  // the Fashion-MNIST MLP
  write_model(repo + "/tiny/1/model.h5", {784, 16, 10});
  // Forked before this process uses gRPC (a fork after that leaves the child's gRPC stuck).
  Server bare_s = start_bare_server(bare_work_us);
  const int max_batch = 32;
  double tiny_compute = 0;
  bench_progress("the offline forward pass (the peer)");
  const double offline = offline_rows_per_s(repo + "/mlp/1/model.h5", max_batch, threads, seconds, nullptr);
  offline_rows_per_s(repo + "/tiny/1/model.h5", 1, threads, 0.3, &tiny_compute);

  bench_progress("loom-serve at saturation, " + std::to_string(static_cast<int>(seconds + 0.5)) + " s per load");
  Server s = start_server(server, repo, max_batch, delay_us, threads);
  Load sat = run_load(s.grpc, "mlp", 784, 2 * max_batch, seconds);
  // The transport: loom-serve and the bare server take turns, three rounds, so that both see the
  // same state of the shared cores; the median round's ratio is the figure.
  bench_progress("the transport: loom-serve and a bare gRPC server (no model) in turn, 3 rounds");
  Load tiny_sat, bare;
  {
    std::vector<std::pair<Load, Load>> rounds;
    uint64_t failed_a = 0, failed_b = 0;
    for (int r = 0; r < 3; ++r) {
      rounds.emplace_back(run_load(s.grpc, "tiny", 784, 2 * max_batch, seconds / 3),
                          run_load(bare_s.grpc, "tiny", 784, 2 * max_batch, seconds / 3));
      failed_a += rounds.back().first.failed, failed_b += rounds.back().second.failed;
    }
    auto ratio = [](const std::pair<Load, Load>& r) { return r.first.rows_per_s / r.second.rows_per_s; };
    std::sort(rounds.begin(), rounds.end(), [&](const auto& x, const auto& y) { return ratio(x) < ratio(y); });
    tiny_sat = rounds[1].first, bare = rounds[1].second;  // the median round
    tiny_sat.failed = failed_a, bare.failed = failed_b;
  }
  stop_server(bare_s);
  Load sat8 = run_load(s.grpc, "mlp", 784, 2 * max_batch / 8, seconds, 8);  // as many rows in flight, 8 a request
  Load b32 = run_load(s.grpc, "mlp", 784, 32, seconds);
  stop_server(s);
  bench_progress("loom-serve without batching");
  s = start_server(server, repo, 1, 0, threads);
  Load b1 = run_load(s.grpc, "mlp", 784, 32, seconds);
  stop_server(s);
  bench_progress("the added latency (a tiny model, one row)");
  s = start_server(server, repo, max_batch, 0, threads);
  Load tiny = run_load(s.grpc, "tiny", 784, 1, seconds / 2);
  stop_server(s);
  for (const char* f : {"/mlp/1/model.h5", "/tiny/1/model.h5", "/mlp/1", "/tiny/1", "/mlp", "/tiny", ""})
    std::remove((repo + f).c_str());

  const double added_ms = tiny.p50_ms - tiny_compute * 1e3;
  const uint64_t failed = sat.failed + sat8.failed + b32.failed + b1.failed + tiny.failed + tiny_sat.failed + bare.failed;
  if (format == "json") {
    std::printf("{\"bench\":\"serve\",\"saturation_rows_per_s\":%.1f,\"offline_rows_per_s\":%.1f,\"saturation_ratio\":%.3f,"
                "\"saturation_8row_rows_per_s\":%.1f,\"saturation_8row_ratio\":%.3f,\"batch32_rows_per_s\":%.1f,\"batch32_p50_ms\":%.3f,\"batch32_p99_ms\":%.3f,\"batch1_rows_per_s\":%.1f,"
                "\"batch1_p50_ms\":%.3f,\"batch1_p99_ms\":%.3f,\"batching_gain\":%.3f,\"tiny_p50_ms\":%.4f,"
                "\"tiny_compute_ms\":%.4f,\"added_latency_ms\":%.4f,\"tiny_saturation_rows_per_s\":%.1f,"
                "\"bare_grpc_rows_per_s\":%.1f,\"bare_work_us\":%.2f,\"transport_ratio\":%.3f,\"failed\":%llu}\n",
                sat.rows_per_s, offline, sat.rows_per_s / offline, sat8.rows_per_s, sat8.rows_per_s / offline,
                b32.rows_per_s, b32.p50_ms, b32.p99_ms, b1.rows_per_s, b1.p50_ms, b1.p99_ms, b32.rows_per_s / b1.rows_per_s, tiny.p50_ms, tiny_compute * 1e3, added_ms,
                tiny_sat.rows_per_s, bare.rows_per_s, bare_work_us, tiny_sat.rows_per_s / bare.rows_per_s, static_cast<unsigned long long>(failed));
  } else {
    char work[64] = "";
    if (bare_work_us > 0) std::snprintf(work, sizeof work, " after %.2f us of work a call", bare_work_us);
    std::printf("loom-bench serve: MLP 784,512,512,10 on the CPU, %d BLAS thread(s), gRPC raw FP32, one-row requests\n"
                "  saturation (%d clients, max batch %d): %.0f rows/s; peer: offline batched forward %.0f rows/s; ratio %.3f\n"
                "  the same rows in flight as 8-row requests (%d clients): %.0f rows/s; ratio %.3f\n"
                "  dynamic batching at 32 clients: max batch 32 %.0f rows/s (p50 %.2f ms, p99 %.2f ms), max batch 1 %.0f rows/s "
                "(p50 %.2f ms, p99 %.2f ms); gain %.2fx\n"
                "  added latency (MLP 784,16,10, one client): p50 %.3f ms - compute %.3f ms = %.3f ms\n"
                "  transport: MLP 784,16,10 at saturation (%d clients) %.0f rows/s; peer: a bare gRPC server answering "
                "the same call without a model%s %.0f rows/s; ratio %.3f (the median of 3 rounds in turn)\n"
                "  failed requests: %llu\n",
                threads, 2 * max_batch, max_batch, sat.rows_per_s, offline, sat.rows_per_s / offline, 2 * max_batch / 8,
                sat8.rows_per_s, sat8.rows_per_s / offline, b32.rows_per_s,
                b32.p50_ms, b32.p99_ms, b1.rows_per_s, b1.p50_ms, b1.p99_ms, b32.rows_per_s / b1.rows_per_s, tiny.p50_ms,
                tiny_compute * 1e3, added_ms, 2 * max_batch, tiny_sat.rows_per_s, work, bare.rows_per_s, tiny_sat.rows_per_s / bare.rows_per_s,
                static_cast<unsigned long long>(failed));
  }
  return failed == 0 ? 0 : 1;
}
