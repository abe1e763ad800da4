// gpt_task.cpp — the `gpt` task: a GPT on a text file (byte-level tokens) or on llm.c's token
// files; the first 90% of the tokens trains, the last 10% measures next-token accuracy; on the
// CPU or on CUDA.
#include <algorithm>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "loom/json_text.hpp"
#include "loom/rt/io/json.hpp"
#include "loom/rt/io/data.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/tokens.hpp"
#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "loom/rt/train/task.hpp"

namespace loom::rt {

namespace {

class GptTask : public Task {
 public:
  GptTask(const TrainConfig& c, Device device) : text_(load(c)), seed_(c.seed), soft_{nullptr, c.temperature, c.alpha} {
    GptConfig g;
    g.vocab = text_.files ? c.vocab : static_cast<int>(text_.chars.size());
    // Text samples a window at every position; token files (large) at multiples of the context,
    // as llm.c's loader does, so the epoch's order costs 8 bytes per window, not per token.
    stride_ = text_.files ? c.context : 1;
    g.context = c.context;
    g.layers = c.gpt_layers;
    g.heads = c.heads;
    g.embd = c.embd;
    g.dropout = c.dropout;
    // --zero 3 on several ranks: the gradients come from the gate, group by group (train/zero3.hpp).
    model_ = std::make_unique<Gpt>(g, c.seed, !(c.zero == 3 && c.comm && c.comm->size() > 1));
    model_->set_recompute(c.recompute);
    model_->set_attention(c.attention);
    split_ = text_.size() * 9 / 10;
    if ((split_ - c.context - 1) / stride_ + 1 < c.global_batch || text_.size() - split_ < c.context + 2)
      throw Error(text_.source + ": " + std::to_string(text_.size()) + " tokens are too few for --context " +
                  std::to_string(c.context) + " and --global-batch " + std::to_string(c.global_batch));
    load_models(c, device);
  }
  // A model file trained on the same tokens (its vocabulary and context those of this run):
  // --init (a pruned model's fine-tuning) and the teacher of distillation.
  Gpt same_tokens(const std::string& path, const std::string& what) const {
    const ModelFile f = load_model(path);
    Gpt g = load_gpt(path, f);
    const auto cfg = parse_json_text(f.config_json, path + ": model.config");
    const auto mine = nlohmann::json::parse(config_json());
    const char* key = text_.files ? "tokens" : "vocab_bytes";
    if (g.config().vocab != model_->config().vocab || cfg.value(key, nlohmann::json()) != mine[key])
      throw Error(what + " " + path + " has another vocabulary (" + std::to_string(g.config().vocab) + " tokens" +
                  (cfg.contains(key) ? ", " + std::string(key) + " " + cfg[key].dump().substr(0, 60) : std::string(", no ") + key) +
                  ") than the text " + text_.source + " (" + std::to_string(model_->config().vocab) +
                  "): use the text it was trained on");
    if (g.config().context != model_->config().context)
      throw Error(what + " " + path + " reads a context of " + std::to_string(g.config().context) + " tokens, this run " +
                  std::to_string(model_->config().context) + ": give its --context");
    return g;
  }
  void load_models(const TrainConfig& c, Device device) {
    if (!c.init_path.empty()) {
      model_ = std::make_unique<Gpt>(same_tokens(c.init_path, "--init"));
      model_->set_recompute(c.recompute);
      model_->set_attention(c.attention);
    }
    if (!c.teacher_path.empty()) {
      if (device != Device::kCpu) throw Error("distillation runs on the CPU in this build (use --device cpu)");
      teacher_ = std::make_unique<Gpt>(same_tokens(c.teacher_path, "teacher"));
    }
    model_->to(device);
  }
  std::string describe() const override {
    int64_t n = 0;
    for (const auto& p : model_->params()) n += p.value.numel();
    return "gpt with " + std::to_string(n) + " parameters on " + std::to_string(text_.size()) +
           (text_.files ? " tokens of " + std::to_string(text_.files) + " token files" : std::string(" characters")) +
           " (vocabulary " + std::to_string(model_->config().vocab) + "), on " +
           (model_->device() == Device::kCuda ? "cuda" : "cpu") + (model_->flash() ? ", flash attention" : "");
  }
  int64_t steps_per_epoch(int batch) const override {
    return std::max<int64_t>(1, split_ / (int64_t{model_->config().context} * batch));
  }
  double train_step(int64_t epoch, int64_t first, int batch, int of, const std::function<void(size_t)>& ready) override {
    const int T = model_->config().context;
    const int64_t starts = (split_ - T - 1) / stride_ + 1;
    if (epoch != order_epoch_) order_ = epoch_order(starts, seed_, order_epoch_ = epoch);
    tok_.resize(static_cast<size_t>(batch) * T);
    tgt_.resize(tok_.size());
    for (int b = 0; b < batch; ++b)
      text_.window(order_[static_cast<size_t>((first + b) % starts)] * stride_, T, &tok_[static_cast<size_t>(b) * T],
                   &tgt_[static_cast<size_t>(b) * T]);
    if (teacher_) {
      teacher_->forward(tok_, tgt_, batch, false);
      soft_.logits = teacher_->logits().f32();
    }
    double loss = model_->forward(tok_, tgt_, batch, true, of, teacher_ ? &soft_ : nullptr);
    model_->backward(ready);
    return loss;
  }
  Eval evaluate() override {  // next-character accuracy and loss on the last 10% of the text
    const int T = model_->config().context, V = model_->config().vocab;
    const int64_t windows = std::min<int64_t>(64, (text_.size() - split_ - 1) / T);
    std::vector<int32_t> tok(static_cast<size_t>(windows) * T), tgt(tok.size()), pred(tok.size());
    for (int64_t w = 0; w < windows; ++w)
      text_.window(split_ + w * T, T, &tok[static_cast<size_t>(w * T)], &tgt[static_cast<size_t>(w * T)]);
    double loss = model_->forward(tok, tgt, static_cast<int>(windows), false);
    const Tensor logits = model_->logits().to(Device::kCpu);
    cpu::argmax_rows(logits.f32(), static_cast<int>(tok.size()), V, pred.data());
    int64_t correct = 0;
    for (size_t i = 0; i < tok.size(); ++i) correct += pred[i] == tgt[i];
    return {static_cast<double>(correct) / static_cast<double>(tok.size()), loss};
  }
  std::vector<Param>& params() override { return model_->params(); }
  std::vector<ParamGroup> param_groups() const override { return model_->param_groups(); }
  void set_param_gate(ParamGate* gate) override { model_->set_gate(gate); }
  std::string config_json() const override {
    auto j = nlohmann::ordered_json::parse(model_->config().json());
    if (text_.files) {  // no byte vocabulary: a tokenizer's ids
      j["tokens"] = "llm.c uint" + std::to_string(8 * text_.mapped.token_bytes());
    } else {
      // Byte-level tokens: the vocabulary as the byte values it holds (any file, UTF-8 or not,
      // round-trips through the JSON of model.config).
      std::vector<int> bytes(text_.chars.begin(), text_.chars.end());
      for (int& b : bytes) b &= 0xff;
      j["vocab_bytes"] = bytes;
    }
    return json_text(j);
  }
  double train_flops(int batch) const override { return model_->train_flops(batch); }
  std::string rng_state() const override { return model_->rng_state(); }
  void set_rng_state(const std::string& s) override {
    if (!s.empty()) model_->set_rng_state(s);
  }

 private:
  struct Text {
    std::string source;         // the file or the pattern, for messages
    size_t files = 0;           // token files read (0: a text file)
    std::string chars;          // text: the vocabulary, the distinct bytes of the text, sorted
    std::vector<uint16_t> ids;  // text: the tokens, as vocabulary indices
    TokenFiles mapped;          // token files: read in place
    int64_t size() const { return files ? mapped.size() : static_cast<int64_t>(ids.size()); }
    // Tokens s .. s+T-1 into tok and s+1 .. s+T into tgt: one read of T+1 tokens.
    void window(int64_t s, int T, int32_t* tok, int32_t* tgt) const {
      thread_local std::vector<uint32_t> w;
      w.resize(static_cast<size_t>(T) + 1);
      if (files) mapped.read(s, T + 1, w.data());
      else
        for (int t = 0; t <= T; ++t) w[static_cast<size_t>(t)] = ids[static_cast<size_t>(s + t)];
      for (int t = 0; t < T; ++t) tok[t] = static_cast<int32_t>(w[static_cast<size_t>(t)]), tgt[t] = static_cast<int32_t>(w[static_cast<size_t>(t) + 1]);
    }
  };
  static Text load(const TrainConfig& c) {
    if (c.token_files.empty()) return load_text(c.text_path);
    Text t;
    t.source = c.token_files;
    t.mapped = load_token_files(c.token_files, c.vocab);
    t.files = t.mapped.paths.size();
    return t;
  }
  static Text load_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot read the text file");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (s.empty()) throw Error(path + ": the text file has no content");
    Text t;
    t.source = path;
    bool seen[256] = {false};
    for (unsigned char ch : s) seen[ch] = true;
    int index[256];
    for (int ch = 0; ch < 256; ++ch)
      if (seen[ch]) index[ch] = static_cast<int>(t.chars.size()), t.chars += static_cast<char>(ch);
    t.ids.reserve(s.size());
    for (unsigned char ch : s) t.ids.push_back(static_cast<uint16_t>(index[ch]));
    return t;
  }
  Text text_;
  uint64_t seed_;
  std::unique_ptr<Gpt> model_, teacher_;
  SoftTargets soft_;
  int64_t split_ = 0, order_epoch_ = -1, stride_ = 1;
  std::vector<int64_t> order_;
  std::vector<int32_t> tok_, tgt_;
};

}  // namespace

std::unique_ptr<Task> make_gpt_task(const TrainConfig& c, Device device) {
  return std::make_unique<GptTask>(c, device);
}

}  // namespace loom::rt
