// gpt_eval.hpp — what loom-compress reports of a gpt model file on held-out text: loss (nats per
// token), perplexity and next-token accuracy, computed by the decoder loom-serve runs (int8 GEMMs
// for an INT8 file), with the parameter count and the file's size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/io/model_io.hpp"
#include "loom/rt/nn/decoder.hpp"

namespace loom::compress {

struct GptReport {
  double loss = 0, perplexity = 0, accuracy = 0;
  int64_t params = 0, file_bytes = 0, tokens = 0;  // tokens: the positions scored
  int64_t unknown_bytes = 0;  // bytes of the text outside the model's vocabulary, left out
  std::string precision;      // fp32 | int8 | int8-weights (a Hugging Face folder: fp32 | bf16 | fp16 | int8)
  std::string kind = "gpt";   // or a Hugging Face folder's architecture
  double agreement = -1;      // share of positions whose most likely token is the compared model's (-1: not compared)
  std::string shape;          // "layers 4, heads 4, embd 128, context 64, vocab 97"
};

// A language model scored on windows of held-out tokens.
struct WindowScore {
  double nll = 0;
  int64_t hits = 0, tokens = 0;
  void report(GptReport* r) const;  // loss, perplexity, accuracy and tokens
};
// ids in windows of T tokens (T + 1 read, the last as the target), several windows a pass, each
// position's next token predicted; argmax, when given, gets each position's most likely token.
// Throws rt::Error naming `source` when ids hold less than one window.
WindowScore score_windows(rt::Decoder& dec, const std::vector<int32_t>& ids, int T, const std::string& source,
                          std::vector<int32_t>* argmax);
// The first max_tokens + 1 tokens (0: all) of llm.c token files, checked against the vocabulary.
std::vector<int32_t> read_token_ids(const std::string& pattern, int vocab, int64_t max_tokens);

// Whether a model file holds a gpt (model.config's type); throws rt::Error for a checkpoint.
bool is_gpt(const std::string& path, const rt::ModelFile& f);
// A gpt's data: text:FILE (a byte-level gpt) or tokens:PATTERN (llm.c token files, for a gpt
// trained on them); throws Usage naming `option` for another form.
struct GptData {
  std::string text, tokens;
};
GptData gpt_data(const std::string& data, const std::string& option);
// `data` as gpt_data takes it; at most max_tokens of it scored (0: all). Throws rt::Error for a
// file that is not a gpt, data of the other kind than the model's, or data too short for one
// window of the model's context.
GptReport evaluate_gpt(const std::string& path, const std::string& data, int64_t max_tokens = 0);
// The file's bytes as the model's token ids (vocab_bytes); bytes outside it are left out and
// counted in *unknown.
std::vector<int32_t> byte_tokens(const std::string& model_path, const std::string& config_json, const std::string& text_path,
                                 int64_t* unknown);

}  // namespace loom::compress
