// kserve_grpc_client — a KServe v2 gRPC client generated from the same .proto as loom-serve,
// for the tests. Prints one JSON object per call; exit 0 when the call returned OK, else 1
// (the gRPC status code and message are printed).
//
//   kserve_grpc_client ADDR health
//   kserve_grpc_client ADDR metadata MODEL [VERSION]
//   kserve_grpc_client ADDR infer MODEL VERSION DATATYPE ROWS,COLS FILE [typed]
//   kserve_grpc_client ADDR burst MODEL N FILE     (N concurrent one-row FP32 requests)
//   kserve_grpc_client ADDR stream MODEL N FILE [K] (N one-row FP32 requests on one ModelStreamInfer
//                                                    stream, ids r0..; request K names no model)
// The bearer token, if any, comes from $LOOM_TOKEN.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpc_service.grpc.pb.h"

namespace {

std::unique_ptr<grpc::ClientContext> context() {
  auto c = std::make_unique<grpc::ClientContext>();
  if (const char* t = std::getenv("LOOM_TOKEN")) c->AddMetadata("authorization", std::string("Bearer ") + t);
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return c;
}

int report(const grpc::Status& s) {
  if (s.ok()) return 0;
  std::printf("{\"code\":%d,\"message\":\"%s\"}\n", static_cast<int>(s.error_code()), s.error_message().c_str());
  return 1;
}

// A request of one FP32 row, named "input", the row's bytes as raw contents.
inference::ModelInferRequest one_row(const std::string& model, const std::string& row) {
  inference::ModelInferRequest req;
  req.set_model_name(model);
  auto* in = req.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(static_cast<long long>(row.size() / 4));
  req.add_raw_input_contents(row);
  return req;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kserve_grpc_client ADDR health|metadata|infer|burst ...\n");
    return 2;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  auto channel = grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args);
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  const std::string cmd = argv[2];
  if (cmd == "health") {
    inference::ServerLiveResponse live;
    inference::ServerReadyResponse ready;
    grpc::Status s = stub->ServerLive(context().get(), {}, &live);
    if (!s.ok()) return report(s);
    s = stub->ServerReady(context().get(), {}, &ready);
    if (!s.ok()) return report(s);
    inference::ServerMetadataResponse meta;
    s = stub->ServerMetadata(context().get(), {}, &meta);
    std::printf("{\"live\":%s,\"ready\":%s,\"name\":\"%s\"}\n", live.live() ? "true" : "false",
                ready.ready() ? "true" : "false", s.ok() ? meta.name().c_str() : "");
    return report(s);
  }
  if (cmd == "metadata" && argc >= 4) {
    inference::ModelMetadataRequest req;
    req.set_name(argv[3]);
    if (argc >= 5) req.set_version(argv[4]);
    inference::ModelMetadataResponse res;
    grpc::Status s = stub->ModelMetadata(context().get(), req, &res);
    if (!s.ok()) return report(s);
    inference::ModelReadyRequest rr;
    rr.set_name(argv[3]);
    if (argc >= 5) rr.set_version(argv[4]);
    inference::ModelReadyResponse ready;
    s = stub->ModelReady(context().get(), rr, &ready);
    if (!s.ok()) return report(s);
    auto dims = [](const google::protobuf::RepeatedField<int64_t>& shape) {
      std::string out;
      for (int64_t d : shape) out += (out.empty() ? "" : ",") + std::to_string(d);
      return "[" + out + "]";
    };
    if (res.inputs_size() == 0 || res.outputs_size() == 0) return report(grpc::Status(grpc::StatusCode::INTERNAL, "metadata without inputs or outputs"));
    std::printf("{\"name\":\"%s\",\"versions\":%d,\"platform\":\"%s\",\"input\":\"%s %s %s\",\"output\":\"%s %s\",\"ready\":%s}\n",
                res.name().c_str(), res.versions_size(), res.platform().c_str(), res.inputs(0).name().c_str(),
                res.inputs(0).datatype().c_str(), dims(res.inputs(0).shape()).c_str(), res.outputs(0).name().c_str(),
                dims(res.outputs(0).shape()).c_str(), ready.ready() ? "true" : "false");
    return 0;
  }
  if (cmd == "infer" && argc >= 8) {
    inference::ModelInferRequest req;
    req.set_model_name(argv[3]);
    if (std::strcmp(argv[4], "-") != 0) req.set_model_version(argv[4]);
    req.set_id("kserve_grpc_client");
    auto* in = req.add_inputs();
    in->set_name("input");
    in->set_datatype(argv[5]);
    long long rows = 0, cols = 0;
    if (std::sscanf(argv[6], "%lld,%lld", &rows, &cols) != 2) return 2;
    in->add_shape(rows);
    in->add_shape(cols);
    const std::string data = slurp(argv[7]);
    const bool typed = argc >= 9 && std::strcmp(argv[8], "typed") == 0;
    if (!typed) {
      req.add_raw_input_contents(data);
    } else if (in->datatype() == "FP32") {
      for (size_t i = 0; i + 4 <= data.size(); i += 4) {
        float f;
        std::memcpy(&f, data.data() + i, 4);
        in->mutable_contents()->add_fp32_contents(f);
      }
    } else {
      for (unsigned char c : data) in->mutable_contents()->add_uint_contents(c);
    }
    inference::ModelInferResponse res;
    grpc::Status s = stub->ModelInfer(context().get(), req, &res);
    if (!s.ok()) return report(s);
    const std::string& raw = res.raw_output_contents(0);
    std::vector<float> out(raw.size() / 4);
    std::memcpy(out.data(), raw.data(), out.size() * 4);
    std::printf("{\"model_name\":\"%s\",\"model_version\":\"%s\",\"id\":\"%s\",\"shape\":[%lld,%lld],\"logits\":[",
                res.model_name().c_str(), res.model_version().c_str(), res.id().c_str(),
                static_cast<long long>(res.outputs(0).shape(0)), static_cast<long long>(res.outputs(0).shape(1)));
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%.9g", i ? "," : "", out[i]);
    std::printf("]}\n");
    return 0;
  }
  if (cmd == "burst" && argc >= 6) {
    const int n = std::atoi(argv[4]);
    const std::string row = slurp(argv[5]);
    std::atomic<int> ok{0}, unavailable{0}, deadline{0}, other{0};
    std::atomic<long long> worst_unavailable_us{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&] {
        const inference::ModelInferRequest req = one_row(argv[3], row);
        inference::ModelInferResponse res;
        const auto t0 = std::chrono::steady_clock::now();
        grpc::Status s = stub->ModelInfer(context().get(), req, &res);
        const long long us =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        if (s.ok()) ++ok;
        else if (s.error_code() == grpc::UNAVAILABLE) {
          ++unavailable;
          long long w = worst_unavailable_us.load();
          while (us > w && !worst_unavailable_us.compare_exchange_weak(w, us)) {}
        } else if (s.error_code() == grpc::DEADLINE_EXCEEDED) {
          ++deadline;
        } else {
          ++other;
        }
      });
    for (auto& t : threads) t.join();
    std::printf("{\"ok\":%d,\"unavailable\":%d,\"other\":%d,\"slowest_unavailable_ms\":%.1f,\"deadline_exceeded\":%d}\n",
                ok.load(), unavailable.load(), other.load(), worst_unavailable_us.load() / 1000.0, deadline.load());
    return 0;
  }
  if (cmd == "stream" && argc >= 6) {
    const int n = std::atoi(argv[4]), bad = argc >= 7 ? std::atoi(argv[6]) : -1;
    const std::string row = slurp(argv[5]);
    auto ctx = context();
    auto rw = stub->ModelStreamInfer(ctx.get());
    std::thread writer([&] {
      for (int i = 0; i < n; ++i) {
        inference::ModelInferRequest req = one_row(i == bad ? "no-such-model" : argv[3], row);
        req.set_id("r" + std::to_string(i));
        if (!rw->Write(req)) break;
      }
      rw->WritesDone();
    });
    inference::ModelStreamInferResponse res;
    int answers = 0, in_order = 1, shaped = 0;
    std::string errors, first;
    while (rw->Read(&res)) {
      if (!res.error_message().empty()) {
        errors += (errors.empty() ? "\"" : ",\"") + res.error_message() + "\"";
      } else {
        const auto& r = res.infer_response();
        in_order &= r.id() == "r" + std::to_string(answers);
        shaped += r.outputs_size() == 1 && r.outputs(0).shape_size() == 2 && r.outputs(0).shape(0) == 1;
        if (first.empty() && r.raw_output_contents_size() == 1) {
          std::vector<float> out(r.raw_output_contents(0).size() / 4);
          std::memcpy(out.data(), r.raw_output_contents(0).data(), out.size() * 4);
          for (size_t i = 0; i < out.size(); ++i) first += (i ? "," : "") + std::to_string(out[i]);
        }
      }
      ++answers;
    }
    writer.join();
    const grpc::Status s = rw->Finish();
    std::printf("{\"answers\":%d,\"ids_in_order\":%s,\"one_row_answers\":%d,\"errors\":[%s],\"first\":[%s]}\n", answers,
                in_order ? "true" : "false", shaped, errors.c_str(), first.c_str());
    return report(s);
  }
  std::fprintf(stderr, "kserve_grpc_client: unknown command %s\n", cmd.c_str());
  return 2;
}
