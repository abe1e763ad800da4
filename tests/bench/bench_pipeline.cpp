// bench_pipeline.cpp — `loom-bench pipeline --spec PIPELINE.yaml --addr HOST:PORT`: the p50
// latency of one call to a served InferencePipeline against the same client calling its steps'
// services one after another (each step's request built from the earlier answers, as the
// pipeline does), and each step's own p50, so the hops' added latency shows. Inputs are made
// from the pipeline's metadata: FP32 uniform, INT64 ids below --int-max (masks of ones), every
// dynamic dimension --batch first, then --seq.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "grpc_service.grpc.pb.h"
#include "pipeline/pipeline.hpp"
#include "spec/services.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using inference::GRPCInferenceService;

struct Tensor {
  std::string datatype;
  std::vector<int64_t> shape;
  std::string data;
};

grpc::Status call(GRPCInferenceService::Stub& s, const std::string& model, const std::vector<std::pair<std::string, const Tensor*>>& in,
                  std::map<std::string, Tensor>* out) {
  inference::ModelInferRequest req;
  req.set_model_name(model);
  for (const auto& [name, t] : in) {
    auto* i = req.add_inputs();
    i->set_name(name);
    i->set_datatype(t->datatype);
    for (int64_t d : t->shape) i->add_shape(d);
    req.add_raw_input_contents(t->data);
  }
  inference::ModelInferResponse res;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status st = s.ModelInfer(&ctx, req, &res);
  if (!st.ok() || !out) return st;
  for (int k = 0; k < res.outputs_size() && k < res.raw_output_contents_size(); ++k)
    (*out)[res.outputs(k).name()] = {res.outputs(k).datatype(), {res.outputs(k).shape().begin(), res.outputs(k).shape().end()},
                                     res.raw_output_contents(k)};
  return st;
}

Tensor make_input(const inference::ModelMetadataResponse::TensorMetadata& m, int batch, int seq, int int_max, std::mt19937& rng) {
  Tensor t;
  t.datatype = m.datatype();
  for (int i = 0; i < m.shape_size(); ++i) t.shape.push_back(m.shape(i) >= 0 ? m.shape(i) : (i == 0 ? batch : seq));
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  const bool mask = m.name().find("mask") != std::string::npos;
  if (t.datatype == "FP32") {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = std::uniform_real_distribution<float>(0, 1)(rng);
    t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  } else if (t.datatype == "INT64") {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = mask ? 1 : static_cast<int64_t>(rng() % static_cast<unsigned>(int_max));
    t.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  } else {
    throw std::runtime_error("input " + m.name() + ": no generator for " + t.datatype);
  }
  return t;
}

// The p50 of each of `fs`, timed in turns (one call of each per round, after a warm-up round),
// so that every figure sees the same machine: on a shared VM, phases timed one after another
// drift apart by more than the differences measured.
std::vector<double> p50_ms_interleaved(int n, const std::vector<std::function<void()>>& fs) {
  std::vector<std::vector<double>> ms(fs.size());
  for (const auto& f : fs) f();  // warm-up
  for (int i = 0; i < n; ++i)
    for (size_t k = 0; k < fs.size(); ++k) {
      const auto t = Clock::now();
      fs[k]();
      ms[k].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
    }
  std::vector<double> p50;
  for (auto& m : ms) {
    std::sort(m.begin(), m.end());
    p50.push_back(m[m.size() / 2]);
  }
  return p50;
}

}  // namespace

int bench_pipeline(int argc, char** argv) {
  std::string spec_file, addr, format = "text";
  int requests = 300, batch = 1, seq = 16, int_max = 100;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--spec") spec_file = v;
    else if (k == "--addr") addr = v;
    else if (k == "--requests") requests = bench_int(k, v);
    else if (k == "--batch") batch = bench_int(k, v);
    else if (k == "--seq") seq = bench_int(k, v);
    else if (k == "--int-max") int_max = bench_int(k, v);
    else if (k == "--format") format = v;
    else {
      std::fprintf(stderr, "loom-bench pipeline: unknown option %s (--spec --addr --requests --batch --seq --int-max --format)\n", k.c_str());
      return 2;
    }
  }
  if (spec_file.empty() || addr.empty()) {
    std::fprintf(stderr, "loom-bench pipeline: needs --spec PIPELINE.yaml --addr HOST:PORT (the pipeline's gRPC)\n");
    return 2;
  }
  const loom::serve::PipelineSpec spec = loom::serve::load_pipeline_spec(spec_file, loom::serve::services_dir());
  auto pipe = GRPCInferenceService::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  inference::ModelMetadataResponse meta;
  {
    grpc::ClientContext ctx;
    inference::ModelMetadataRequest req;
    req.set_name(spec.name);
    const grpc::Status st = pipe->ModelMetadata(&ctx, req, &meta);
    if (!st.ok()) throw std::runtime_error("the pipeline at " + addr + ": " + st.error_message());
  }
  std::mt19937 rng(1);
  std::map<std::string, Tensor> request;
  for (const auto& m : meta.inputs()) request["request." + m.name()] = make_input(m, batch, seq, int_max, rng);
  std::vector<std::pair<std::string, const Tensor*>> pin;
  for (const auto& m : meta.inputs()) pin.emplace_back(m.name(), &request["request." + m.name()]);
  std::vector<std::unique_ptr<GRPCInferenceService::Stub>> stubs;
  for (const auto& st : spec.steps) stubs.push_back(GRPCInferenceService::NewStub(grpc::CreateChannel(st.address, grpc::InsecureChannelCredentials())));
  // The steps one after another: each request from the request's tensors and earlier answers.
  std::map<std::string, Tensor> values = request;
  auto sequential = [&](std::vector<double>* step_ms) {
    for (size_t i = 0; i < spec.steps.size(); ++i) {
      std::vector<std::pair<std::string, const Tensor*>> in;
      for (const auto& [name, src] : spec.steps[i].inputs) in.emplace_back(name, &values.at(src));
      std::map<std::string, Tensor> out;
      const auto t = Clock::now();
      const grpc::Status st = call(*stubs[i], spec.steps[i].model, in, &out);
      if (step_ms) (*step_ms)[i] = std::chrono::duration<double, std::milli>(Clock::now() - t).count();
      if (!st.ok()) throw std::runtime_error("step " + spec.steps[i].name + ": " + st.error_message());
      for (auto& [k, v] : out) values[spec.steps[i].name + "." + k] = std::move(v);
    }
  };
  sequential(nullptr);  // fills every step's inputs for the per-step timings
  std::vector<std::function<void()>> timed;
  std::vector<std::vector<std::pair<std::string, const Tensor*>>> step_in(spec.steps.size());
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    for (const auto& [name, src] : spec.steps[i].inputs) step_in[i].emplace_back(name, &values.at(src));
    timed.push_back([&, i] { call(*stubs[i], spec.steps[i].model, step_in[i], nullptr); });
  }
  std::map<std::string, Tensor> scratch = values;  // the sequential calls' answers, apart from the inputs above
  timed.push_back([&] {
    std::swap(values, scratch);
    sequential(nullptr);
    std::swap(values, scratch);
  });
  timed.push_back([&] {
    const grpc::Status st = call(*pipe, spec.name, pin, nullptr);
    if (!st.ok()) throw std::runtime_error("the pipeline: " + st.error_message());
  });
  std::vector<double> per_step = p50_ms_interleaved(requests, timed);
  const double pipe_ms = per_step.back();
  per_step.pop_back();
  const double seq_ms = per_step.back();
  per_step.pop_back();
  // The critical path: a step starts when its slowest producer has answered.
  std::map<std::string, double> finish;
  double critical = 0;
  size_t hops = 0;
  std::map<std::string, size_t> depth;
  for (size_t i = 0; i < spec.steps.size(); ++i) {
    double start = 0;
    size_t d = 0;
    for (const auto& [name, src] : spec.steps[i].inputs) {
      const std::string head = src.substr(0, src.find('.'));
      if (head != "request") start = std::max(start, finish[head]), d = std::max(d, depth[head]);
    }
    finish[spec.steps[i].name] = start + per_step[i];
    depth[spec.steps[i].name] = d + 1;
    critical = std::max(critical, finish[spec.steps[i].name]);
    hops = std::max(hops, d + 1);
  }
  const double added = pipe_ms - critical;
  if (format == "json") {
    std::printf("{\"pipeline\":\"%s\",\"requests\":%d,\"pipeline_p50_ms\":%.3f,\"sequential_p50_ms\":%.3f,\"ratio\":%.3f,"
                "\"critical_path_ms\":%.3f,\"hops\":%zu,\"added_ms_per_hop\":%.3f}\n",
                spec.name.c_str(), requests, pipe_ms, seq_ms, seq_ms / pipe_ms, critical, hops + 1, added / static_cast<double>(hops + 1));
  } else {
    std::printf("pipeline %s: p50 %.3f ms; the %zu steps one after another by the same client %.3f ms (%.2fx); steps alone:",
                spec.name.c_str(), pipe_ms, spec.steps.size(), seq_ms, seq_ms / pipe_ms);
    for (size_t i = 0; i < spec.steps.size(); ++i) std::printf(" %s %.3f ms", spec.steps[i].name.c_str(), per_step[i]);
    std::printf("; critical path %.3f ms over %zu hops (the client's and %zu steps deep): %.3f ms added per hop\n", critical,
                hops + 1, hops, added / static_cast<double>(hops + 1));
  }
  return 0;
}
