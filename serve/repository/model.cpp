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
#include "loom/rt/io/gpt2.hpp"
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
    load_gpt2(llm);
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
  backend_ = engine_backend(std::make_unique<llm::Engine>(rt::Decoder(rt::gpt_decoder(path_, f, gpt)), std::move(tok), -1, llm), path_);
}

// GPT-2 as people download it: config.json and model.safetensors in the version folder (path_
// names the latter), with GPT-2's tokenizer when vocab.json and merges.txt are there too (token
// ids in and out otherwise).
void ServedModel::load_gpt2(const LlmOptions& llm) {
  const std::string folder = path_.substr(0, path_.rfind('/'));
  rt::DecoderWeights w = rt::load_gpt2(folder);
  int eos = -1;
  const auto cfg = rt::parse_json_text(llm::read_small(folder + "/config.json"), folder + "/config.json");
  if (cfg.contains("eos_token_id") && cfg["eos_token_id"].is_number_integer()) {  // read whole: 2^32 + 5 is not 5
    const int64_t id = cfg["eos_token_id"].get<int64_t>();
    if (id < 0 || id >= w.c.vocab)
      throw rt::Error(folder + "/config.json: eos_token_id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(w.c.vocab));
    eos = static_cast<int>(id);
  }
  platform_ = "loom-gpt2";
  config_ = json_text(nlohmann::ordered_json{{"type", "gpt2"}, {"n_layer", w.c.layers}, {"n_embd", w.c.embd},
                                             {"n_positions", w.c.context}, {"vocab_size", w.c.vocab}});
  std::unique_ptr<llm::Tokenizer> tok;
  const bool vocab = access((folder + "/vocab.json").c_str(), F_OK) == 0, merges = access((folder + "/merges.txt").c_str(), F_OK) == 0;
  if (vocab != merges)
    throw rt::Error(folder + ": " + (vocab ? "vocab.json without merges.txt" : "merges.txt without vocab.json") + ": GPT-2's tokenizer needs both");
  if (vocab) {
    auto bpe = std::make_unique<llm::BpeTokenizer>(folder + "/vocab.json", folder + "/merges.txt", w.c.vocab);
    bpe->read_special_tokens(folder);
    tok = std::move(bpe);
  }
  chat_ = chat_format_of(folder);
  if (chat_ && !tok) throw rt::Error(folder + "/tokenizer_config.json has a chat_template, but the folder has no vocab.json and merges.txt to tokenize what it renders");
  backend_ = engine_backend(std::make_unique<llm::Engine>(rt::Decoder(std::move(w)), std::move(tok), eos, llm), path_);
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
