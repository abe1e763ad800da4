// hf_decoder.cpp — the Llama family's config.json and weights (LlamaForCausalLM, Mistral, Qwen2,
// Qwen3) mapped onto the decoder; GPT-2 through gpt2.cpp.
#include "loom/rt/io/hf_decoder.hpp"

#include <cmath>
#include <cstring>

#include "loom/rt/error.hpp"
#include "loom/rt/io/gpt2.hpp"
#include "loom/rt/io/hf_quant.hpp"
#include "loom/rt/io/hf_weights.hpp"
#include "loom/rt/io/text.hpp"

namespace loom::rt {

const std::vector<std::string>& hf_architectures() {
  static const std::vector<std::string> a = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "GPT2LMHeadModel"};
  return a;
}

namespace {

std::string architecture_of(const ConfigJson& j) {
  const auto& a = j.json().contains("architectures") ? j.json()["architectures"] : nlohmann::json();
  if (a.is_null()) {
    if (j.string("model_type", "gpt2") == "gpt2") return "GPT2LMHeadModel";
    throw Error(j.path() + ": no architectures");
  }
  if (!a.is_array() || a.size() != 1 || !a[0].is_string()) throw Error(j.path() + ": architectures must name one architecture, not " + visible_text(a.dump()));
  const std::string name = a[0].get<std::string>();
  for (const auto& k : hf_architectures())
    if (k == name) return name;
  std::string list;
  for (const auto& k : hf_architectures()) list += (list.empty() ? "" : ", ") + k;
  throw Error(j.path() + ": architecture " + visible_text(name) + " is not one loom-serve runs (" + list + ")");
}

// rope_scaling (published folders) or rope_parameters (transformers 5): one object, or null.
nlohmann::json rope_object(const ConfigJson& j) {
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (j.has(k)) {
      if (!j.json()[k].is_object()) throw Error(j.path() + ": " + k + " must be an object, not " + visible_text(j.json()[k].dump()));
      return j.json()[k];
    }
  return nlohmann::json::object();
}

double rope_number(const nlohmann::json& r, const char* key, double fallback, const std::string& path) {
  if (!r.contains(key) || r[key].is_null()) {
    if (std::isnan(fallback)) throw Error(path + ": rope scaling needs " + key);
    return fallback;
  }
  if (!r[key].is_number() || !std::isfinite(r[key].get<double>()) || r[key].get<double>() <= 0)
    throw Error(path + ": rope " + key + " must be a positive number, not " + visible_text(r[key].dump()));
  return r[key].get<double>();
}

void yarn(RopeConfig& rope, const nlohmann::json& r, double theta, int orig, const std::string& path) {
  const double factor = rope_number(r, "factor", NAN, path), dim = rope.dim;
  double af = r.contains("attention_factor") && !r["attention_factor"].is_null() ? rope_number(r, "attention_factor", 1, path) : 0;
  auto mscale = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; };
  const double ms = r.contains("mscale") && r["mscale"].is_number() ? r["mscale"].get<double>() : 0;
  const double msa = r.contains("mscale_all_dim") && r["mscale_all_dim"].is_number() ? r["mscale_all_dim"].get<double>() : 0;
  if (af == 0) af = ms && msa ? mscale(factor, ms) / mscale(factor, msa) : mscale(factor, 1);
  const double fast = r.contains("beta_fast") && r["beta_fast"].is_number() && r["beta_fast"].get<double>() ? r["beta_fast"].get<double>() : 32;
  const double slow = r.contains("beta_slow") && r["beta_slow"].is_number() && r["beta_slow"].get<double>() ? r["beta_slow"].get<double>() : 1;
  const bool truncate = !(r.contains("truncate") && r["truncate"].is_boolean() && !r["truncate"].get<bool>());
  auto correction = [&](double rot) { return dim * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(theta)); };
  double lo = correction(fast), hi = correction(slow);
  if (truncate) lo = std::floor(lo), hi = std::ceil(hi);
  lo = std::max(lo, 0.0), hi = std::min(hi, dim - 1);
  if (lo == hi) hi += 0.001;
  for (int i = 0; i < rope.dim / 2; ++i) {
    const double extra = 1.0 / std::pow(theta, 2.0 * i / dim), inter = extra / factor;
    const double ramp = std::min(1.0, std::max(0.0, (i - lo) / (hi - lo))), keep = 1 - ramp;
    rope.inv_freq[static_cast<size_t>(i)] = static_cast<float>(inter * (1 - keep) + extra * keep);
  }
  rope.attention_factor = static_cast<float>(af);
}

void llama3(RopeConfig& rope, const nlohmann::json& r, int orig, const std::string& path) {
  const double factor = rope_number(r, "factor", NAN, path), low = rope_number(r, "low_freq_factor", NAN, path),
               high = rope_number(r, "high_freq_factor", NAN, path);
  if (high <= low) throw Error(path + ": rope high_freq_factor must exceed low_freq_factor");
  const double low_wl = orig / low, high_wl = orig / high;
  for (auto& f : rope.inv_freq) {
    const double wl = 2 * M_PI / f;
    if (wl > low_wl) f = static_cast<float>(f / factor);
    else if (wl >= high_wl) {
      const double s = (orig / wl - low) / (high - low);
      f = static_cast<float>((1 - s) * f / factor + s * f);
    }
  }
}

}  // namespace

RopeConfig read_rope(const ConfigJson& j, int head_dim, int max_positions, int* context) {
  const nlohmann::json r = rope_object(j);
  const std::string path = j.path();
  const double theta = r.contains("rope_theta") && !r["rope_theta"].is_null() ? rope_number(r, "rope_theta", 0, path) : j.number("rope_theta", 1, 1e12, 10000);
  RopeConfig rope;
  const double partial = r.contains("partial_rotary_factor") ? rope_number(r, "partial_rotary_factor", 1, path) : j.number("partial_rotary_factor", 0.01, 1, 1);
  rope.dim = static_cast<int>(head_dim * partial);
  if (rope.dim < 2 || rope.dim % 2 || rope.dim > 1024) throw Error(path + ": RoPE over " + std::to_string(rope.dim) + " values of a head (an even number from 2 to 1024)");
  rope.theta = static_cast<float>(theta);
  for (int i = 0; i < rope.dim / 2; ++i) rope.inv_freq.push_back(static_cast<float>(1.0 / std::pow(theta, 2.0 * i / rope.dim)));
  std::string type = "default";
  for (const char* k : {"rope_type", "type"})
    if (r.contains(k) && !r[k].is_null()) {
      if (!r[k].is_string()) throw Error(path + ": rope " + k + " must be a string");
      type = r[k].get<std::string>();
      break;
    }
  int orig = max_positions;
  if (r.contains("original_max_position_embeddings") && !r["original_max_position_embeddings"].is_null())
    orig = static_cast<int>(rope_number(r, "original_max_position_embeddings", 0, path));
  else if (j.has("original_max_position_embeddings"))
    orig = j.integer("original_max_position_embeddings", 1, 1 << 24);
  if (type == "default") return rope;
  // The context a scaled model serves, as vLLM derives it: linear and dynamic scaling stretch
  // max_position_embeddings by the factor, yarn the original length; llama3's is written already.
  auto stretch = [&](double base) { *context = static_cast<int>(std::min(double(1 << 24), base * std::max(1.0, rope_number(r, "factor", NAN, path)))); };
  if (type == "linear") {
    const double f = rope_number(r, "factor", NAN, path);
    for (auto& v : rope.inv_freq) v = static_cast<float>(v / f);
    stretch(max_positions);
  } else if (type == "dynamic") {
    rope.dynamic_factor = static_cast<float>(rope_number(r, "factor", NAN, path));
    rope.original = max_positions;
    stretch(max_positions);
  } else if (type == "llama3") {
    llama3(rope, r, orig, path);
  } else if (type == "yarn") {
    yarn(rope, r, theta, orig, path);
    stretch(orig);
  } else {
    throw Error(path + ": rope scaling type '" + visible_text(type) + "' is not one loom-serve runs (default, linear, dynamic, llama3, yarn)");
  }
  return rope;
}

namespace {

struct LlamaShape {
  int64_t C, F, hs, H, K, V;
  bool q_bias, o_bias, mlp_bias, qk_norm, tied;
};

DecoderConfig read_llama_config(const ConfigJson& j, const std::string& arch, LlamaShape* s) {
  const std::string& path = j.path();
  DecoderConfig c;
  c.vocab = j.integer("vocab_size", 1, 1 << 22);
  c.embd = j.integer("hidden_size", 1, 1 << 16);
  c.layers = j.integer("num_hidden_layers", 1, 1024);
  c.heads = j.integer("num_attention_heads", 1, 1024);
  c.kv_heads = j.integer("num_key_value_heads", 1, 1024, c.heads);
  if (c.heads % c.kv_heads)
    throw Error(path + ": num_attention_heads " + std::to_string(c.heads) + " is not a multiple of num_key_value_heads " + std::to_string(c.kv_heads));
  if (!j.has("head_dim") && c.embd % c.heads)
    throw Error(path + ": hidden_size " + std::to_string(c.embd) + " is not a multiple of num_attention_heads " + std::to_string(c.heads) + " (and no head_dim)");
  c.head_size = j.integer("head_dim", 2, 1024, c.embd / c.heads);
  c.context = j.integer("max_position_embeddings", 1, 1 << 24);
  c.ln_eps = static_cast<float>(j.number("rms_norm_eps", 1e-12, 1, 1e-6));
  c.rms_norm = c.swiglu = true;
  const std::string act = j.string("hidden_act", "silu");
  if (act != "silu" && act != "swish") throw Error(path + ": hidden_act '" + visible_text(act) + "': the Llama family's MLP runs silu");
  c.rope = read_rope(j, c.hs(), c.context, &c.context);
  const bool qwen = arch.rfind("Qwen", 0) == 0;
  if (arch == "MistralForCausalLM") c.sliding_window = j.integer("sliding_window", 1, 1 << 24, 0);
  if (qwen && j.boolean("use_sliding_window", false))
    throw Error(path + ": use_sliding_window: Qwen's sliding-window layers are not run by loom-serve");
  c.qk_norm = arch == "Qwen3ForCausalLM";
  s->C = c.embd, s->F = j.integer("intermediate_size", 1, 1 << 20), s->hs = c.hs(), s->H = c.heads, s->K = c.kv_heads, s->V = c.vocab;
  s->q_bias = arch == "Qwen2ForCausalLM" || j.boolean("attention_bias", false);
  s->o_bias = arch != "Qwen2ForCausalLM" && j.boolean("attention_bias", false);
  s->mlp_bias = j.boolean("mlp_bias", false);
  s->qk_norm = c.qk_norm;
  s->tied = j.boolean("tie_word_embeddings", false);
  return c;
}

// Rows of several [r_i, cols] (or [r_i]) tensors stacked into one.
Tensor stacked(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.dim(0);
  std::vector<int64_t> shape = parts[0].shape();
  shape[0] = rows;
  Tensor t = Tensor::empty(shape);
  float* o = t.f32();
  for (const auto& p : parts) o = std::copy_n(p.f32(), p.numel(), o);
  return t;
}

// A linear layer's weight, the parts' rows stacked: int8 where they are stored I8 (and config.json
// declares the scheme: `int8`), kept 16-bit when every part is stored in one 16-bit type, else float32.
struct LinearWeight {
  Tensor f32;
  Linear16 h;
  Int8Linear q;
};
LinearWeight linear_weight(HfWeights& r, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts, bool int8) {
  LinearWeight w;
  if (r.has(parts[0].first) && r.entry(parts[0].first).dtype == "I8") {
    if (!int8)
      throw Error(r.file_of(parts[0].first) + ": tensor '" + parts[0].first + "' is I8, but " +
                  (parts[0].first.find("embed_tokens") != std::string::npos ? "embeddings are read in floating point"
                                                                             : "config.json has no quantization_config"));
    w.q = read_int8_linear(r, parts);
    return w;
  }
  std::vector<uint16_t> all;
  bool kind = false, first_kind = false, half = true;
  int64_t rows = 0;
  for (const auto& p : parts) rows += p.second[0];
  all.reserve(static_cast<size_t>(rows * parts[0].second[1]));  // read in place: no second copy
  for (size_t i = 0; i < parts.size() && half; ++i) {
    half = r.get16(parts[i].first, parts[i].second, &all, &kind) && (i == 0 || kind == first_kind);
    if (i == 0) first_kind = kind;
  }
  if (half) {
    w.h = std::make_shared<HalfLinear>(std::move(all), static_cast<int>(rows), static_cast<int>(parts[0].second[1]), first_kind);
    return w;
  }
  std::vector<Tensor> t;
  for (const auto& p : parts) t.push_back(r.get(p.first, p.second));
  w.f32 = stacked(t);
  return w;
}

DecoderWeights load_llama(const std::string& folder, const ConfigJson& j, const std::string& arch) {
  LlamaShape s;
  DecoderWeights w;
  w.c = read_llama_config(j, arch, &s);
  const bool int8 = read_int8_scheme(j);
  HfWeights r(folder, [](const std::string& n) { return n.find("rotary_emb.inv_freq") != std::string::npos ? std::string() : n; });
  const int64_t q = s.H * s.hs, k = s.K * s.hs, C = s.C;
  LinearWeight emb = linear_weight(r, {{"model.embed_tokens.weight", {s.V, C}}}, false);
  w.wte = emb.f32, w.h_wte = emb.h;
  for (int l = 0; l < w.c.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    DecoderLayer d;
    d.ln1_g = r.get(h + "input_layernorm.weight", {C});
    const std::string a = h + "self_attn.";
    LinearWeight qkv = linear_weight(r, {{a + "q_proj.weight", {q, C}}, {a + "k_proj.weight", {k, C}}, {a + "v_proj.weight", {k, C}}}, int8);
    d.w_qkv = qkv.f32, d.h_qkv = qkv.h, d.q_qkv = qkv.q;
    if (s.q_bias) d.b_qkv = stacked({r.get(a + "q_proj.bias", {q}), r.get(a + "k_proj.bias", {k}), r.get(a + "v_proj.bias", {k})});
    LinearWeight o = linear_weight(r, {{a + "o_proj.weight", {C, q}}}, int8);
    d.w_o = o.f32, d.h_o = o.h, d.q_o = o.q;
    if (s.o_bias) d.b_o = r.get(a + "o_proj.bias", {C});
    if (s.qk_norm) {
      d.q_norm = r.get(a + "q_norm.weight", {s.hs});
      d.k_norm = r.get(a + "k_norm.weight", {s.hs});
    }
    d.ln2_g = r.get(h + "post_attention_layernorm.weight", {C});
    const std::string m = h + "mlp.";
    LinearWeight fc = linear_weight(r, {{m + "gate_proj.weight", {s.F, C}}, {m + "up_proj.weight", {s.F, C}}}, int8);
    d.w_fc = fc.f32, d.h_fc = fc.h, d.q_fc = fc.q;
    if (s.mlp_bias) d.b_fc = stacked({r.get(m + "gate_proj.bias", {s.F}), r.get(m + "up_proj.bias", {s.F})});
    LinearWeight down = linear_weight(r, {{m + "down_proj.weight", {C, s.F}}}, int8);
    d.w_p = down.f32, d.h_p = down.h, d.q_p = down.q;
    if (s.mlp_bias) d.b_p = r.get(m + "down_proj.bias", {C});
    w.layers.push_back(std::move(d));
  }
  w.lnf_g = r.get("model.norm.weight", {C});
  // Tied embeddings: save_pretrained leaves lm_head out; a folder that keeps it anyway is read.
  if (!s.tied || r.has("lm_head.weight")) {
    LinearWeight head = linear_weight(r, {{"lm_head.weight", {s.V, C}}}, int8);
    w.lm_head = head.f32, w.h_lm_head = head.h, w.q_lm_head = head.q;
  } else {
    w.lm_head = w.wte, w.h_lm_head = w.h_wte;
  }
  r.check_all_used();
  return w;
}

}  // namespace

std::string decoder_precision(const DecoderWeights& w) {
  if (w.layers.empty()) return "fp32";
  if (w.layers[0].q_qkv) return "int8";
  if (w.layers[0].h_qkv) return w.layers[0].h_qkv->bf16() ? "bf16" : "fp16";
  return "fp32";
}

DecoderWeights load_hf_decoder(const std::string& folder, std::string* architecture) {
  const ConfigJson j(folder + "/config.json");
  const std::string arch = architecture_of(j);
  if (architecture) *architecture = arch;
  if (arch == "GPT2LMHeadModel") {
    if (j.has("quantization_config")) throw Error(j.path() + ": quantization_config: a GPT-2 folder is read in floating point");
    return load_gpt2(folder);
  }
  return load_llama(folder, j, arch);
}

}  // namespace loom::rt
