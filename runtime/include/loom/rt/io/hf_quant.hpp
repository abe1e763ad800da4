// hf_quant.hpp — INT8 Hugging Face folders in the compressed-tensors format, as llm-compressor
// writes them and vLLM serves them ("W8A8"): config.json's quantization_config names the scheme
// ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {...}}),
// each quantized linear layer's `X.weight` is stored I8 [out, in] beside `X.weight_scale`
// [out, 1] (one scale per output channel; [1] for one per tensor), symmetric, so that the weight
// is weight_scale * weight. Inputs are quantized per row as they come (dynamic, per token).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "loom/rt/io/hf_weights.hpp"
#include "loom/rt/nn/decoder.hpp"

namespace loom::rt {

// Whether config.json declares int8 weights loom-serve runs: false without a
// quantization_config; true for compressed-tensors int-quantized groups of int8 symmetric weights
// per channel or per tensor with int8 activations per token, dynamic. Any other method or scheme
// (GPTQ, AWQ, FP8, int4, weight-only, static activation scales, a quantized KV cache) is refused
// naming the field.
bool read_int8_scheme(const ConfigJson& j);

// The quantization_config loom-compress writes: int8 symmetric weights per output channel, int8
// activations per token, dynamic, every Linear but lm_head.
nlohmann::json int8_quantization_config();

// The int8 layer whose rows are the parts' (weight names and their [rows, in] shapes) stacked:
// each part I8 with its weight_scale, and a weight_zero_point, where one is stored, all zero.
Int8Linear read_int8_linear(HfWeights& r, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts);

}  // namespace loom::rt
