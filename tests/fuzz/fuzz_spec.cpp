// fuzz_spec.cpp — libFuzzer target for what loom-serve and loom-sweep read from files a user
// writes, and what a pipeline takes from another server: the first byte picks the reader, the
// rest is its input. 0: an InferenceService spec, 1: an InferencePipeline spec, 2: a sweep spec
// (YAML); 3: a Triton config.pbtxt; 4: a hop's answer (datatype, shape, bytes) checked against
// the step's metadata. Every input must end in a result or the reader's own error (rt::Error,
// ServeError, sweep's SpecError: a message naming the field); any other exception (a YAML
// conversion, std::out_of_range...) or a crash fails.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>

#include "core/status.hpp"
#include "core/tensor_in.hpp"
#include "loom/rt/error.hpp"
#include "pipeline/pipeline.hpp"
#include "repository/model_config.hpp"
#include "runtime/sweep/spec.hpp"
#include "spec/spec.hpp"

namespace {

std::string temp_file(const std::string& text) {
  static const std::string path = [] {
    std::atexit([] { ::unlink(("/tmp/loom-fuzz-spec-" + std::to_string(getpid()) + ".yaml").c_str()); });
    return "/tmp/loom-fuzz-spec-" + std::to_string(getpid()) + ".yaml";
  }();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

const char* kTypes[] = {"FP32", "INT64", "INT32", "UINT8", "INT8", "BOOL", "FP16", "BYTES", "FP64", ""};

// A hop's answer and the step's metadata from bytes: datatypes, ranks, dimensions, data.
void hop_answer(const std::string& s) {
  size_t at = 0;
  auto byte = [&]() -> uint8_t { return at < s.size() ? static_cast<uint8_t>(s[at++]) : 0; };
  auto dim = [&]() -> int64_t {
    int64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return (byte() & 1) ? v : v % 64 - 8;  // mostly small, sometimes any 64 bits
  };
  loom::serve::TensorDesc want;
  want.name = "y";
  want.datatype = kTypes[byte() % 10];
  for (int r = byte() % 5; r > 0; --r) want.shape.push_back(dim());
  loom::serve::TensorIn got;
  got.name = "y";
  got.datatype = kTypes[byte() % 10];
  for (int r = byte() % 5; r > 0; --r) got.shape.push_back(dim());
  got.data = s.substr(std::min(at, s.size()));
  loom::serve::check_answer(want, got, "the step answered output 'y', which");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > (1u << 16)) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 5) {
      case 0: loom::serve::load_spec(temp_file(text)); break;
      case 1: loom::serve::load_pipeline_spec(temp_file(text), "/nonexistent/loom-fuzz-services"); break;
      case 2: loom::sweep::parse_spec(text); break;
      case 3: loom::serve::parse_model_config(text, "config.pbtxt", nullptr); break;
      case 4: hop_answer(text); break;
    }
  } catch (const loom::rt::Error&) {
  } catch (const loom::serve::ServeError&) {
  } catch (const loom::sweep::SpecError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "an exception that is not the reader's own error: %s\n", e.what());
    std::abort();
  }
  return 0;
}
