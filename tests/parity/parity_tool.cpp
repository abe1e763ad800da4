// parity_tool.cpp — the C++ side of the PyTorch parity tests. Loads a model file and one batch
// of raw little-endian inputs, runs forward, cross-entropy and backward, and writes the logits,
// the loss and every parameter's gradient as raw float32 files.
//   mlp: IN_DIR/x.bin float32 [B,in], IN_DIR/y.bin int32 [B]
//   gpt: IN_DIR/tokens.bin, IN_DIR/targets.bin int32 [B*context]; ATTENTION (auto, full or flash)
//        picks attention's path
// DEVICE cuda runs either on the GPU.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/tensor/ops.hpp"
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
    if (device != "cpu" && device != "cuda") throw loom::rt::Error("device '" + device + "': cpu or cuda");
    const loom::rt::Device dev = device == "cuda" ? loom::rt::Device::kCuda : loom::rt::Device::kCpu;
    double loss = 0;
    if (kind == "mlp") {
      loom::rt::Mlp m = loom::rt::load_mlp(model);
      m.to(dev);
      const int in = m.widths().front(), classes = m.widths().back();
      loom::rt::Tensor x = loom::rt::Tensor::empty({b, in});
      auto xs = read_raw<float>(dir + "/x.bin", static_cast<size_t>(b) * in);
      std::copy(xs.begin(), xs.end(), x.f32());
      loom::rt::Tensor y = loom::rt::Tensor::empty({b}, loom::rt::DType::kI32);
      auto ys = read_raw<int32_t>(dir + "/y.bin", static_cast<size_t>(b));
      std::copy(ys.begin(), ys.end(), y.data<int32_t>());
      const loom::rt::Tensor xd = x.to(dev), yd = y.to(dev);
      const loom::rt::Tensor& logits = m.forward(xd);
      loom::rt::Tensor d = loom::rt::Tensor::empty({b, classes}, loom::rt::DType::kF32, dev);
      loss = loom::rt::ops::softmax_xent(dev, logits.f32(), yd.data<int32_t>(), d.f32(), b, classes);
      const loom::rt::Tensor host_logits = logits.to(loom::rt::Device::kCpu);
      write_raw(out + "/logits.bin", host_logits.f32(), host_logits.numel());
      m.backward(d);
      write_grads(out, m.params());
    } else if (kind == "gpt") {
      loom::rt::Gpt m = loom::rt::load_gpt(model);
      m.set_attention(attention);
      m.to(dev);
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
