// mlp_parity_tool.cpp — the C++ side of the PyTorch parity test: loads a model file and a batch
// (raw float32 x [B,in], int32 y [B]), runs forward, softmax cross-entropy and backward, and
// writes logits, loss and every parameter's gradient as raw little-endian float32 files.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "loom/rt/kernels.hpp"
#include "loom/rt/model_io.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: mlp_parity_tool MODEL.h5 BATCH IN_DIR OUT_DIR\n");
    return 2;
  }
  try {
    loom::rt::Mlp m = loom::rt::load_mlp(argv[1]);
    const int b = std::stoi(argv[2]), in = m.widths().front(), out = m.widths().back();
    std::string dir = argv[3], odir = argv[4];
    loom::rt::Tensor x = loom::rt::Tensor::empty({b, in});
    std::vector<int32_t> y(static_cast<size_t>(b));
    std::ifstream fx(dir + "/x.bin", std::ios::binary), fy(dir + "/y.bin", std::ios::binary);
    fx.read(reinterpret_cast<char*>(x.f32()), static_cast<std::streamsize>(sizeof(float)) * b * in);
    fy.read(reinterpret_cast<char*>(y.data()), static_cast<std::streamsize>(sizeof(int32_t)) * b);
    if (!fx || !fy) throw loom::rt::Error("cannot read x.bin / y.bin in " + dir);
    m.zero_grad();
    const loom::rt::Tensor& logits = m.forward(x);
    loom::rt::Tensor d = loom::rt::Tensor::empty({b, out});
    double loss = loom::rt::cpu::softmax_xent(logits.f32(), y.data(), d.f32(), b, out);
    std::ofstream(odir + "/logits.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(logits.f32()), static_cast<std::streamsize>(sizeof(float)) * b * out);
    m.backward(d);
    std::ofstream(odir + "/loss.txt") << std::to_string(loss) << "\n";
    for (const auto& p : m.params())
      std::ofstream(odir + "/grad_" + p.name + ".bin", std::ios::binary)
          .write(reinterpret_cast<const char*>(p.grad.f32()), static_cast<std::streamsize>(sizeof(float) * p.grad.numel()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_parity_tool: %s\n", e.what());
    return 1;
  }
}
