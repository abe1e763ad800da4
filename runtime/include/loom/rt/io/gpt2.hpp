// gpt2.hpp — reading GPT-2's published layout into the inference decoder's weights.
#pragma once

#include <string>

#include "loom/rt/nn/decoder.hpp"

namespace loom::rt {

// A GPT-2 folder: config.json (n_layer, n_head, n_embd, n_positions, vocab_size,
// layer_norm_epsilon, activation_function) and model.safetensors with GPT-2's parameter names,
// with or without the "transformer." prefix; Conv1D weights [in, out] are transposed; the
// attention buffers (h.N.attn.bias, masked_bias) are ignored; lm_head.weight, when absent, is
// wte. Throws Error naming the file, the tensor and both shapes where they disagree.
DecoderWeights load_gpt2(const std::string& folder);

}  // namespace loom::rt
