// gpt_eval.hpp — what loom-compress reports of a gpt model file on held-out text: loss (nats per
// token), perplexity and next-token accuracy, computed by the decoder loom-serve runs (int8 GEMMs
// for an INT8 file), with the parameter count and the file's size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/io/model_io.hpp"

namespace loom::compress {

struct GptReport {
  double loss = 0, perplexity = 0, accuracy = 0;
  int64_t params = 0, file_bytes = 0, tokens = 0;  // tokens: the positions scored
  int64_t unknown_bytes = 0;  // bytes of the text outside the model's vocabulary, left out
  std::string precision;      // fp32 | int8 | int8-weights
  std::string shape;          // "layers 4, heads 4, embd 128, context 64, vocab 97"
};

// Whether a model file holds a gpt (model.config's type); throws rt::Error for a checkpoint.
bool is_gpt(const std::string& path, const rt::ModelFile& f);
// `data`: text:FILE, a file of text in the model's byte vocabulary (model.config vocab_bytes).
// Throws Usage for another form, rt::Error for a file that is not a gpt or text too short for
// one window of the model's context.
GptReport evaluate_gpt(const std::string& path, const std::string& data);
// The text file of `data` (text:FILE); throws Usage naming `option` otherwise.
std::string text_file(const std::string& data, const std::string& option);
// The file's bytes as the model's token ids (vocab_bytes); bytes outside it are left out and
// counted in *unknown.
std::vector<int32_t> byte_tokens(const std::string& model_path, const std::string& config_json, const std::string& text_path,
                                 int64_t* unknown);

}  // namespace loom::compress
