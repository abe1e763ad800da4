// serve_test.cpp — loom-serve's core without a network: the dynamic batcher (batch sizes, each
// request its own rows, the queue bound, timeouts, draining), input decoding and the
// InferenceService spec, against a real model file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "core/kserve_json.hpp"
#include "frontend/generate_json.hpp"
#include "loom/log.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/topo/topology.hpp"
#include "pipeline/pipeline.hpp"
#include "repository/model_config.hpp"
#include "repository/repository.hpp"
#include "spec/services.hpp"
#include "spec/spec.hpp"

namespace {

using loom::serve::Batcher;
using loom::serve::Clock;
using loom::serve::Options;
using loom::serve::ServedModel;
using loom::serve::ServeError;
using loom::serve::Status;

class ServeCore : public ::testing::Test {
 protected:
  void SetUp() override {
    char t[] = "/tmp/loom-serve-test.XXXXXX";
    ASSERT_NE(mkdtemp(t), nullptr);
    dir_ = t;
    loom::rt::Mlp m({784, 32, 10}, 3);
    loom::rt::save_model(dir_ + "/model.h5", m.config_json(), m.params());
    model_ = std::make_shared<ServedModel>("m", "1", dir_ + "/model.h5");
  }
  void TearDown() override {
    std::remove((dir_ + "/model.h5").c_str());
    std::remove((dir_ + "/spec.yaml").c_str());
    rmdir(dir_.c_str());
  }
  std::string write_spec(const std::string& text) {
    std::ofstream(dir_ + "/spec.yaml") << text;
    return dir_ + "/spec.yaml";
  }
  // `text` with `from` replaced by `to` is refused, the error holding `what`.
  void expect_spec_refused(const std::string& text, const std::string& from, const std::string& to, const char* what) {
    std::string bad = text;
    bad.replace(bad.find(from), from.size(), to);
    try {
      loom::serve::load_spec(write_spec(bad));
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ServeError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
  std::vector<loom::rt::Tensor> rows(int n, float base) {  // the model's one input, n rows
    loom::rt::Tensor x = loom::rt::Tensor::empty({n, 784});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = base + static_cast<float>(i % 97) * 0.01f;
    return {x};
  }
  loom::rt::Tensor alone(const std::vector<loom::rt::Tensor>& x) {  // the model on these rows only
    ServedModel m("m", "1", dir_ + "/model.h5");
    return m.forward(x).at(0);
  }
  std::string dir_;
  std::shared_ptr<ServedModel> model_;
};

// One error type for every part (loom/error.hpp): each part's class carries its kind, and the
// kind alone gives the exit status, the HTTP status and the gRPC code.
TEST(Errors, EachPartsErrorIsALoomErrorAnsweredByItsKind) {
  const auto kind = [](const std::exception& e) { return loom::kind_of(e); };
  EXPECT_EQ(kind(loom::topo::Error("x")), Status::kInput);
  EXPECT_EQ(kind(loom::rt::InvalidInput("x")), Status::kInput);
  EXPECT_EQ(kind(loom::rt::Error("x")), Status::kIO);
  EXPECT_EQ(kind(loom::rt::DataChanged("x")), Status::kIO);
  EXPECT_EQ(kind(ServeError(Status::kNotFound, "x")), Status::kNotFound);
  EXPECT_EQ(kind(std::runtime_error("x")), Status::kInternal);
  struct Row {
    Status kind;
    int exit, http, grpc;
  };
  for (const Row& r : {Row{Status::kOk, 0, 200, 0}, Row{Status::kUsage, 2, 400, 3}, Row{Status::kInput, 1, 400, 3},
                       Row{Status::kUnauthorized, 1, 401, 16}, Row{Status::kNotFound, 1, 404, 5}, Row{Status::kTooLarge, 1, 413, 8},
                       Row{Status::kUnavailable, 1, 503, 14}, Row{Status::kTimeout, 1, 504, 4}, Row{Status::kIO, 1, 500, 13},
                       Row{Status::kInternal, 1, 500, 13}}) {
    EXPECT_EQ(loom::exit_status(r.kind), r.exit) << loom::kind_name(r.kind);
    EXPECT_EQ(loom::http_status(r.kind), r.http) << loom::kind_name(r.kind);
    EXPECT_EQ(loom::grpc_code(r.kind), r.grpc) << loom::kind_name(r.kind);
  }
  // A code another server answered maps back to the kind a client can act on.
  EXPECT_EQ(loom::from_grpc_code(3), Status::kInput);
  EXPECT_EQ(loom::from_grpc_code(13), Status::kInternal);
  EXPECT_EQ(loom::from_grpc_code(14), Status::kUnavailable);
  EXPECT_EQ(loom::from_grpc_code(99), Status::kInternal);
  EXPECT_STREQ(loom::kind_name(Status::kInput), "bad_request");  // the metrics label it always had
}

// One log line for every tool and daemon (loom/log.hpp): text shows the rank where there are
// several and the level where it is not info; JSON carries both, the members and the message.
TEST(Log, OneLineTextOrJson) {
  std::vector<std::string> lines;
  const auto sink = [&](const std::string& l) { lines.push_back(l); };
  loom::Logger("loom-train", false, 1, 2, sink).write("overflow", loom::LogFields(loom::LogLevel::kWarning, {{"event", "x"}}));
  loom::Logger("loom-train", false, 0, 1, sink).write(loom::LogLevel::kInfo, "done");
  loom::Logger("loom-serve", false, -1, 1, sink).write(loom::LogLevel::kError, "bad");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "loom-train: rank 1: warning: overflow");
  EXPECT_EQ(lines[1], "loom-train: done");
  EXPECT_EQ(lines[2], "loom-serve: error: bad");
  loom::Logger("loom-train", true, 3, 4, sink).write(loom::LogLevel::kError, "a \"quoted\"\nline", {{"step", 7}});
  const auto j = nlohmann::json::parse(lines.back());
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["component"], "loom-train");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["step"], 7);
  EXPECT_EQ(j["msg"], "a \"quoted\"\nline");
  EXPECT_EQ(std::string(j["ts"]).size(), 24u);  // 2026-12-01T13:05:17.123Z
  loom::Logger("loom-serve", true, -1, 1, sink).write(loom::LogLevel::kInfo, "up");
  EXPECT_FALSE(nlohmann::json::parse(lines.back()).contains("rank"));
  // A message and a member that are not UTF-8 (a file name, a client's string): still one valid
  // JSON line, the bad bytes replaced.
  loom::Logger("loom-train", true, 0, 1, sink).write(loom::LogLevel::kWarning, "skipped ck\xff\"pt",
                                                     {{"file", std::string("ck\xff\"pt.h5")}});
  const auto bad = nlohmann::json::parse(lines.back());
  EXPECT_EQ(bad["msg"], "skipped ck\xef\xbf\xbd\"pt");
  EXPECT_EQ(bad["file"], "ck\xef\xbf\xbd\"pt.h5");
}

TEST_F(ServeCore, BatchesHoldAtMostMaxRowsAndEachRequestGetsItsOwnRows) {
  Options o;
  o.max_batch_size = 8;
  o.max_queue_delay_us = 20000;
  Batcher b({model_}, o, nullptr);
  std::vector<std::future<Batcher::Outcome>> fs;
  std::vector<std::vector<loom::rt::Tensor>> inputs;
  for (int i = 0; i < 10; ++i) {
    inputs.push_back(rows(3, 0.1f * static_cast<float>(i)));
    auto p = std::make_shared<std::promise<Batcher::Outcome>>();
    fs.push_back(p->get_future());
    b.submit(inputs.back(), 3, Clock::now() + std::chrono::seconds(10), [p](Batcher::Outcome out) { p->set_value(std::move(out)); });
  }
  int batched = 0;
  for (int i = 0; i < 10; ++i) {
    Batcher::Outcome out = fs[static_cast<size_t>(i)].get();
    ASSERT_EQ(out.status, Status::kOk) << out.error;
    EXPECT_LE(out.batch_rows, 8);
    EXPECT_GE(out.batch_rows, 3);
    batched += out.batch_rows > 3;
    const loom::rt::Tensor want = alone(inputs[static_cast<size_t>(i)]);
    ASSERT_EQ(out.outputs.size(), 1u);
    const loom::rt::Tensor& got = out.outputs[0];
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t k = 0; k < want.numel(); ++k)
      EXPECT_NEAR(got.f32()[k], want.f32()[k], 1e-5f * std::max(1.0f, std::fabs(want.f32()[k])));
  }
  EXPECT_GT(batched, 0) << "the 20 ms delay should have let requests share batches";
}

TEST_F(ServeCore, RefusesBeyondTheQueueBoundAndTooManyRows) {
  Options o;
  o.max_batch_size = 4;
  o.max_queue_size = 2;
  o.max_queue_delay_us = 200000;  // the first batch waits, so the queue fills
  Batcher b({model_}, o, nullptr);
  std::atomic<int> answered{0};
  auto done = [&](Batcher::Outcome) { ++answered; };
  b.submit(rows(1, 0), 1, Clock::now() + std::chrono::seconds(10), done);
  b.submit(rows(1, 0), 1, Clock::now() + std::chrono::seconds(10), done);
  try {
    b.submit(rows(1, 0), 1, Clock::now() + std::chrono::seconds(10), done);
    FAIL() << "a third request was admitted into a queue of 2";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.kind(), Status::kUnavailable);
    EXPECT_NE(std::string(e.what()).find("queue full"), std::string::npos);
  }
  try {
    b.submit(rows(5, 0), 5, Clock::now() + std::chrono::seconds(10), done);
    FAIL() << "5 rows admitted with --max-batch-size 4";
  } catch (const ServeError& e) {
    EXPECT_EQ(e.kind(), Status::kInput);
  }
  while (answered.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// The default batcher (no delay) waits only after a batch of several rows, a tenth of its compute.
TEST(Batching, WaitsOnlyForClientsALargerBatchAnswered) {
  using loom::serve::adaptive_wait;
  using std::chrono::milliseconds;
  EXPECT_EQ(adaptive_wait(0, milliseconds(40)), Clock::duration::zero());  // nothing ran yet
  EXPECT_EQ(adaptive_wait(1, milliseconds(40)), Clock::duration::zero());  // one client: never waits
  EXPECT_EQ(adaptive_wait(8, milliseconds(40)), milliseconds(4));
}

// After a batch of several rows, a request arriving within a tenth of that batch's compute joins
// the one queued before it; after a batch of one row, a request runs at once, alone.
TEST_F(ServeCore, DefaultBatcherGathersTheClientsOfTheLastBatch) {
  loom::rt::Mlp big({784, 2048, 2048, 10}, 5);  // a batch of 512 rows: tens of milliseconds
  loom::rt::save_model(dir_ + "/big.h5", big.config_json(), big.params());
  Options o;  // max_queue_delay_us 0
  o.max_batch_size = 512;
  Batcher b({std::make_shared<ServedModel>("big", "1", dir_ + "/big.h5")}, o, nullptr);
  std::remove((dir_ + "/big.h5").c_str());
  auto pair = [&](std::chrono::microseconds gap) {  // two one-row requests, `gap` apart: rows of the first's batch
    auto p = std::make_shared<std::promise<Batcher::Outcome>>();
    auto f = p->get_future();
    b.submit(rows(1, 0), 1, Clock::now() + std::chrono::seconds(30), [p](Batcher::Outcome out) { p->set_value(std::move(out)); });
    std::this_thread::sleep_for(gap);
    Batcher::Outcome second = b.run(rows(1, 0), 1, Clock::now() + std::chrono::seconds(30));
    EXPECT_EQ(second.status, Status::kOk);
    return f.get().batch_rows;
  };
  // A loaded machine can stall either thread for longer than the gap, so each behaviour gets three
  // tries and must show at least once; without the adaptive wait the first never would.
  std::chrono::microseconds gap{0};
  int joined = 0, alone = 0;
  for (int attempt = 0; attempt < 3 && joined != 2; ++attempt) {
    const Batcher::Outcome large = b.run(rows(512, 0), 512, Clock::now() + std::chrono::seconds(30));
    ASSERT_EQ(large.status, Status::kOk);
    ASSERT_GT(large.compute_s, 0.02) << "the large batch was too quick to leave a wait worth testing";
    gap = std::chrono::microseconds(static_cast<int64_t>(large.compute_s * 1e6 / 40));  // a quarter of the wait
    joined = pair(gap);
  }
  EXPECT_EQ(joined, 2) << "a request " << gap.count() << " us after another did not join it after a batch of 512";
  for (int attempt = 0; attempt < 3 && alone != 1; ++attempt) alone = pair(gap);
  EXPECT_EQ(alone, 1) << "after batches of one or two rows, the first request should not wait that long";
}

// A short pass that finds nothing queued runs on the caller's thread; with a delay set (the
// operator asked for batches), or for a model whose passes are long, it goes to the batch thread.
// The choice follows the last pass's measured time, which a loaded machine can stretch now and
// then, so each batcher answers 20 requests in turn and the test counts where they ran.
TEST_F(ServeCore, ShortPassesWithNothingQueuedRunOnTheCallersThread) {
  auto on_caller = [&](Batcher& b) {  // of 20 requests, one at a time: how many ran on this thread
    int here = 0;
    for (int k = 0; k < 20; ++k) {
      std::atomic<bool> answered{false};
      std::thread::id on;
      b.submit(rows(1, 0), 1, Clock::now() + std::chrono::seconds(10), [&](Batcher::Outcome out) {
        EXPECT_EQ(out.status, Status::kOk) << out.error;
        on = std::this_thread::get_id();
        answered = true;
      });
      while (!answered) std::this_thread::sleep_for(std::chrono::microseconds(50));
      here += on == std::this_thread::get_id();
    }
    return here;
  };
  Options o;  // max_queue_delay_us 0
  Batcher direct({model_}, o, nullptr);
  EXPECT_GE(on_caller(direct), 10) << "a tiny model's passes should mostly run on the caller's thread";
  inference::ModelStatistics st;
  direct.stats().fill(&st);
  EXPECT_EQ(st.execution_count(), 20u);  // counted as every batch is
  o.max_queue_delay_us = 1;
  Batcher delayed({model_}, o, nullptr);
  EXPECT_EQ(on_caller(delayed), 0) << "with a delay set, every request goes to the batch thread";
  loom::rt::Mlp big({784, 2048, 2048, 10}, 5);  // one row streams 16 MB of weights: hundreds of microseconds
  loom::rt::save_model(dir_ + "/slow.h5", big.config_json(), big.params());
  o.max_queue_delay_us = 0;
  Batcher slow({std::make_shared<ServedModel>("slow", "1", dir_ + "/slow.h5")}, o, nullptr);
  std::remove((dir_ + "/slow.h5").c_str());
  EXPECT_LE(on_caller(slow), 1) << "only the first pass, before any was timed, may run on the caller's thread";
}

TEST_F(ServeCore, AnswersRequestsPastTheirDeadlineWithoutComputingThem) {
  Options o;
  Batcher b({model_}, o, nullptr);
  Batcher::Outcome out = b.run(rows(2, 0), 2, Clock::now() - std::chrono::milliseconds(1));
  EXPECT_EQ(out.status, Status::kTimeout);
  EXPECT_TRUE(out.outputs.empty());
  EXPECT_EQ(b.run(rows(2, 0), 2, Clock::now() + std::chrono::seconds(5)).status, Status::kOk);
}

TEST_F(ServeCore, DestroyingABatcherAnswersEveryAdmittedRequest) {
  std::atomic<int> ok{0};
  {
    Options o;
    o.max_batch_size = 2;
    o.max_queue_delay_us = 100000;
    Batcher b({model_}, o, nullptr);
    for (int i = 0; i < 20; ++i)
      b.submit(rows(1, 0), 1, Clock::now() + std::chrono::seconds(30), [&](Batcher::Outcome out) { ok += out.status == Status::kOk; });
  }
  EXPECT_EQ(ok.load(), 20);
}

TEST_F(ServeCore, DecodesUint8WithTheModelsPreprocessingAndChecksShapes) {
  loom::serve::TensorIn t{"input", "UINT8", {1, 28, 28}, std::string(784, static_cast<char>(255))};
  int n = 0;
  auto x = loom::serve::decode_input(model_->input(), {t}, 32, &n);
  EXPECT_EQ(n, 1);
  EXPECT_NEAR(x[0], 255 * model_->input().scale, 1e-6);  // the MLP's preprocess: scale 1/255, mean 0, std 1
  EXPECT_NEAR(x[783], 1.0f, 1e-6);
  auto expect_bad = [&](loom::serve::TensorIn in, const char* what) {
    try {
      loom::serve::decode_input(model_->input(), {in}, 32, &n);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ServeError& e) {
      EXPECT_EQ(e.kind(), Status::kInput) << what;
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad({"input", "UINT8", {1, 783}, std::string(783, '\0')}, "each row must hold 784 values");
  expect_bad({"input", "FP32", {1, 784}, std::string(784, '\0')}, "shape and FP32 need 3136");
  expect_bad({"input", "INT64", {1, 784}, std::string(784 * 8, '\0')}, "datatype INT64 is not supported");
  expect_bad({"pixels", "UINT8", {1, 784}, std::string(784, '\0')}, "unexpected input 'pixels'");
  float nan = std::nanf("");
  std::string bad(784 * 4, '\0');
  std::memcpy(&bad[0], &nan, 4);
  expect_bad({"input", "FP32", {1, 784}, bad}, "NaN");
}

TEST_F(ServeCore, ReadsAValidInferenceServiceAndNamesBadFields) {
  auto write = [&](const std::string& text) { return write_spec(text); };
  const std::string good =
      "apiVersion: loom.ai/v1\nkind: InferenceService\nmetadata:\n  name: fm\nspec:\n  model:\n    path: file://" + dir_ +
      "/model.h5\n    format: loom-hdf5\n  resources:\n    requests: {gpu: 1, memory: 8Gi}\n"
      "  autoscaling:\n    minReplicas: 2\n    maxReplicas: 10\n    metrics:\n      - type: Requests\n        queueLength: 5\n";
  auto s = loom::serve::load_spec(write(good));
  EXPECT_EQ(s.name, "fm");
  EXPECT_EQ(s.path, dir_ + "/model.h5");
  EXPECT_EQ(s.requests_gpu, 1);
  EXPECT_EQ(s.requests_memory, "8Gi");
  EXPECT_EQ(s.max_replicas, 10);
  EXPECT_EQ(s.queue_length, 5);
  auto expect_bad = [&](const std::string& from, const std::string& to, const char* what) { expect_spec_refused(good, from, to, what); };
  expect_bad("queueLength", "queueLenght", "unknown field spec.autoscaling.metrics[0].queueLenght");
  expect_bad("file://", "https://", "scheme https:// is not supported");
  expect_bad("gpu: 1", "gpu: one", "spec.resources.requests.gpu must be an integer");
  expect_bad("name: fm", "name: ../fm", "metadata.name");
  expect_bad("loom.ai/v1", "loom.ai/v2", "apiVersion 'loom.ai/v2' is not one loom-serve reads (loom.ai/v1, serving.kserve.io/v1beta1, ai.baidu.com/v1)");
  expect_bad("  model:\n", "  mode:\n", "unknown field spec.mode");
  expect_bad("format: loom-hdf5", "format: ONNX", "format ONNX needs spec.model.path to name a .onnx file");
  expect_bad("format: loom-hdf5", "format: tensorflow", "spec.model.format 'tensorflow' is not a format loom-serve runs");
  expect_bad("/model.h5", "/model.onnx", "names a .onnx file: say spec.model.format: onnx");
  expect_bad("  model:\n", "  [model]:\n", "spec.yaml: line 6, column 3: a value of the wrong kind");  // yaml-cpp's own
  // Serverless: the grace period as Knative writes durations, the warm pool, the Slurm placement.
  std::string serverless = good;
  serverless.replace(serverless.find("    metrics:"), 0, "    scaleToZeroGracePeriod: 1m30s\n    warmPool: 2\n");
  serverless += "  slurm:\n    partition: spot\n    qos: low\n    preemptible: true\n";
  s = loom::serve::load_spec(write(serverless));
  EXPECT_EQ(s.scale_to_zero_grace_s, 90);
  EXPECT_EQ(s.warm_pool, 2);
  EXPECT_EQ(s.partition, "spot");
  EXPECT_EQ(s.qos, "low");
  EXPECT_TRUE(s.preemptible);
  EXPECT_EQ(loom::serve::load_spec(write(good)).scale_to_zero_grace_s, 30) << "Knative's default";
  auto bad_serverless = [&](const std::string& from, const std::string& to, const char* what) {
    expect_spec_refused(serverless, from, to, what);
  };
  bad_serverless("1m30s", "90x", "spec.autoscaling.scaleToZeroGracePeriod '90x' is not a duration");
  bad_serverless("1m30s", "2d", "is not a duration");
  bad_serverless("1m30s", "48h", "must be a duration up to 86400 s");
  bad_serverless("warmPool: 2", "warmPool: 11", "warmPool exceeds maxReplicas");
  bad_serverless("partition: spot", "partition: \"spot;rm -rf /\"", "spec.slurm.partition 'spot;rm -rf /' must be a Slurm name");
  bad_serverless("preemptible: true", "preemptible: maybe", "spec.slurm.preemptible must be true or false");
  bad_serverless("qos: low", "qos: low\n    account: x", "unknown field spec.slurm.account");
  std::string onnx = good;
  onnx.replace(onnx.find("/model.h5\n    format: loom-hdf5"), 31, "/model.onnx\n    format: onnx");
  EXPECT_EQ(loom::serve::load_spec(write(onnx)).format, "ONNX");
}

// KServe's InferenceService and the seed's ai.baidu.com/v1, mapped onto the same spec: formats
// as users write them, storageUri a folder or a file, replica bounds, scaleMetric/scaleTarget,
// nvidia.com/gpu; what Loom does not act on named, not refused; other schemes and formats refused.
TEST_F(ServeCore, ReadsKServesAndTheSeedsInferenceServices) {
  auto write = [&](const std::string& text) { return write_spec(text); };
  const std::string kserve = "apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata:\n  name: bert\n"
                             "  namespace: ml\n  annotations: {a: b}\nspec:\n  predictor:\n    minReplicas: 0\n    maxReplicas: 3\n"
                             "    scaleMetric: rps\n    scaleTarget: 40\n    model:\n      modelFormat: {name: ONNX, version: \"1\"}\n"
                             "      storageUri: file:///models/bert/1\n      resources:\n        requests: {cpu: \"2\", memory: 4Gi, "
                             "nvidia.com/gpu: \"1\"}\n        limits: {nvidia.com/gpu: 2}\n  transformer: {containers: []}\n";
  auto s = loom::serve::load_spec(write(kserve));
  EXPECT_EQ(s.name, "bert");
  EXPECT_EQ(s.path, "/models/bert/1/model.onnx");
  EXPECT_EQ(s.format, "ONNX");
  EXPECT_EQ(s.min_replicas, 0);
  EXPECT_EQ(s.max_replicas, 3);
  EXPECT_EQ(s.metric, "rps");
  EXPECT_EQ(s.queue_length, 40);
  EXPECT_EQ(s.requests_gpu, 1);
  EXPECT_EQ(s.limits_gpu, 2);
  EXPECT_EQ(s.requests_memory, "4Gi");
  std::string grace = kserve;
  grace.replace(grace.find("{a: b}"), 6, "{autoscaling.knative.dev/scale-to-zero-pod-retention-period: 5m}");
  EXPECT_EQ(loom::serve::load_spec(write(grace)).scale_to_zero_grace_s, 300) << "Knative's annotation";
  EXPECT_EQ(s.ignored, std::vector<std::string>({"metadata.namespace", "metadata.annotations", "spec.transformer",
                                                 "spec.predictor.model.modelFormat.version", "spec.predictor.model.resources.requests.cpu"}));
  auto bad = [&](const std::string& from, const std::string& to, const char* what) { expect_spec_refused(kserve, from, to, what); };
  bad("file:///models", "gs://models", "storageUri: scheme gs:// is not supported");
  bad("name: ONNX", "name: sklearn", "modelFormat.name 'sklearn' is not a format loom-serve runs");
  bad("scaleMetric: rps", "scaleMetric: cpu", "scaleMetric 'cpu' is not one the controller scales on (concurrency or rps)");
  bad("v1beta1", "v1alpha2", "apiVersion 'serving.kserve.io/v1alpha2' is not one loom-serve reads");
  bad("    model:\n      modelFormat: {name: ONNX, version: \"1\"}\n      storageUri: file:///models/bert/1\n",
      "    sklearn:\n      storageUri: gs://x\n", "spec.predictor.sklearn: loom-serve runs ONNX and Loom's HDF5 models");
  // KServe's older predictor.onnx; Knative's default target when scaleTarget is not given.
  auto old = loom::serve::load_spec(write("apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\nmetadata: {name: m}\n"
                                           "spec:\n  predictor:\n    onnx:\n      storageUri: /models/m/model.onnx\n"));
  EXPECT_EQ(old.path, "/models/m/model.onnx");
  EXPECT_EQ(old.metric, "concurrency");
  EXPECT_EQ(old.queue_length, 100);
  // The seed's apiVersion, as written (Loom's schema; a field Loom does not know noted).
  auto seed = loom::serve::load_spec(write("apiVersion: ai.baidu.com/v1\nkind: InferenceService\nmetadata:\n  name: bert-serving\n"
                                            "spec:\n  model:\n    path: /models/bert-serving\n    format: onnx\n    runtime: onnxruntime\n"
                                            "  resources:\n    requests: {gpu: 1, memory: 4Gi}\n  autoscaling:\n    minReplicas: 1\n"
                                            "    maxReplicas: 4\n    metrics:\n      - type: Requests\n        queueLength: 5\n"));
  EXPECT_EQ(seed.path, "/models/bert-serving/model.onnx");
  EXPECT_EQ(seed.format, "ONNX");
  EXPECT_EQ(seed.queue_length, 5);
  EXPECT_EQ(seed.ignored, std::vector<std::string>({"spec.model.runtime"}));
  // A pipeline stays Loom's own.
  std::ofstream(dir_ + "/p.yaml") << "apiVersion: serving.kserve.io/v1beta1\nkind: InferencePipeline\nmetadata: {name: p}\nspec: {}\n";
  EXPECT_THROW(loom::serve::spec_kind(dir_ + "/p.yaml"), ServeError);
  std::remove((dir_ + "/p.yaml").c_str());
}

TEST(TensorIn, GraphInputsAreCheckedByNameTypeRankAndSize) {
  using loom::serve::check_named;
  using loom::serve::TensorDesc;
  using loom::serve::TensorIn;
  const std::vector<TensorDesc> want = {{"ids", "INT64", {-1, -1}}, {"mask", "BOOL", {-1, 4}}};
  auto ids = [](int64_t rows, int64_t cols) { return TensorIn{"ids", "INT64", {rows, cols}, std::string(static_cast<size_t>(rows * cols * 8), '\0')}; };
  auto mask = [](int64_t rows) { return TensorIn{"mask", "BOOL", {rows, 4}, std::string(static_cast<size_t>(rows * 4), '\1')}; };
  int rows = 0;
  auto got = check_named(want, {mask(2), ids(2, 7)}, 8, true, &rows);  // any order
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(got[0]->name, "ids");
  auto expect_bad = [&](const std::vector<TensorIn>& in, const char* what, int max_rows = 8) {
    try {
      check_named(want, in, max_rows, true, &rows);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ServeError& e) {
      EXPECT_EQ(e.kind(), Status::kInput);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_bad({ids(2, 7)}, "missing input 'mask'");
  expect_bad({ids(2, 7), mask(2), mask(2)}, "given twice");
  expect_bad({ids(2, 7), mask(3)}, "has 3 rows");
  expect_bad({ids(2, 7), mask(2)}, "the model takes at most 1", 1);
  TensorIn bad_mask = mask(2);
  bad_mask.data[3] = 2;
  expect_bad({ids(2, 7), bad_mask}, "BOOL data must be 0 or 1");
  TensorIn fixed = mask(2);
  fixed.shape = {2, 5};
  expect_bad({ids(2, 7), fixed}, "must have shape [-1, 4]");
  TensorIn huge = ids(1, 1);
  huge.shape = {int64_t{1} << 40, int64_t{1} << 20};
  expect_bad({huge, mask(1)}, "claims more than 2^31 elements");
  TensorIn typed = ids(2, 7);
  typed.datatype = "INT32";
  expect_bad({typed, mask(2)}, "input 'ids' must be INT64, not INT32");
  TensorIn short_data = ids(2, 7);
  short_data.data.resize(8);
  expect_bad({short_data, mask(2)}, "holds 8 bytes");
  // FP32 data is checked whole, to its last value.
  const std::vector<TensorDesc> fp32 = {{"x", "FP32", {-1, 3}}};
  std::string values(2 * 3 * 4, '\0');
  EXPECT_NO_THROW(check_named(fp32, {TensorIn{"x", "FP32", {2, 3}, values}}, 8, true, &rows));
  const float inf = INFINITY;
  std::memcpy(&values[20], &inf, 4);
  try {
    check_named(fp32, {TensorIn{"x", "FP32", {2, 3}, values}}, 8, true, &rows);
    ADD_FAILURE() << "accepted an infinity in the last value";
  } catch (const ServeError& e) {
    EXPECT_NE(std::string(e.what()).find("holds a NaN or infinite value"), std::string::npos) << e.what();
  }
}

// The services folder: a controller's announcement is found by name, written whole and read
// back; a name that would leave the folder, a missing one and one without gRPC are errors that
// say which.
TEST(Services, AnnouncedByNameAndFoundAgain) {
  char tmpl[] = "/tmp/loom-services-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = std::string(tmpl) + "/a/b";  // created with its parents
  loom::serve::announce_service(dir, "svc", "127.0.0.1", 8000, 8001);
  EXPECT_EQ(loom::serve::service_grpc_address(dir, "svc"), "127.0.0.1:8001");
  loom::serve::Announcement a;
  ASSERT_TRUE(loom::serve::read_announcement(dir + "/svc.json", &a));
  EXPECT_EQ(a.http_port, 8000);
  EXPECT_EQ(a.pid, static_cast<int>(::getpid()));
  loom::serve::announce_service(dir, "v6", "::1", 1, 2);
  EXPECT_EQ(loom::serve::service_grpc_address(dir, "v6"), "[::1]:2");
  loom::serve::announce_service(dir, "nogrpc", "127.0.0.1", 8000, -1);
  EXPECT_THROW(loom::serve::service_grpc_address(dir, "nogrpc"), std::runtime_error);
  EXPECT_THROW(loom::serve::service_file(dir, "../etc"), std::runtime_error);
  EXPECT_THROW(loom::serve::service_file(dir, ".hidden"), std::runtime_error);
  try {
    loom::serve::service_grpc_address(dir, "absent");
    ADD_FAILURE() << "an absent service was found";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("service absent is not announced in " + dir), std::string::npos) << e.what();
  }
  // Planted announcements are not believed: one another user owns (it redirected a pipeline and
  // its bearer token), one others may write, a symlink to a real one (issue 33, item 10).
  if (::geteuid() == 0) {  // only root can give a file away
    loom::serve::announce_service(dir, "victim", "127.0.0.1", 9000, 9001);
    ASSERT_EQ(::chown((dir + "/victim.json").c_str(), 65534, 65534), 0);
    try {
      loom::serve::service_grpc_address(dir, "victim");
      ADD_FAILURE() << "an announcement another user owns was believed";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to user 65534"), std::string::npos) << e.what();
    }
  }
  loom::serve::announce_service(dir, "open", "127.0.0.1", 9000, 9001);
  ASSERT_EQ(::chmod((dir + "/open.json").c_str(), 0666), 0);
  EXPECT_FALSE(loom::serve::read_announcement(dir + "/open.json", &a));
  ASSERT_EQ(::symlink((dir + "/v6.json").c_str(), (dir + "/link.json").c_str()), 0);
  EXPECT_FALSE(loom::serve::read_announcement(dir + "/link.json", &a));
  std::ofstream(dir + "/torn.json") << "{\"host\": \"x\", \"http";  // not an announcement (yet)
  EXPECT_FALSE(loom::serve::read_announcement(dir + "/torn.json", &a));
  loom::serve::withdraw_service(dir, "svc");
  EXPECT_THROW(loom::serve::service_grpc_address(dir, "svc"), std::runtime_error);
  EXPECT_EQ(loom::serve::services_dir("/given"), "/given");
  std::filesystem::remove_all(tmpl);
}

// A pipeline's steps are put in an order where each follows those it reads, in time linear in
// the spec: a 10,000-step chain written in reverse took 16 s of CPU (issue 33, item 15).
TEST(PipelineSpec, OrdersALongReversedChainQuicklyAndNamesACycle) {
  char tmpl[] = "/tmp/loom-pipeline-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const int k = 10000;
  std::string y = "apiVersion: loom.ai/v1\nkind: InferencePipeline\nmetadata: {name: chain}\nspec:\n  steps:\n";
  for (int i = k - 1; i >= 0; --i)
    y += "  - {name: s" + std::to_string(i) + ", url: \"grpc://127.0.0.1:1\", model: m, inputs: {x: " +
         (i == 0 ? std::string("request.x") : "s" + std::to_string(i - 1) + ".y") + "}}\n";
  y += "  outputs: {y: s" + std::to_string(k - 1) + ".y}\n";
  const std::string file = std::string(tmpl) + "/chain.yaml";
  std::ofstream(file) << y;
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = loom::serve::load_pipeline_spec(file, tmpl);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  ASSERT_EQ(p.steps.size(), static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) ASSERT_EQ(p.steps[static_cast<size_t>(i)].name, "s" + std::to_string(i));
  std::ofstream(file) << "apiVersion: loom.ai/v1\nkind: InferencePipeline\nmetadata: {name: c}\nspec:\n  steps:\n"
                         "  - {name: a, url: \"grpc://127.0.0.1:1\", model: m, inputs: {x: b.y}}\n"
                         "  - {name: b, url: \"grpc://127.0.0.1:1\", model: m, inputs: {x: a.y}}\n"
                         "  - {name: c, url: \"grpc://127.0.0.1:1\", model: m, inputs: {x: request.x}}\n"
                         "  outputs: {y: b.y}\n";
  try {
    loom::serve::load_pipeline_spec(file, tmpl);
    ADD_FAILURE() << "a cycle was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("the steps a, b form a cycle"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(tmpl);
}

// A pipeline hop's answer is checked against its model's metadata before it is used.
TEST(PipelineHops, AnswersAreCheckedAgainstTheMetadata) {
  using loom::serve::TensorIn;
  const loom::serve::TensorDesc want{"y", "FP32", {-1, -1}};
  auto fault = [&](TensorIn t) {
    try {
      loom::serve::check_answer(want, t, "step 's' output 'y'");
      return std::string("accepted");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(fault({"y", "FP32", {2, 4}, std::string(32, '\0')}), "accepted");
  EXPECT_NE(fault({"y", "FP32", {2, 4}, std::string(3, '\0')}).find("holds 3 bytes; shape [2, 4] of FP32 needs 32"), std::string::npos);
  EXPECT_NE(fault({"y", "FP32", {-7, 4}, std::string(32, '\0')}).find("has shape [-7, 4]"), std::string::npos);
  EXPECT_NE(fault({"y", "FP32", {int64_t{1} << 31, int64_t{1} << 31}, ""}).find("more than 2^31 elements"), std::string::npos);
  EXPECT_NE(fault({"y", "INT64", {2, 4}, std::string(64, '\0')}).find("is INT64, but its model's metadata says FP32"),
            std::string::npos);
  EXPECT_NE(fault({"y", "FP32", {8}, std::string(32, '\0')}).find("has shape [8]"), std::string::npos);
  EXPECT_EQ(fault({"y", "FP32", {0, 4}, ""}), "accepted");  // no rows is a valid answer
}

TEST(Generate, StreamsWholeUtf8Characters) {
  loom::serve::Utf8Chunker c;
  std::vector<std::string> pieces;
  for (char ch : std::string("caf\xc3\xa9\xe2\x82\xac!")) {
    std::string whole = c.add(std::string(1, ch));
    if (!whole.empty()) pieces.push_back(whole);
  }
  EXPECT_EQ(pieces, (std::vector<std::string>{"c", "a", "f", "\xc3\xa9", "\xe2\x82\xac", "!"}));
  EXPECT_EQ(c.add("\xe2\x82"), "");  // incomplete: held back
  EXPECT_EQ(c.flush(), "\xe2\x82");
  EXPECT_EQ(c.add("\x80\x80\x80\x80"), "\x80\x80\x80\x80");  // not UTF-8: passed on, not held forever
}

TEST(Generate, RequestsAreCheckedStrictly) {
  using loom::serve::parse_generate_request;
  auto r = parse_generate_request(R"({"text_input":"hi","parameters":{"max_tokens":5,"temperature":0.5,"seed":3}})");
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.params.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.params.temperature, 0.5f);
  EXPECT_EQ(r.params.seed, 3u);
  EXPECT_EQ(parse_generate_request(R"({"text_input":"hi","max_tokens":7})").params.max_tokens, 7);  // Triton's top-level form
  EXPECT_EQ(parse_generate_request(R"({"text_input":"hi","stop":["a","bc"]})").params.stop, (std::vector<std::string>{"a", "bc"}));
  std::string many = R"({"text_input":"a","stop":[)";
  for (int i = 0; i < 10000; ++i) many += std::string(i ? "," : "") + "\"s\"";
  many += "]}";
  for (const std::string& bad : std::vector<std::string>{R"({"text_input":5})", R"({"max_tokens":5})", R"({"text_input":"a","max_tokens":0})",
                                R"({"text_input":"a","max_tokens":-3})", R"({"text_input":"a","max_tokens":1e12})",
                                R"({"text_input":"a","max_tokens":1.5})", R"({"text_input":"a","temperature":"hot"})",
                                R"({"text_input":"a","temperature":-1})", R"({"text_input":"a","top_p":0})",
                                R"({"text_input":"a","top_p":1.5})", R"({"text_input":"a","stop":[""]})",
                                R"({"text_input":"a","seed":-1})", R"({"text_input":"a","parameters":[]})", "[]", many})
    EXPECT_THROW(parse_generate_request(bad), loom::serve::ServeError) << bad.substr(0, 80);
}

TEST(Generate, CompletionRequestsAreCheckedStrictly) {
  using loom::serve::parse_completion_request;
  auto r = parse_completion_request(R"({"model":"g","prompt":[5,6,7],"max_tokens":3,"n":2,"stream":true,"logprobs":1,"ignore_eos":true})");
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.params.logprobs, 1);
  EXPECT_TRUE(r.params.ignore_eos);
  EXPECT_FLOAT_EQ(r.params.temperature, 1.0f);  // OpenAI's default
  EXPECT_EQ(r.params.max_tokens, 3);
  EXPECT_EQ(parse_completion_request(R"({"prompt":["hello"]})").prompt_text, "hello");
  EXPECT_EQ(parse_completion_request(R"({"prompt":"hello"})").params.max_tokens, 16);  // OpenAI's default
  for (const std::string& bad : std::vector<std::string>{R"({"model":"g"})", R"({"prompt":["a","b"]})", R"({"prompt":[1,-2]})", R"({"prompt":"a","n":0})",
                                R"({"prompt":"a","n":17})", R"({"prompt":"a","echo":true})", R"({"prompt":"a","best_of":3})",
                                R"({"prompt":"a","presence_penalty":0.5})", R"({"prompt":"a","logprobs":99})",
                                R"({"prompt":"a","stream":"yes"})", R"({"prompt":"a","suffix":"x"})"})
    EXPECT_THROW(parse_completion_request(bad), loom::serve::ServeError) << bad;
}

// Triton's config.pbtxt through protobuf's TextFormat: Triton's own field names, lists written
// either way, maps, comments; fields Loom does not model skipped and named in one warning;
// malformed text refused with its line and column.
TEST(ModelConfig, ParsesTritonsTextAndNamesWhatItSkips) {
  using loom::serve::parse_model_config;
  const std::string triton = R"(name: "bert"  # a comment { with a brace
platform: "onnxruntime_onnx"
input [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] } ]
input { name: "mask" data_type: TYPE_INT64 dims: -1 }
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
optimization { graph { level: 1 } }
parameters { key: "x" value: { string_value: "max_batch_size: 9 }" } }
instance_group [ { count: 2 kind: KIND_CPU } ]
max_batch_size: 16
)";
  std::string warned;
  const inference::ModelConfig c = parse_model_config(triton, "c", [&](const std::string& w) { warned += w; });
  EXPECT_EQ(c.max_batch_size(), 16);
  ASSERT_EQ(c.input_size(), 2);
  EXPECT_EQ(c.input(1).name(), "mask");
  EXPECT_EQ(c.input(0).data_type(), inference::TYPE_INT64);
  ASSERT_EQ(c.dynamic_batching().preferred_batch_size_size(), 2);
  EXPECT_EQ(c.dynamic_batching().max_queue_delay_microseconds(), 100u);
  EXPECT_EQ(c.parameters().at("x").string_value(), "max_batch_size: 9 }");
  EXPECT_EQ(c.instance_group(0).count(), 2);
  EXPECT_NE(warned.find("c:6:"), std::string::npos) << warned;
  EXPECT_NE(warned.find("optimization"), std::string::npos) << warned;
  for (const char* bad : {"max_batch_size: 99999999999", "max_batch_size: x", "input [ { name: \"a\" ", "name: \"open",
                          "a { b { c ", "}", "max_batch_size:", "input { data_type: TYPE_NOPE }"})
    EXPECT_THROW(parse_model_config(bad, "c", nullptr), loom::rt::Error) << bad;
  try {
    parse_model_config("name: \"m\"\n\nmax_batch_size: x\n", "folder/config.pbtxt", nullptr);
    FAIL();
  } catch (const loom::rt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("folder/config.pbtxt:3:"), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, VersionPolicyChoosesTheFoldersServed) {
  using loom::serve::parse_model_config;
  using loom::serve::policy_versions;
  const std::vector<std::string> found = {"1", "10", "2", "notes"};
  using V = std::vector<std::string>;
  EXPECT_EQ(policy_versions(parse_model_config("", "c", nullptr), found), V({"10"}));  // Triton's default: latest 1
  EXPECT_EQ(policy_versions(parse_model_config("version_policy { latest { num_versions: 2 } }", "c", nullptr), found), V({"2", "10"}));
  EXPECT_EQ(policy_versions(parse_model_config("version_policy { all { } }", "c", nullptr), found), V({"1", "2", "10"}));
  EXPECT_EQ(policy_versions(parse_model_config("version_policy { specific { versions: [1, 7] } }", "c", nullptr), found), V({"1"}));
}

// The configuration checked against the loaded model: each contradiction names the model, the
// tensor and both values; what the file leaves out comes from the model; batching applied.
TEST_F(ServeCore, ConfigIsCheckedAgainstTheModelAndCompletedFromIt) {
  using loom::serve::parse_model_config;
  using loom::serve::settle_config;
  auto settle = [&](const std::string& text, Options* o) {
    const inference::ModelConfig f = parse_model_config(text, "c", nullptr);
    ServedModel m("m", "1", dir_ + "/model.h5");
    return settle_config(&f, "m", m, o);
  };
  auto refused = [&](const std::string& text, const std::string& want) {
    Options o;
    try {
      settle(text, &o);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const loom::rt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("max_batch_size: 8 input { name: \"input\" data_type: TYPE_INT32 dims: [784] }",
          "model m input 'input': config.pbtxt says TYPE_INT32, the model has TYPE_FP32");
  refused("max_batch_size: 8 input { name: \"input\" data_type: TYPE_FP32 dims: [785] }",
          "config.pbtxt dims [785] (with the batch dimension [-1,785]), the model's shape [-1,784]");
  refused("max_batch_size: 0 input { name: \"input\" data_type: TYPE_FP32 dims: [784] }", "dims [784], the model's shape [-1,784]");
  refused("input { name: \"pixels\" data_type: TYPE_FP32 dims: [784] }", "names input 'pixels', which the model does not have (its inputs: input)");
  refused("max_batch_size: 8 input { name: \"input\" data_type: TYPE_FP32 dims: [784] } input { name: \"input\" data_type: TYPE_FP32 dims: [784] }",
          "lists input 'input' twice");
  refused("name: \"other\"", "names the model 'other', but its folder is m");
  refused("max_batch_size: 64", "max_batch_size 64 is above the server's --max-batch-size 32");
  refused("max_batch_size: -2", "max_batch_size -2 is negative");
  refused("max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 40000000 }", "longer than the request deadline");
  refused("platform: \"tensorrt_plan\"", "platform 'tensorrt_plan'");
  Options o;
  const inference::ModelConfig c = settle(
      "max_batch_size: 8 dynamic_batching { max_queue_delay_microseconds: 300 preferred_batch_size: 4 } instance_group { count: 2 }", &o);
  EXPECT_EQ(o.max_batch_size, 8);
  EXPECT_EQ(o.max_queue_delay_us, 300);
  EXPECT_EQ(o.preferred_batch_sizes, std::vector<int>({4}));
  EXPECT_EQ(o.instances, 2);
  ASSERT_EQ(c.input_size(), 1);
  EXPECT_EQ(c.input(0).name(), "input");
  ASSERT_EQ(c.input(0).dims_size(), 1);
  EXPECT_EQ(c.input(0).dims(0), 784);
  EXPECT_EQ(c.output(0).name(), "logits");
  // Without dynamic_batching, Triton joins no requests; without a file, the model's own.
  Options o2;
  const inference::ModelConfig f = parse_model_config("max_batch_size: 8", "c", nullptr);
  ServedModel alone_m("m", "1", dir_ + "/model.h5");
  settle_config(&f, "m", alone_m, &o2);
  EXPECT_FALSE(alone_m.batched());
  Options o3;
  ServedModel derived_m("m", "1", dir_ + "/model.h5");
  const inference::ModelConfig d = settle_config(nullptr, "m", derived_m, &o3);
  EXPECT_EQ(d.max_batch_size(), 32);
  EXPECT_TRUE(d.has_dynamic_batching());
  const nlohmann::json j = loom::serve::proto_json(d);
  EXPECT_EQ(j["input"][0]["dims"], nlohmann::json::array({784})) << j.dump();  // numbers, as Triton writes them
  EXPECT_EQ(j["input"][0]["data_type"], "TYPE_FP32");
  EXPECT_EQ(j["max_batch_size"], 32);
}

// The statistics extension's numbers: 20 requests of 3 rows are 20 successes and 60 inferences;
// every execution is in one batch size's count; two instances answer every request.
TEST_F(ServeCore, StatisticsCountRequestsRowsAndBatches) {
  Options o;
  o.instances = 2;
  auto second = std::make_shared<ServedModel>("m", "1", dir_ + "/model.h5");
  Batcher b({model_, second}, o, nullptr);
  std::vector<std::future<Batcher::Outcome>> fs;
  for (int i = 0; i < 20; ++i) {
    auto p = std::make_shared<std::promise<Batcher::Outcome>>();
    fs.push_back(p->get_future());
    b.submit(rows(3, 0.01f * static_cast<float>(i)), 3, Clock::now() + std::chrono::seconds(10),
             [p](Batcher::Outcome out) { p->set_value(std::move(out)); });
  }
  for (auto& f : fs) ASSERT_EQ(f.get().status, Status::kOk);
  EXPECT_EQ(b.run(rows(1, 0), 1, Clock::now() - std::chrono::milliseconds(1)).status, Status::kTimeout);
  inference::ModelStatistics s;
  b.stats().fill(&s);
  EXPECT_EQ(s.inference_stats().success().count(), 20u);
  EXPECT_EQ(s.inference_stats().fail().count(), 1u);
  EXPECT_EQ(s.inference_count(), 60u);
  EXPECT_GE(s.execution_count(), 2u);  // 60 rows, at most 32 in a batch
  EXPECT_LE(s.execution_count(), 20u);
  uint64_t executions = 0, requests = 0;
  for (const auto& bs : s.batch_stats()) {
    EXPECT_EQ(bs.batch_size() % 3, 0u);
    executions += bs.compute_infer().count();
  }
  requests = s.inference_stats().compute_infer().count();
  EXPECT_EQ(executions, s.execution_count());
  EXPECT_EQ(requests, 20u);
  EXPECT_GT(s.inference_stats().compute_infer().ns(), 0u);
  EXPECT_GT(s.last_inference(), 1700000000000u);
}

}  // namespace
