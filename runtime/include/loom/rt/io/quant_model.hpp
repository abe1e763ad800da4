// quant_model.hpp — INT8 model files (Contract 7): /params/fcN.weight int8 with attributes
// `scale` (per output channel) and `zero_point` (0: symmetric), float32 biases, and
// model.config.quant holding the activations' scheme and each layer's input scale and zero point:
//   "quant": {"weights": "int8_per_channel_symmetric", "activations": "uint8_affine",
//             "act_max": 127, "observer": "minmax", "inputs": [{"scale": S, "zero_point": Z}, ...]}
// Per-tensor weights ("weights": "int8_per_tensor_symmetric") store their one scale per channel.
// A weights-only file says "activations": "float" and has no "inputs"; it runs as a float MLP
// whose weights are the dequantized integers.
#pragma once

#include <string>

#include "loom/rt/io/model_io.hpp"
#include "loom/rt/nn/decoder.hpp"
#include "loom/rt/nn/quant_mlp.hpp"

namespace loom::rt {

// "fp32", "int8" (weights and activations) or "int8-weights" (weights only), from the file's
// tensors and model.config; throws Error when they disagree.
std::string model_precision(const std::string& path, const ModelFile& f);

// `float_config` is the float model's model.config; "quant" is added to it.
void save_quant_mlp(const std::string& path, const QuantMlp& q, const std::string& float_config,
                    const std::string& observer, bool per_tensor_weights = false);
void save_weight_only_mlp(const std::string& path, const Mlp& m, const std::string& float_config);
// Throws Error naming the file when it is not a full INT8 MLP or its quantization is invalid.
QuantMlp load_quant_mlp(const std::string& path, const ModelFile& f);

// INT8 gpt files: the linear layers' weights (h.N.attn.c_attn, h.N.attn.c_proj, h.N.mlp.c_fc,
// h.N.mlp.c_proj, lm_head) int8 per output channel, symmetric; embeddings, LayerNorms and biases
// float32. model.config.quant: {"weights": "int8_per_channel_symmetric", "activations":
// "uint8_dynamic_per_row" (each row of a linear layer's input quantized as it comes, no
// calibration) or "float" (weights only: served as the dequantized float model), "act_max": 127}.
bool is_gpt_linear(const std::string& param_name);
void save_quant_gpt(const std::string& path, Gpt& gpt, const std::string& float_config, bool weights_only);
// The decoder of a gpt file `f`, float or INT8 (its linear layers on int8 GEMMs when the
// activations are quantized too); `gpt` is load_gpt(path, f). Throws Error naming the file for a
// bad quant.
DecoderWeights gpt_decoder(const std::string& path, const ModelFile& f, Gpt& gpt);

}  // namespace loom::rt
