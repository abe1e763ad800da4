// fuzz_http.cpp — libFuzzer target for loom-serve's request decoding: the bytes of one HTTP/1.1
// request through Beast's parser with the server's limits, then (for an infer request) the
// KServe v2 JSON/binary body decoded into a 784-feature model's rows, as the server does it.
// Every input must end in a decoded request or a 4xx answer: never a crash, never a 5xx. The
// bytes are also read as an infer request's JSON body both ways: where the one-pass scan accepts
// them, the strict decoder must accept them too and read the same request.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/kserve_json.hpp"
#include "core/status.hpp"
#include "frontend/http_decode.hpp"

namespace {

bool same(const loom::serve::InferRequest& a, const loom::serve::InferRequest& b) {
  if (a.id != b.id || a.has_id != b.has_id || a.outputs != b.outputs || a.binary_out != b.binary_out ||
      a.inputs.size() != b.inputs.size())
    return false;
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.inputs[i].name != b.inputs[i].name || a.inputs[i].datatype != b.inputs[i].datatype ||
        a.inputs[i].shape != b.inputs[i].shape || a.inputs[i].data != b.inputs[i].data)
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::serve;
  if (size > (1u << 20)) return 0;
  InputSpec spec;
  spec.features = 784;
  spec.scale = 1.0f / 255;
  const Status s = decode_http_request(std::string(reinterpret_cast<const char*>(data), size), spec, 1 << 20, 32);
  if (s != Status::kOk && http_status(s) >= 500) std::abort();  // a hostile request is the client's fault
  const std::string body(reinterpret_cast<const char*>(data), size);
  if (auto fast = scan_infer_request(body.data(), body.data() + body.size())) {
    try {
      if (!same(*fast, parse_infer_request_strict(body, ""))) std::abort();
    } catch (const ServeError&) {
      std::abort();  // the scan took what the strict decoder refuses
    }
  }
  return 0;
}
