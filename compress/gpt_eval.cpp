// gpt_eval.cpp — scoring a gpt file on held-out text through the serving decoder.
#include "gpt_eval.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "model_eval.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/io/tokens.hpp"
#include "loom/rt/nn/decoder.hpp"

namespace loom::compress {

namespace {

constexpr int kBlockTokens = 16;
constexpr int kWindowsPerPass = 8;  // windows decoded together: one GEMM per layer over all their rows
constexpr int64_t kLogitsPerPass = 1 << 26;  // fewer windows a pass where the vocabulary is large (256 MiB of logits)

// Adds the loss and the hits of rows [0, rows) of logits against targets, and each row's argmax.
void score(const rt::Tensor& logits, const int32_t* targets, int64_t rows, WindowScore* s, std::vector<int32_t>* argmax) {
  const int64_t V = logits.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits.f32() + r * V;
    const int64_t best = std::max_element(z, z + V) - z;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) - z[best]);
    s->nll += std::log(sum) + z[best] - z[targets[r]];
    s->hits += best == targets[r];
    if (argmax) argmax->push_back(static_cast<int32_t>(best));
  }
}

}  // namespace

WindowScore score_windows(rt::Decoder& dec, const std::vector<int32_t>& ids, int T, const std::string& source, std::vector<int32_t>* argmax) {
  const int64_t windows = (static_cast<int64_t>(ids.size()) - 1) / T;
  if (windows < 1)
    throw rt::Error(source + ": " + std::to_string(ids.size()) + " tokens are fewer than one window of the model's context (" +
                    std::to_string(T) + " + 1)");
  const int per_pass = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kWindowsPerPass, kLogitsPerPass / (int64_t{T} * dec.config().vocab))));
  const int per_window = (T + kBlockTokens - 1) / kBlockTokens;
  rt::KvCache kv(dec.config(), per_pass * per_window, kBlockTokens);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(per_pass));
  for (int w = 0; w < per_pass; ++w)
    for (int b = 0; b < per_window; ++b) tables[static_cast<size_t>(w)].push_back(w * per_window + b);
  WindowScore s;
  rt::Tensor logits;
  std::vector<int32_t> targets;
  for (int64_t first = 0; first < windows; first += per_pass) {
    const int n = static_cast<int>(std::min<int64_t>(per_pass, windows - first));
    rt::DecodeBatch b;
    targets.clear();
    for (int w = 0; w < n; ++w) {
      b.tables.push_back(&tables[static_cast<size_t>(w)]);
      for (int t = 0; t < T; ++t) {
        const size_t at = static_cast<size_t>((first + w) * T + t);
        b.tokens.push_back(ids[at]);
        b.positions.push_back(t);
        b.seq.push_back(w);
        b.logit_rows.push_back(static_cast<int32_t>(b.tokens.size() - 1));
        targets.push_back(ids[at + 1]);
      }
    }
    dec.forward(kv, b, logits);
    score(logits, targets.data(), static_cast<int64_t>(targets.size()), &s, argmax);
  }
  s.tokens = windows * T;
  return s;
}

std::vector<int32_t> read_token_ids(const std::string& pattern, int vocab, int64_t max_tokens) {
  const rt::TokenFiles files = rt::load_token_files(pattern, vocab);  // every token checked against the vocabulary
  const int64_t n = max_tokens > 0 ? std::min(files.size(), max_tokens + 1) : files.size();
  std::vector<uint32_t> raw(static_cast<size_t>(n));
  files.read(0, n, raw.data());
  return std::vector<int32_t>(raw.begin(), raw.end());
}

void WindowScore::report(GptReport* r) const {
  r->tokens = tokens;
  r->loss = nll / static_cast<double>(tokens);
  r->perplexity = std::exp(r->loss);
  r->accuracy = static_cast<double>(hits) / static_cast<double>(tokens);
}

bool is_gpt(const std::string& path, const rt::ModelFile& f) {
  if (f.format != "model")
    throw rt::Error(path + ": a Loom " + f.format + ", not a model file (export one with loom-train --export)");
  try {
    return nlohmann::json::parse(f.config_json).value("type", "") == "gpt";
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(path + ": model.config is not valid JSON: " + e.what());
  }
}

GptData gpt_data(const std::string& data, const std::string& option) {
  if (data.rfind("text:", 0) == 0 && data.size() > 5) return {data.substr(5), ""};
  if (data.rfind("tokens:", 0) == 0 && data.size() > 7) return {"", data.substr(7)};
  throw Usage{option + " must be text:FILE or tokens:PATTERN for a gpt, not '" + data + "'"};
}

std::vector<int32_t> byte_tokens(const std::string& model_path, const std::string& config_json, const std::string& text_path,
                                 int64_t* unknown) {
  const auto cfg = nlohmann::json::parse(config_json);
  if (cfg.contains("tokens"))
    throw rt::Error(model_path + ": a gpt trained on token files (" + cfg["tokens"].dump() + ") reads token ids, not text");
  std::vector<int> bytes;
  try {
    bytes = cfg.at("vocab_bytes").get<std::vector<int>>();
  } catch (const nlohmann::json::exception&) {
    throw rt::Error(model_path + ": model.config has no vocab_bytes (a gpt exported before byte-level tokens)");
  }
  int index[256];
  std::fill(index, index + 256, -1);
  for (size_t i = 0; i < bytes.size(); ++i)
    if (bytes[i] >= 0 && bytes[i] < 256) index[bytes[i]] = static_cast<int>(i);
  std::ifstream in(text_path, std::ios::binary);
  if (!in) throw rt::Error(text_path + ": cannot read the text file");
  std::vector<int32_t> ids;
  *unknown = 0;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it) {
    const int id = index[static_cast<unsigned char>(*it)];
    if (id < 0) ++*unknown;
    else ids.push_back(id);
  }
  return ids;
}

GptReport evaluate_gpt(const std::string& path, const std::string& data, int64_t max_tokens) {
  const GptData d = gpt_data(data, "--data");
  const std::string source = d.text.empty() ? d.tokens : d.text;
  const rt::ModelFile f = read_model(path);
  if (!is_gpt(path, f)) throw rt::Error(path + ": not a gpt model file (model.config type)");
  GptReport r;
  r.precision = rt::model_precision(path, f);
  rt::Gpt gpt = rt::load_gpt(path, f);
  for (const auto& p : gpt.params()) r.params += p.value.numel();
  const rt::GptConfig& g = gpt.config();
  r.shape = "layers " + std::to_string(g.layers) + ", heads " + std::to_string(g.heads) + ", embd " + std::to_string(g.embd) +
            ", context " + std::to_string(g.context) + ", vocab " + std::to_string(g.vocab);
  struct stat st {};
  if (stat(path.c_str(), &st) == 0) r.file_bytes = st.st_size;
  std::vector<int32_t> ids;
  const bool token_model = nlohmann::json::parse(f.config_json).contains("tokens");
  if (!d.tokens.empty()) {
    if (!token_model) throw rt::Error(path + ": a gpt of bytes (vocab_bytes) reads text:FILE, not token files");
    ids = read_token_ids(d.tokens, g.vocab, max_tokens);
  } else {
    ids = byte_tokens(path, f.config_json, d.text, &r.unknown_bytes);
    if (max_tokens > 0 && static_cast<int64_t>(ids.size()) > max_tokens + 1) ids.resize(static_cast<size_t>(max_tokens + 1));
  }
  rt::Decoder dec(rt::gpt_decoder(path, f, gpt));
  score_windows(dec, ids, g.context, source, nullptr).report(&r);
  return r;
}

}  // namespace loom::compress
