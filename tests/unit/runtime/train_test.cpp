// train_test.cpp — loom-train's own parts at their seams (doc/runtime.md): the Prometheus
// endpoint against a slow client, the one Prometheus text writer, and the resume choice.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/prometheus.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"
#include "loom/rt/train/train_config.hpp"
#include "loom/rt/train/metrics_http.hpp"
#include "loom/rt/train/options.hpp"

namespace {

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

std::string scrape(int port) {
  const int fd = connect_to(port);
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  EXPECT_EQ(::send(fd, get.data(), get.size(), 0), static_cast<ssize_t>(get.size()));
  const timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace

// One slowloris client (a byte now and then, never the blank line) held every scrape and kept
// loom-train from exiting for 40 s after "done" (issue 33, item 12). Now it holds only its own
// connection, for at most the request deadline, and the server stops at once.
// Each choice is an enum read through its words by the option table (loom-train's and
// loom-compress's, command line and --config alike): a word outside them is refused by name with
// the words allowed, and every word reads back as itself.
TEST(TrainOptions, ChoicesAreReadByTheirWordsAndRefusedOutsideThem) {
  const struct {
    const char* option;
    const char* bad;
    const char* message;
  } cases[] = {{"--precision", "fp8", "--precision must be fp32, fp16 or bf16, not 'fp8'"},
               {"--log-format", "xml", "--log-format must be text or json, not 'xml'"},
               {"--balance", "best", "--balance must be off, static or dynamic, not 'best'"},
               {"--gemm", "mkl", "--gemm must be auto, openblas or onednn, not 'mkl'"},
               {"--device", "tpu", "--device must be auto, cpu or cuda, not 'tpu'"},
               {"--model", "rnn", "--model must be mlp or gpt, not 'rnn'"},
               {"--optimizer", "lion", "--optimizer must be sgd or adamw, not 'lion'"},
               {"--lr-schedule", "step", "--lr-schedule must be constant or cosine, not 'step'"},
               {"--attention", "fast", "--attention must be auto, full or flash, not 'fast'"},
               {"--offload", "disk", "--offload must be none or optimizer, not 'disk'"},
               {"--gpu-backend", "gloo", "--gpu-backend must be auto, nccl or host, not 'gloo'"}};
  auto parse = [](const char* option, const char* word, loom::rt::TrainConfig& c) {
    loom::rt::TrainOptionText in;
    const auto opts = loom::rt::train_options(c, in);
    const char* argv[] = {"loom-train", option, word};
    boost::program_options::variables_map vm;
    boost::program_options::store(boost::program_options::parse_command_line(3, argv, opts), vm);
    boost::program_options::notify(vm);
  };
  for (const auto& k : cases) {
    loom::rt::TrainConfig c;
    try {
      parse(k.option, k.bad, c);
      ADD_FAILURE() << k.message;
    } catch (const loom::UsageError& e) {
      EXPECT_EQ(std::string(e.what()), k.message);
    }
  }
  loom::rt::TrainConfig c;
  parse("--precision", "bf16", c);
  EXPECT_EQ(c.precision, loom::rt::Precision::kBf16);
  parse("--gpu-backend", "host", c);
  EXPECT_EQ(c.gpu_backend, loom::rt::GpuBackend::kHost);
  EXPECT_EQ(c.precision, loom::rt::Precision::kBf16);  // each option sets its own field
  for (const char* w : {"fp32", "fp16", "bf16"}) EXPECT_STREQ(loom::word_of(loom::parse_choice<loom::rt::Precision>(w)), w);
  for (const char* w : {"off", "static", "dynamic"}) EXPECT_STREQ(loom::word_of(loom::parse_choice<loom::rt::Balance>(w)), w);
}

// The seed is read as digits (Boost would read -5 as 2^64-5), with one message for both tools.
TEST(TrainOptions, SeedIsDigitsUpTo2To64) {
  EXPECT_EQ(loom::rt::parse_seed("18446744073709551615"), UINT64_MAX);
  for (const char* bad : {"-5", "", "1e3", "18446744073709551616", " 7"}) {
    try {
      loom::rt::parse_seed(bad);
      ADD_FAILURE() << bad;
    } catch (const loom::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--seed must be a whole number from 0 to 2^64-1"), std::string::npos);
    }
  }
}

TEST(MetricsServer, ASlowClientHoldsNeitherScrapesNorExit) {
  auto server = std::make_unique<loom::rt::MetricsServer>("127.0.0.1", 0);
  server->update([](loom::rt::TrainGauges& g) { g.step = 42; });
  const int port = server->port();
  int slow[3];
  for (int& fd : slow) {
    fd = connect_to(port);
    ASSERT_EQ(::send(fd, "G", 1, 0), 1);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string got = scrape(port);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  EXPECT_NE(got.find("HTTP/1.1 200 OK"), std::string::npos) << got;
  EXPECT_NE(got.find("loom_train_step 42"), std::string::npos) << got;
  // The slow clients are dropped at their deadline (2 s): recv sees the close.
  const timeval tv{5, 0};
  ::setsockopt(slow[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char c;
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(::recv(slow[0], &c, 1, 0), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(3500));
  // Stopping with slow clients still connected is prompt.
  const auto t2 = std::chrono::steady_clock::now();
  server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t2, std::chrono::milliseconds(500));
  for (int fd : slow) ::close(fd);
}

// The one Prometheus writer: HELP and TYPE once per family, label values escaped, integers
// without a point, other numbers in their shortest exact form, histograms cumulative.
TEST(PrometheusText, WritesTheExpositionFormat) {
  loom::rt::PrometheusText p;
  p.family("x_total", "counter", "Things.");
  p.sample("x_total", {{"model", "a\"b\\c\nd"}}, 3);
  p.single("y", "gauge", "Y.", 0.1);
  p.family("h", "histogram", "H.");
  p.histogram("h", {{"m", "k"}}, {0.5, 2}, {1, 0, 4}, 7.25, 5);
  EXPECT_EQ(p.str(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{model=\"a\\\"b\\\\c\\nd\"} 3\n"
            "# HELP y Y.\n# TYPE y gauge\ny 0.1\n"
            "# HELP h H.\n# TYPE h histogram\n"
            "h_bucket{m=\"k\",le=\"0.5\"} 1\nh_bucket{m=\"k\",le=\"2\"} 1\nh_bucket{m=\"k\",le=\"+Inf\"} 5\n"
            "h_sum{m=\"k\"} 7.25\nh_count{m=\"k\"} 5\n");
  EXPECT_EQ(loom::rt::PrometheusText::number(1e-05), "1e-05");
  EXPECT_EQ(loom::rt::PrometheusText::number(-INFINITY), "-Inf");
  EXPECT_EQ(loom::rt::PrometheusText::number(NAN), "NaN");
  EXPECT_EQ(loom::rt::PrometheusText::number(1e20), "1e+20");
}

// CheckpointWriter's resume choice at its seam: the newest checkpoint that verifies and whose
// state a resume can use (a truncated newer one and a crafted one are skipped and named), keys
// that may differ ignored, another configuration refused.
TEST(CheckpointResume, TakesTheNewestThatVerifiesAndRefusesAnotherConfiguration) {
  using namespace loom::rt;
  char tmpl[] = "/tmp/loom-resume-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  TrainConfig c;
  c.ckpt_dir = dir;
  c.resume = "auto";
  std::vector<std::string> said;
  CheckpointWriter w(c, nullptr, [&](const std::string& human, const loom::LogFields&) { said.push_back(human); });
  Checkpoint k;
  k.model_config = "{}";
  k.train_config = R"({"lr":0.1,"optimizer":{"kind":"adamw"},"total_steps":10})";
  k.state_json = R"({"step":5,"epoch":0,"batch":5,"world":1,"opt_t":5,"loss_scale":1,"clean_steps":0,"observed":0,"shares":[64],"speeds":[0]})";
  k.params = {{"w", Tensor::zeros({2, 3})}};
  k.opt_m = {{"w", Tensor::zeros({2, 3})}};
  k.opt_v = {{"w", Tensor::zeros({2, 3})}};
  save_checkpoint(w.path_for(5), k);
  save_checkpoint(w.path_for(9), k);
  ASSERT_EQ(::truncate(w.path_for(9).c_str(), 200), 0);
  Checkpoint crafted = k;  // verifies, but a resume would read batch -1000000 (BatchSource aborted on it)
  crafted.state_json = R"({"step":12,"epoch":0,"batch":-1000000,"world":1,"opt_t":12,"loss_scale":1,"clean_steps":0,"observed":0,"shares":[64],"speeds":[0]})";
  save_checkpoint(w.path_for(12), crafted);
  const auto r = w.find_resume(R"({"lr":0.1,"optimizer":{"kind":"adamw"},"total_steps":20})", {"total_steps"});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, w.path_for(5));
  ASSERT_EQ(said.size(), 2u);
  EXPECT_NE(said[0].find("skipping a checkpoint that does not verify: " + w.path_for(12) + ": state/json's batch is -1000000"),
            std::string::npos) << said[0];
  EXPECT_NE(said[1].find("skipping a checkpoint that does not verify: " + w.path_for(9)), std::string::npos) << said[1];
  try {
    w.find_resume(R"({"lr":0.2,"optimizer":{"kind":"adamw"},"total_steps":10})");
    ADD_FAILURE() << "resumed a checkpoint of another configuration";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint of another configuration"), std::string::npos) << e.what();
  }
  c.resume = "never";
  CheckpointWriter never(c, nullptr, [](const std::string&, const loom::LogFields&) {});
  EXPECT_FALSE(never.find_resume(k.train_config).has_value());
  for (int64_t step : {5, 9, 12}) std::remove(w.path_for(step).c_str());
  ::rmdir(dir.c_str());
}
