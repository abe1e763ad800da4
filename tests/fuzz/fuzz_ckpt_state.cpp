// fuzz_ckpt_state.cpp — libFuzzer target for what a resume (and --inspect) checks of a
// loom-train checkpoint before touching anything: the input drives state/json (free text, or the
// real object with any values), train.config's optimizer, and the parameters' and moments' names
// and shapes. check_train_state must accept it or refuse it with an Error naming the file; none
// may crash, overflow or recurse off the stack.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/train/checkpoint_writer.hpp"

namespace {

std::string number(FuzzedDataProvider& p) {
  switch (p.ConsumeIntegralInRange(0, 5)) {
    case 0: return std::to_string(p.ConsumeIntegral<int64_t>());
    case 1: return std::to_string(p.ConsumeIntegral<uint64_t>());
    case 2: return std::to_string(p.ConsumeFloatingPoint<double>());
    case 3: return std::to_string(p.ConsumeIntegralInRange<int64_t>(-2, 100));
    case 4: return "\"" + p.ConsumeRandomLengthString(8) + "\"";
    default: return p.ConsumeBool() ? "null" : "[" + std::string(static_cast<size_t>(p.ConsumeIntegralInRange(0, 200)), '[') + "]";
  }
}

std::string list(FuzzedDataProvider& p) {
  std::string s = "[";
  const int n = p.ConsumeIntegralInRange(0, 5);
  for (int i = 0; i < n; ++i) s += (i ? "," : "") + number(p);
  return s + "]";
}

std::vector<std::pair<std::string, loom::rt::Tensor>> tensors(FuzzedDataProvider& p, int most) {
  static const char* names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "ghost"};
  std::vector<std::pair<std::string, loom::rt::Tensor>> out;
  const int n = p.ConsumeIntegralInRange(0, most);
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> shape;
    const int nd = p.ConsumeIntegralInRange(1, 3);
    for (int d = 0; d < nd; ++d) shape.push_back(p.ConsumeIntegralInRange<int64_t>(1, 6));
    out.emplace_back(names[p.ConsumeIntegralInRange(0, 3)], loom::rt::Tensor::zeros(shape));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  loom::rt::Checkpoint k;
  if (p.ConsumeBool()) {
    k.state_json = p.ConsumeRandomLengthString(512);
  } else {
    k.state_json = "{";
    for (const char* key : {"step", "epoch", "batch", "world", "opt_t", "loss_scale", "clean_steps", "observed"})
      if (p.ConsumeIntegralInRange(0, 7)) k.state_json += std::string(k.state_json.size() > 1 ? "," : "") + "\"" + key + "\":" + number(p);
    k.state_json += ",\"shares\":" + list(p) + ",\"speeds\":" + list(p) + "}";
  }
  const char* kinds[] = {"sgd", "adamw", "lion"};
  k.train_config = p.ConsumeBool() ? "{\"optimizer\":{\"kind\":\"" + std::string(kinds[p.ConsumeIntegralInRange(0, 2)]) + "\"}}"
                                   : p.ConsumeRandomLengthString(128);
  k.params = tensors(p, 3);
  k.opt_m = tensors(p, 3);
  k.opt_v = tensors(p, 3);
  try {
    loom::rt::check_train_state("ckpt-0000000010.h5", k);
  } catch (const loom::rt::Error&) {
  }
  return 0;
}
