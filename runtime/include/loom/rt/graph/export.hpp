// export.hpp — Loom's MLPs written as ONNX (Contract 8), for loom-compress convert and
// loom-train --export FILE.onnx: float layers as Gemm + Relu, INT8 layers in QDQ form
// (QuantizeLinear / DequantizeLinear around float Gemms, the form ONNX Runtime and TensorRT
// consume), and the UINT8 pixel preprocessing as graph nodes so the file takes raw pixels.
#pragma once

#include <string>
#include <vector>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::graph {

struct MlpLayer {
  Tensor weight;                // float32 [out, in], or int8 [out, in] with w_scale
  std::vector<float> w_scale;   // int8 weights: one scale per output channel (zero point 0)
  Tensor bias;                  // float32 [out]
  bool quant_input = false;     // the layer's input is quantized to uint8 (affine) first
  float in_scale = 1.0f;
  int in_zero = 0, in_max = 255;  // Loom's activations use 0..127 (reduce_range): a Clip keeps them there
};

struct MlpGraph {
  std::vector<MlpLayer> layers;
  bool pixels = false;  // input UINT8 [N, in] preprocessed as (v * scale - mean) / std
  float scale = 1, mean = 0, std = 1;
  std::string producer = "loom";
};

// Writes `g` to `path` (opset 13) after ONNX's checker accepts it; the file appears whole or
// not at all. Throws Error naming what is wrong.
void write_mlp_onnx(const std::string& path, const MlpGraph& g);

}  // namespace loom::rt::graph
