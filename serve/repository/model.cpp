// model.cpp — loading a served model version, its forward pass and input decoding.
#include "repository/model.hpp"

#ifdef LOOM_HAVE_ONNX
#include "loom/rt/graph/graph.hpp"
#include "loom/rt/io/json.hpp"
#endif

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/model_files.hpp"
#include "core/status.hpp"
#include "loom/json_text.hpp"
#include "loom/rt/io/hf_decoder.hpp"
#include "llm/tokenizer_json.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/tensor/finite.hpp"
#include "loom/rt/tensor/ops.hpp"

namespace loom::serve {

ServedModel::ServedModel(std::string name, std::string version, std::string path, const std::string& device,
                         const LlmOptions& llm)
    : name_(std::move(name)), version_(std::move(version)), path_(std::move(path)) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    throw rt::Error("--device must be auto, cpu or cuda, not '" + device + "'");
  if (is_onnx_file(path_)) {
    load_onnx(device);
    return;
  }
  if (is_safetensors_file(path_)) {
    if (device == "cuda") throw rt::Error("--device cuda: language models are served on the CPU in this build");
    load_hf(llm);
    return;
  }
  rt::ModelFile f = rt::load_model(path_);  // verifies every checksum
  nlohmann::json cfg;
  try {
    cfg = rt::parse_json_text(f.config_json, path_ + ": model.config");
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(path_ + ": model.config is not valid JSON: " + e.what());
  }
  if (!cfg.is_object()) throw rt::Error(path_ + ": model.config must be a JSON object");
  const std::string type = cfg.value("type", "");
  if (type == "gpt") {
    if (device == "cuda") throw rt::Error("--device cuda: gpt models are served on the CPU in this build");
    precision_ = rt::model_precision(path_, f);
    load_gpt(f, cfg, llm);
    config_ = f.config_json;
    return;
  }
  if (type != "mlp")
    throw rt::Error(path_ + ": model type '" + type + "' cannot be served (loom-serve serves types mlp and gpt)");
  precision_ = rt::model_precision(path_, f);
  auto mlp = std::make_unique<rt::Mlp>(rt::load_mlp(path_, f));  // the file is read (and verified) once
  std::unique_ptr<rt::QuantMlp> int8;
  if (precision_ == "int8") int8 = std::make_unique<rt::QuantMlp>(rt::load_quant_mlp(path_, f));
  in_ = mlp->widths().front();
  out_ = mlp->widths().back();
  input_.features = in_;
  inputs_ = {{"input", "FP32", {-1, in_}}};
  outputs_ = {{"logits", "FP32", {-1, out_}}};
  check_finite(mlp->params());
  if (int8) mlp.reset();  // checked; the INT8 model serves, without a float copy 4x its size
  if (cfg.contains("preprocess")) {
    const auto& p = cfg["preprocess"];
    try {
      input_.scale = p.value("scale", 1.0f);
      input_.mean = p.value("mean", 0.0f);
      input_.std = p.value("std", 1.0f);
    } catch (const nlohmann::json::exception&) {
      throw rt::Error(path_ + ": model.config preprocess must hold numbers scale, mean and std");
    }
    if (!(input_.std > 0) || !std::isfinite(input_.std) || !std::isfinite(input_.scale) || !std::isfinite(input_.mean))
      throw rt::Error(path_ + ": model.config preprocess has a bad scale, mean or std");
  }
  config_ = f.config_json;
  std::string why;
  cuda_ = device != "cpu" && rt::ops::cuda_usable(&why);
  if (device == "cuda" && !cuda_) throw rt::Error("--device cuda: " + why);
  if (cuda_ && int8) int8->to(rt::Device::kCuda);  // cuBLASLt's int8 GEMM
  else if (cuda_) mlp->to(rt::Device::kCuda);
  backend_ = mlp_backend(std::move(mlp), std::move(int8), cuda_, input_);
}

// A model of NaN weights would answer null with 200: refused at load.
void ServedModel::check_finite(const std::vector<rt::Param>& params) const {
  for (const auto& p : params) {
    if (!rt::cpu::all_finite(p.value.f32(), p.value.numel()))
      throw rt::Error(path_ + ": /params/" + p.name + " holds a NaN or infinite weight");
  }
}

namespace {

// A language model's chat format: its version folder's, else its model folder's (where a
// template shared by every version sits).
std::unique_ptr<llm::ChatFormat> chat_format_of(const std::string& version_folder) {
  if (auto f = llm::load_chat_format(version_folder)) return f;
  return llm::load_chat_format(version_folder.substr(0, version_folder.rfind('/')));
}

}  // namespace

// A gpt is served by the generate extension (on the CPU): its vocabulary from vocab_bytes.
void ServedModel::load_gpt(const rt::ModelFile& f, const nlohmann::json& cfg, const LlmOptions& llm) {
  rt::Gpt gpt = rt::load_gpt(path_, f);
  check_finite(gpt.params());
  std::vector<int> bytes;
  if (cfg.contains("tokens"))
    throw rt::Error(path_ + ": a gpt trained on token files (" + cfg["tokens"].dump().substr(0, 200) +
                    ") has token ids, not bytes: loom-serve has no tokenizer for them, so it cannot generate text");
  try {
    bytes = cfg.at("vocab_bytes").get<std::vector<int>>();
  } catch (const nlohmann::json::exception&) {
    throw rt::Error(path_ + ": model.config has no vocab_bytes (a gpt exported before byte-level tokens: train it again)");
  }
  auto tok = std::make_unique<llm::ByteTokenizer>(std::move(bytes), gpt.config().vocab, path_);
  chat_ = chat_format_of(path_.substr(0, path_.rfind('/')));
  if (chat_ && !llm.tool_call_parser.empty()) chat_->tools = llm::tool_parser_named(llm.tool_call_parser);
  backend_ = engine_backend(std::make_unique<llm::Engine>(rt::Decoder(rt::gpt_decoder(path_, f, gpt)), std::move(tok), std::vector<int32_t>{}, llm), path_);
}

namespace {

// eos_token_id: one id or a list (Llama 3 stops on two), generation_config.json's before
// config.json's.
std::vector<int32_t> eos_ids(const std::string& folder, int vocab) {
  for (const char* name : {"/generation_config.json", "/config.json"}) {
    const std::string path = folder + name;
    if (access(path.c_str(), F_OK) != 0) continue;
    const auto cfg = rt::parse_json_text(llm::read_small(path), path);
    if (!cfg.is_object() || !cfg.contains("eos_token_id") || cfg["eos_token_id"].is_null()) continue;
    const auto& e = cfg["eos_token_id"];
    std::vector<int32_t> ids;
    for (const auto& v : e.is_array() ? e : nlohmann::json::array({e})) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)  // read whole: 2^32 + 5 is not 5
        throw rt::Error(path + ": eos_token_id " + v.dump().substr(0, 40) + " is outside the vocabulary of " + std::to_string(vocab));
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return ids;
  }
  return {};
}

// generation_config.json's temperature, top_p and top_k: the defaults of requests that give none.
llm::SamplingDefaults sampling_defaults(const std::string& folder) {
  llm::SamplingDefaults d;
  const std::string path = folder + "/generation_config.json";
  if (access(path.c_str(), F_OK) != 0) return d;
  const auto g = rt::parse_json_text(llm::read_small(path), path);
  if (!g.is_object()) throw rt::Error(path + ": must be a JSON object");
  auto number = [&](const char* key, double lo, double hi) {
    if (!g.contains(key) || g[key].is_null()) return -1.0;
    if (!g[key].is_number() || !(g[key].get<double>() >= lo && g[key].get<double>() <= hi))
      throw rt::Error(path + ": " + key + " must be a number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return g[key].get<double>();
  };
  d.temperature = static_cast<float>(number("temperature", 0, 100));
  d.top_p = static_cast<float>(number("top_p", 1e-9, 1));
  d.top_k = static_cast<int>(number("top_k", 0, 1 << 22));
  return d;
}

// tokenizer.json (the `tokenizers` library's), else GPT-2's vocab.json + merges.txt, else none
// (token ids in and out).
std::unique_ptr<llm::Tokenizer> folder_tokenizer(const std::string& folder, int vocab) {
  if (access((folder + "/tokenizer.json").c_str(), F_OK) == 0) return std::make_unique<llm::HfTokenizer>(folder + "/tokenizer.json", vocab);
  const bool v = access((folder + "/vocab.json").c_str(), F_OK) == 0, m = access((folder + "/merges.txt").c_str(), F_OK) == 0;
  if (v != m) throw rt::Error(folder + ": " + (v ? "vocab.json without merges.txt" : "merges.txt without vocab.json") + ": GPT-2's tokenizer needs both");
  if (!v) return nullptr;
  auto bpe = std::make_unique<llm::BpeTokenizer>(folder + "/vocab.json", folder + "/merges.txt", vocab);
  bpe->read_special_tokens(folder);
  return bpe;
}

}  // namespace

// A Hugging Face folder (GPT-2 or the Llama family): config.json and safetensors in the version
// folder (path_ names model.safetensors or its index), with its tokenizer when the folder has one.
void ServedModel::load_hf(const LlmOptions& llm) {
  const std::string folder = path_.substr(0, path_.rfind('/'));
  std::string arch;
  rt::DecoderWeights w = rt::load_hf_decoder(folder, &arch);
  const std::vector<int32_t> eos = eos_ids(folder, w.c.vocab);
  if (rt::decoder_precision(w) != "fp32") precision_ = rt::decoder_precision(w);  // kept so in memory
  const bool gpt2 = arch == "GPT2LMHeadModel";
  platform_ = gpt2 ? "loom-gpt2" : "loom-hf";
  family_ = gpt2 ? "gpt2" : arch == "LlamaForCausalLM" ? "llama" : arch == "MistralForCausalLM" ? "mistral" : arch == "Qwen2ForCausalLM" ? "qwen2" : "qwen3";
  config_ = json_text(nlohmann::ordered_json{{"type", family_}, {"architecture", arch}, {"n_layer", w.c.layers}, {"n_embd", w.c.embd},
                                             {"n_positions", w.c.context}, {"vocab_size", w.c.vocab}});
  std::unique_ptr<llm::Tokenizer> tok = folder_tokenizer(folder, w.c.vocab);
  chat_ = chat_format_of(folder);
  if (chat_ && !tok) throw rt::Error(folder + ": a chat template, but no tokenizer.json (or vocab.json and merges.txt) to tokenize what it renders");
  if (chat_) chat_->tools = llm.tool_call_parser.empty() ? llm::tool_parser_of(tok.get(), "") : llm::tool_parser_named(llm.tool_call_parser);
  auto engine = std::make_unique<llm::Engine>(rt::Decoder(std::move(w)), std::move(tok), eos, llm);
  engine->set_sampling_defaults(sampling_defaults(folder));
  backend_ = engine_backend(std::move(engine), path_);
}

ServedModel::~ServedModel() = default;

#ifdef LOOM_HAVE_ONNX
// An ONNX graph on the CPU: the graph's inputs and outputs as its metadata; batched when every
// input and output has a dynamic first dimension and the rows are independent.
void ServedModel::load_onnx(const std::string& device) {
  if (device == "cuda") throw rt::Error("--device cuda: ONNX models are served on the CPU in this build");
  auto graph = std::make_unique<rt::graph::Model>(rt::graph::Model::load(path_));
  platform_ = "loom-onnx";
  auto desc = [this](const rt::graph::TensorInfo& t) {
    if (!datatype_width(rt::graph::kserve_type_name(t.dtype)))
      throw rt::Error(path_ + ": '" + t.name + "' is " + rt::graph::kserve_type_name(t.dtype) + ", which loom-serve does not take");
    batched_ = batched_ && !t.shape.empty() && t.shape[0] < 0;
    return TensorDesc{t.name, rt::graph::kserve_type_name(t.dtype), t.shape};
  };
  for (const auto& t : graph->inputs()) inputs_.push_back(desc(t));
  for (const auto& t : graph->outputs()) outputs_.push_back(desc(t));
  if (inputs_.empty()) throw rt::Error(path_ + ": the graph has no inputs");
  // A dynamic first dimension is not enough: requests share a run only when a pass proved that
  // no row's answer depends on another row (x - ReduceMean(x, axes=[0]) would mix them).
  if (batched_ && !graph->row_independent()) {
    batched_ = false;
    not_batched_ = graph->why_not_row_independent();
  }
  config_ = json_text(nlohmann::ordered_json{{"type", "onnx"}, {"opset", graph->opset()}});
  backend_ = graph_backend(std::move(graph));
}

#else
void ServedModel::load_onnx(const std::string&) {
  throw rt::Error(path_ + ": this build of loom-serve has no ONNX support (configure found no libonnx-dev)");
}
#endif

}  // namespace loom::serve
