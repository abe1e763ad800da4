// fuzz_http.cpp — libFuzzer target for loom-serve's request decoding: the bytes of one HTTP/1.1
// request through Beast's parser with the server's limits, then (for an infer request) the
// KServe v2 JSON/binary body decoded into a 784-feature model's rows, as the server does it.
// Every input must end in a decoded request or a 4xx answer: never a crash, never a 5xx.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "frontend/http_decode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom::serve;
  if (size > (1u << 20)) return 0;
  InputSpec spec;
  spec.features = 784;
  spec.scale = 1.0f / 255;
  const Status s = decode_http_request(std::string(reinterpret_cast<const char*>(data), size), spec, 1 << 20, 32);
  if (s != Status::kOk && http_status(s) >= 500) std::abort();  // a hostile request is the client's fault
  return 0;
}
