// hf_compress.hpp — loom-compress on Hugging Face model folders (LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM): INT8 in the compressed-tensors format
// that vLLM serves (int8 weights per output channel, each input row quantized as it comes), and
// scoring on llm.c token files through the decoder loom-serve runs.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "gpt_eval.hpp"

namespace loom::compress {

// Whether `path` is a folder with a config.json.
bool is_hf_folder(const std::string& path);

// The folder scored on `data` (tokens:PATTERN, written with the folder's own tokenizer), in
// windows of min(context, 512) tokens; at most max_tokens (0: all). argmax, when given, gets each
// position's most likely next token.
GptReport evaluate_hf(const std::string& folder, const std::string& data, int64_t max_tokens, std::vector<int32_t>* argmax = nullptr);

// loom-compress quantize IN_FOLDER -o OUT_FOLDER: the linear layers of every block in int8 (the
// embeddings, norms and lm_head as stored), the tokenizer and the other files copied; OUT is
// written whole or not at all. --calibration tokens:PATTERN scores both folders and their greedy
// agreement.
int quantize_hf(const std::string& in, const std::string& out, const boost::program_options::variables_map& vm);

}  // namespace loom::compress
