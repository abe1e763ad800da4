// hf_decoder.hpp — a Hugging Face model folder read into the one inference decoder: config.json
// names the architecture (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, GPT2LMHeadModel), the weights are model.safetensors or its shards
// (hf_weights.hpp) in F32, F16 or BF16.
#pragma once

#include <string>
#include <vector>

#include "loom/rt/nn/decoder.hpp"

namespace loom::rt {

// The architectures load_hf_decoder reads.
const std::vector<std::string>& hf_architectures();

// The folder's model. `architecture` gets config.json's (GPT2LMHeadModel for a GPT-2 config
// that names none). Throws Error naming the file and the field: an unknown architecture (listing
// the supported ones), heads that do not divide, an unknown rope_scaling type, a missing shard or
// tensor, a tensor whose shape disagrees with config.json or that no layer uses.
DecoderWeights load_hf_decoder(const std::string& folder, std::string* architecture);

// What the layers hold in memory: "int8" (compressed-tensors int8, hf_quant.hpp), "bf16" or
// "fp16" (a 16-bit checkpoint kept so), or "fp32".
std::string decoder_precision(const DecoderWeights& w);

// RoPE's frequencies from config.json: rope_theta and rope_scaling as published folders write
// them, or rope_parameters as transformers 5 writes them; types default, linear, dynamic, llama3
// and yarn. `context` gets the positions a scaled model serves (vLLM's derivation: linear and
// dynamic stretch max_position_embeddings by the factor, yarn its original length).
RopeConfig read_rope(const class ConfigJson& j, int head_dim, int max_positions, int* context);

}  // namespace loom::rt
