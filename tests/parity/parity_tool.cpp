// parity_tool.cpp — the C++ side of the PyTorch parity tests. Loads a model file and one batch
// of raw little-endian inputs, runs forward, cross-entropy and backward, and writes the logits,
// the loss and every parameter's gradient as raw float32 files.
//   mlp: IN_DIR/x.bin float32 [B,in], IN_DIR/y.bin int32 [B]
//   gpt: IN_DIR/tokens.bin, IN_DIR/targets.bin int32 [B*context]; DEVICE cuda runs it on the GPU,
//        ATTENTION (auto, full or flash) picks attention's path
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/io/model_io.hpp"

namespace {

template <typename T>
std::vector<T> read_raw(const std::string& path, size_t n) {
  std::vector<T> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(sizeof(T) * n));
  if (!in) throw loom::rt::Error("cannot read " + std::to_string(n) + " values from " + path);
  return v;
}

void write_raw(const std::string& path, const float* data, int64_t n) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(sizeof(float) * n));
}

void write_grads(const std::string& dir, const std::vector<loom::rt::Param>& params) {
  for (const auto& p : params) {
    const loom::rt::Tensor g = p.grad.to(loom::rt::Device::kCpu);
    write_raw(dir + "/grad_" + p.name + ".bin", g.f32(), g.numel());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6 || argc > 8) {
    std::fprintf(stderr, "usage: parity_tool mlp|gpt MODEL.h5 BATCH IN_DIR OUT_DIR [cpu|cuda [auto|full|flash]]\n");
    return 2;
  }
  try {
    const std::string kind = argv[1], model = argv[2], dir = argv[4], out = argv[5];
    const int b = std::stoi(argv[3]);
    const std::string device = argc >= 7 ? argv[6] : "cpu";
    const loom::rt::Attention attention = loom::rt::parse_attention(argc == 8 ? argv[7] : "auto");
    if (device != "cpu" && (device != "cuda" || kind != "gpt"))
      throw loom::rt::Error("device '" + device + "': cpu, or cuda for the gpt");
    double loss = 0;
    if (kind == "mlp") {
      loom::rt::Mlp m = loom::rt::load_mlp(model);
      const int in = m.widths().front(), classes = m.widths().back();
      loom::rt::Tensor x = loom::rt::Tensor::empty({b, in});
      auto xs = read_raw<float>(dir + "/x.bin", static_cast<size_t>(b) * in);
      std::copy(xs.begin(), xs.end(), x.f32());
      auto y = read_raw<int32_t>(dir + "/y.bin", static_cast<size_t>(b));
      const loom::rt::Tensor& logits = m.forward(x);
      loom::rt::Tensor d = loom::rt::Tensor::empty({b, classes});
      loss = loom::rt::cpu::softmax_xent(logits.f32(), y.data(), d.f32(), b, classes);
      write_raw(out + "/logits.bin", logits.f32(), logits.numel());
      m.backward(d);
      write_grads(out, m.params());
    } else if (kind == "gpt") {
      loom::rt::Gpt m = loom::rt::load_gpt(model);
      m.set_attention(attention);
      if (device == "cuda") m.to(loom::rt::Device::kCuda);
      const size_t n = static_cast<size_t>(b) * static_cast<size_t>(m.config().context);
      auto tok = read_raw<int32_t>(dir + "/tokens.bin", n), tgt = read_raw<int32_t>(dir + "/targets.bin", n);
      loss = m.forward(tok, tgt, b, false);
      const loom::rt::Tensor logits = m.logits().to(loom::rt::Device::kCpu);
      write_raw(out + "/logits.bin", logits.f32(), logits.numel());
      m.backward();
      write_grads(out, m.params());
    } else {
      throw loom::rt::Error("unknown model kind '" + kind + "'");
    }
    std::ofstream(out + "/loss.txt") << std::to_string(loss) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity_tool: %s\n", e.what());
    return 1;
  }
}
