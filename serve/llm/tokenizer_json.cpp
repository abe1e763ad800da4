// tokenizer_json.cpp — tokenizer.json's BPE model, added tokens and post-processor (tokenizer_json.hpp).
#include "tokenizer_json.hpp"

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/status.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/json.hpp"
#include "loom/rt/io/text.hpp"
#include "tokenizer_steps.hpp"

namespace loom::serve::llm {

struct HfTokenizer::Impl {
  std::string path;
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> out_bytes;  // id -> what it decodes to
  std::vector<SpecialToken> added;     // matched before anything else, longest first
  std::unordered_map<uint64_t, std::pair<int, int32_t>> merges;  // (left id, right id) -> (rank, merged id)
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre;
  std::unique_ptr<TokenDecoder> decoder;
  bool byte_level = false, byte_fallback = false, ignore_merges = false, fuse_unk = false;
  int32_t unk = -1;
  int32_t byte_ids[256];
  std::vector<int32_t> prefix, suffix;  // the post-processor's special tokens around a text
  size_t longest = 1;
  std::string strip;  // the decoder's Strip: what a whole text loses at its start
  std::unordered_map<int32_t, std::string> specials;  // special tokens' texts, which decode drops
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  int32_t id(const std::string& t, const std::string& where) const {
    auto it = ids.find(t);
    if (it == ids.end()) throw rt::Error(path + ": " + where + " names '" + rt::visible_text(t) + "', which is not in the vocabulary");
    return it->second;
  }
  void read_model(const nlohmann::json& m, int vocab);
  void read_merges(const nlohmann::json& list);
  void read_added(const nlohmann::json& list, int vocab, std::vector<bool>* special);
  void read_post(const nlohmann::json& p);
  void symbols(const std::string& piece, std::vector<int32_t>& out) const;
  void bpe(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_segment(const std::string& text, bool first, std::vector<int32_t>& out) const;
};

void HfTokenizer::Impl::read_model(const nlohmann::json& m, int vocab) {
  if (!m.is_object() || m.value("type", std::string("BPE")) != "BPE")
    throw rt::Error(path + ": model " + rt::visible_text(m.is_object() ? m.value("type", std::string("?")) : m.dump()) +
                    " is not one loom-serve implements (BPE)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null() && !(m[k].is_string() && m[k].get<std::string>().empty()))
      throw rt::Error(path + ": model " + k + " is not implemented");
  if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"].get<double>() == 0))
    throw rt::Error(path + ": model dropout is for training; a served tokenizer has none");
  if (!m.contains("vocab") || !m["vocab"].is_object()) throw rt::Error(path + ": model has no vocab");
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= vocab)
      throw rt::Error(path + ": token '" + rt::visible_text(it.key()) + "' has id " + rt::visible_text(it->dump()) + ", outside the model's vocabulary of " +
                      std::to_string(vocab));
    ids.emplace(it.key(), static_cast<int32_t>(it->get<int64_t>()));  // an added token's id stands
  }
  byte_fallback = m.value("byte_fallback", false);
  ignore_merges = m.value("ignore_merges", false);
  fuse_unk = m.value("fuse_unk", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) unk = id(m["unk_token"].get<std::string>(), "model unk_token");
  if (m.contains("merges")) read_merges(m["merges"]);
}

// Merges as "a b" (tokenizers before 0.20) or as ["a", "b"].
void HfTokenizer::Impl::read_merges(const nlohmann::json& list) {
  if (!list.is_array()) throw rt::Error(path + ": model merges must be a list");
  int rank = 0;
  for (const auto& m : list) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw rt::Error(path + ": merge " + std::to_string(rank) + " '" + rt::visible_text(s) + "' is not two tokens separated by one space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      throw rt::Error(path + ": merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const std::string where = "merge " + std::to_string(rank);
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(id(a, where))) << 32 | static_cast<uint32_t>(id(b, where));
    merges.emplace(key, std::make_pair(rank, id(a + b, where)));
    ++rank;
  }
}

void HfTokenizer::Impl::read_added(const nlohmann::json& list, int vocab, std::vector<bool>* special) {
  if (list.is_null()) return;
  if (!list.is_array()) throw rt::Error(path + ": added_tokens must be a list");
  for (const auto& t : list) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") || !t["content"].is_string())
      throw rt::Error(path + ": each added token has an integer id and a content string");
    const int64_t i = t["id"].get<int64_t>();
    const std::string c = t["content"].get<std::string>();
    if (i < 0 || i >= vocab) throw rt::Error(path + ": added token '" + rt::visible_text(c) + "' has id " + std::to_string(i) + ", outside the vocabulary");
    if (c.empty()) continue;
    added.push_back({c, static_cast<int32_t>(i)});
    ids[c] = static_cast<int32_t>(i);
    (*special)[static_cast<size_t>(i)] = t.value("special", false);
    out_bytes[static_cast<size_t>(i)] = c;
  }
  std::stable_sort(added.begin(), added.end(), [](const auto& a, const auto& b) { return a.content.size() > b.content.size(); });
}

// TemplateProcessing's `single` (a special token before or after the text), ByteLevel (no ids),
// or a Sequence of them.
void HfTokenizer::Impl::read_post(const nlohmann::json& p) {
  if (p.is_null()) return;
  const std::string type = p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "?";
  if (type == "ByteLevel") return;
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array() && p["processors"].size() <= 8) {
    for (const auto& q : p["processors"]) read_post(q);
    return;
  }
  if (type != "TemplateProcessing")
    throw rt::Error(path + ": the post-processor " + rt::visible_text(type) + " is not one loom-serve implements (TemplateProcessing, ByteLevel, Sequence)");
  if (!p.contains("single") || !p["single"].is_array()) throw rt::Error(path + ": TemplateProcessing has no single template");
  bool seen_text = false;
  for (const auto& item : p["single"]) {
    if (item.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") || !item["SpecialToken"]["id"].is_string())
      throw rt::Error(path + ": TemplateProcessing's single holds an item that is neither Sequence nor SpecialToken");
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    std::vector<int32_t> toks;
    const auto& sp = p.contains("special_tokens") ? p["special_tokens"] : nlohmann::json();
    if (sp.is_object() && sp.contains(name) && sp[name].contains("ids") && sp[name]["ids"].is_array()) {
      for (const auto& v : sp[name]["ids"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= static_cast<int64_t>(out_bytes.size()))
          throw rt::Error(path + ": TemplateProcessing's special token '" + rt::visible_text(name) + "' has an id outside the vocabulary");
        toks.push_back(static_cast<int32_t>(v.get<int64_t>()));
      }
    } else {
      toks.push_back(id(name, "TemplateProcessing"));
    }
    auto& side = seen_text ? suffix : prefix;
    side.insert(side.end(), toks.begin(), toks.end());
  }
}

HfTokenizer::HfTokenizer(const std::string& path, int vocab) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  const nlohmann::json j = rt::parse_json_text(read_small(path), path);
  try {
    if (!j.is_object()) throw rt::Error(path + ": must be a JSON object");
    m.out_bytes.assign(static_cast<size_t>(vocab), std::string());
    std::vector<bool> special(static_cast<size_t>(vocab), false);
    m.read_added(j.contains("added_tokens") ? j["added_tokens"] : nlohmann::json(), vocab, &special);
    m.read_model(j.contains("model") ? j["model"] : nlohmann::json(), vocab);
    m.normalizer = make_normalizer(j.contains("normalizer") ? j["normalizer"] : nlohmann::json(), path + ": normalizer");
    m.pre = make_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json(), path + ": pre_tokenizer");
    m.decoder = make_decoder(j.contains("decoder") ? j["decoder"] : nlohmann::json(), path + ": decoder");
    m.read_post(j.contains("post_processor") ? j["post_processor"] : nlohmann::json());
    if (j.contains("decoder") && j["decoder"].is_object()) {
      const auto& d = j["decoder"];
      for (const auto& step : d.value("type", std::string()) == "Sequence" && d.contains("decoders") ? d["decoders"] : nlohmann::json::array({d}))
        if (step.is_object() && step.value("type", std::string()) == "Strip" && step.value("start", 0) == 1) m.strip = step.value("content", std::string(" "));
    }
    m.byte_level = m.pre && m.pre->byte_level();
    for (int b = 0; b < 256; ++b) {
      auto it = m.ids.find(m.byte_level ? byte_char(static_cast<unsigned char>(b)) : m.byte_fallback ? "<0x" + std::string(1, "0123456789ABCDEF"[b >> 4]) + "0123456789ABCDEF"[b & 15] + ">" : "");
      m.byte_ids[b] = it == m.ids.end() ? -1 : it->second;
      if ((m.byte_level || m.byte_fallback) && m.byte_ids[b] < 0)
        throw rt::Error(path + ": byte " + std::to_string(b) + " has no token (a byte-level or byte-fallback BPE needs all 256)");
    }
    for (const auto& t : m.ids) {
      const size_t i = static_cast<size_t>(t.second);
      if (!special[i]) m.out_bytes[i] = m.decoder ? m.decoder->run(t.first) : t.first;  // added tokens too, as tokenizers decodes
      if (special[i]) m.specials[t.second] = m.out_bytes[i], m.out_bytes[i].clear();
      m.longest = std::max(m.longest, m.out_bytes[i].size());
    }
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(path + ": a field of the wrong type: " + e.what());
  }
}

HfTokenizer::~HfTokenizer() = default;

// The piece's first symbols: its bytes (byte-level), else its characters, those outside the
// vocabulary as <0xXX> byte tokens (byte_fallback) or the unknown token.
void HfTokenizer::Impl::symbols(const std::string& piece, std::vector<int32_t>& out) const {
  if (byte_level) {
    for (unsigned char c : piece) out.push_back(byte_ids[c]);
    return;
  }
  bool last_unk = false;
  for (size_t i = 0; i < piece.size();) {
    const unsigned char c = static_cast<unsigned char>(piece[i]);
    const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    const std::string ch = piece.substr(i, n);
    i += n;
    auto it = ids.find(ch);
    if (it != ids.end()) {
      out.push_back(it->second), last_unk = false;
    } else if (byte_fallback) {
      for (unsigned char b : ch) out.push_back(byte_ids[b]);
      last_unk = false;
    } else if (unk >= 0) {
      if (!(fuse_unk && last_unk)) out.push_back(unk);
      last_unk = true;
    }
  }
}

// Merges by rank, lowest first and leftmost among equals, over a heap of adjacent pairs.
void HfTokenizer::Impl::bpe(const std::string& piece, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    std::string whole;
    if (byte_level)
      for (unsigned char c : piece) whole += byte_char(c);
    auto it = ids.find(byte_level ? whole : piece);
    if (it != ids.end()) return out.push_back(it->second);
  }
  std::vector<int32_t> sym;
  symbols(piece, sym);
  const int n = static_cast<int>(sym.size());
  std::vector<int> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n)), version(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1, prev[static_cast<size_t>(i)] = i - 1;
  struct Pair {
    int rank, left, right, lv, rv;
    int32_t result;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
  auto offer = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const uint64_t key = static_cast<uint64_t>(static_cast<uint32_t>(sym[static_cast<size_t>(l)])) << 32 | static_cast<uint32_t>(sym[static_cast<size_t>(r)]);
    auto it = merges.find(key);
    if (it != merges.end()) heap.push({it->second.first, l, r, version[static_cast<size_t>(l)], version[static_cast<size_t>(r)], it->second.second});
  };
  for (int i = 0; i + 1 < n; ++i) offer(i, i + 1);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    const size_t l = static_cast<size_t>(p.left), r = static_cast<size_t>(p.right);
    if (version[l] != p.lv || version[r] != p.rv || next[l] != p.right) continue;  // merged away since
    sym[l] = p.result;
    ++version[l];
    version[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = p.left;
    offer(prev[l], p.left);
    offer(p.left, next[l]);
  }
  for (int i = n ? 0 : -1; i >= 0; i = next[static_cast<size_t>(i)]) out.push_back(sym[static_cast<size_t>(i)]);
}

void HfTokenizer::Impl::encode_segment(const std::string& text, bool first, std::vector<int32_t>& out) const {
  std::vector<Piece> pieces = {{normalizer ? normalizer->run(text) : text, first}};
  if (pre) pre->run(pieces);
  for (const Piece& p : pieces) {
    if (p.text.empty()) continue;
    {
      std::lock_guard<std::mutex> lk(mu);
      auto it = cache.find(p.text);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    std::vector<int32_t> ids_of;
    bpe(p.text, ids_of);
    out.insert(out.end(), ids_of.begin(), ids_of.end());
    std::lock_guard<std::mutex> lk(mu);
    if (cache.size() < 100000 && p.text.size() < 64) cache.emplace(p.text, std::move(ids_of));
  }
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text) const {
  return encode_around_specials(text, impl_->added, [this](const std::string& s, bool first, std::vector<int32_t>& out) {
    impl_->encode_segment(s, first, out);
  });
}

std::vector<int32_t> HfTokenizer::encode_with_specials(const std::string& text) const {
  std::vector<int32_t> out = impl_->prefix, body = encode(text);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
  return out;
}

std::string HfTokenizer::decode(int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= impl_->out_bytes.size()) return "";
  return impl_->out_bytes[static_cast<size_t>(token)];
}

std::string HfTokenizer::decode_text(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids) s += decode(id);
  if (!impl_->strip.empty() && s.compare(0, impl_->strip.size(), impl_->strip) == 0) s.erase(0, impl_->strip.size());
  return s;
}

size_t HfTokenizer::max_token_bytes() const { return impl_->longest; }

std::string HfTokenizer::special_text(int32_t token) const {
  auto it = impl_->specials.find(token);
  return it == impl_->specials.end() ? std::string() : it->second;
}

int32_t HfTokenizer::id_of(const std::string& token) const {
  auto it = impl_->ids.find(token);
  return it == impl_->ids.end() ? -1 : it->second;
}

}  // namespace loom::serve::llm
