// tokenizer.cpp — the byte-level tokenizer of Loom's gpt, and GPT-2's byte-level BPE.
#include "tokenizer.hpp"

#include <locale.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cwctype>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "core/status.hpp"
#include "tokenizer_steps.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/json.hpp"
#include "loom/rt/io/text.hpp"

namespace loom::serve::llm {

ByteTokenizer::ByteTokenizer(std::vector<int> bytes, int vocab, const std::string& path) : bytes_(std::move(bytes)) {
  if (static_cast<int>(bytes_.size()) != vocab)
    throw rt::Error(path + ": model.config's vocab_bytes holds " + std::to_string(bytes_.size()) + " bytes for a vocabulary of " +
                    std::to_string(vocab));
  std::fill(std::begin(token_of_), std::end(token_of_), -1);
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const int b = bytes_[i];
    if (b < 0 || b > 255 || token_of_[b] >= 0) throw rt::Error(path + ": model.config's vocab_bytes are not distinct bytes");
    token_of_[b] = static_cast<int>(i);
  }
}

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char ch : text) {
    if (token_of_[ch] < 0)
      throw ServeError(Status::kInput, "the prompt holds byte " + std::to_string(ch) + ", not in the model's vocabulary");
    ids.push_back(token_of_[ch]);
  }
  return ids;
}

std::string ByteTokenizer::decode(int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= bytes_.size()) return "";
  return std::string(1, static_cast<char>(bytes_[static_cast<size_t>(token)]));
}

}  // namespace loom::serve::llm

// ---------------------------------------------------------------- GPT-2's byte-level BPE

namespace loom::serve::llm {

namespace {

constexpr size_t kMaxTokenizerFile = size_t{64} << 20;

}  // namespace

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::string read_small(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw rt::Error(path + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > kMaxTokenizerFile) throw rt::Error(path + ": larger than 64 MiB");
  return ss.str();
}

namespace {

// Code points of valid UTF-8 (a JSON string's); an invalid byte stands for itself.
std::vector<uint32_t> code_points(const std::string& s, std::vector<size_t>* starts) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    bool ok = i + static_cast<size_t>(n) <= s.size();
    for (int k = 1; ok && k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (d & 0xC0) == 0x80;
      cp = cp << 6 | (d & 0x3F);
    }
    starts->push_back(i);
    out.push_back(ok ? cp : c);
    i += ok ? static_cast<size_t>(n) : 1;
  }
  starts->push_back(s.size());
  return out;
}

#ifdef LOOM_HAVE_PCRE2
// GPT-2's split, its own pattern on PCRE2 with Unicode's classes (as the tokenizers library runs it).
std::vector<std::string> pretokenize(const std::string& text) {
  static const Pattern gpt2(kGpt2Pattern, true, "GPT-2's split pattern");
  std::vector<std::string> out;
  size_t at = 0;
  for (const auto& m : gpt2.find_all(text)) {
    if (m.first > at) out.push_back(text.substr(at, m.first - at));
    out.push_back(text.substr(m.first, m.second - m.first));
    at = m.second;
  }
  if (at < text.size()) out.push_back(text.substr(at));
  return out;
}
#else
// Without PCRE2: Unicode classes of GPT-2's pattern approximated by glibc's C.UTF-8 tables: \p{L} as iswalpha, \p{N} as
// a digit or an alphanumeric that is not a letter, \s as iswspace.
locale_t utf8_locale() {
  static locale_t l = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return l;
}
bool is_letter(uint32_t c) { return c < 0x80 ? std::isalpha(static_cast<int>(c)) != 0 : iswalpha_l(static_cast<wint_t>(c), utf8_locale()) != 0; }
bool is_number(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return iswdigit_l(static_cast<wint_t>(c), utf8_locale()) || (iswalnum_l(static_cast<wint_t>(c), utf8_locale()) && !is_letter(c));
}
bool is_space(uint32_t c) { return c < 0x80 ? std::isspace(static_cast<int>(c)) != 0 : iswspace_l(static_cast<wint_t>(c), utf8_locale()) != 0; }

// GPT-2's split: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::vector<std::string> pretokenize(const std::string& text) {
  std::vector<size_t> at;
  const std::vector<uint32_t> cp = code_points(text, &at);
  const size_t n = cp.size();
  std::vector<std::string> out;
  auto emit = [&](size_t a, size_t b) { out.push_back(text.substr(at[a], at[b] - at[a])); };
  for (size_t i = 0; i < n;) {
    if (cp[i] == '\'' && i + 1 < n) {
      size_t len = 0;
      for (const char* c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const size_t l = std::strlen(c);
        bool m = true;
        for (size_t k = 0; m && k < l; ++k) m = i + 1 + k < n && cp[i + 1 + k] == static_cast<uint32_t>(c[k]);
        if (m) {
          len = l;
          break;
        }
      }
      if (len) {
        emit(i, i + 1 + len);
        i += 1 + len;
        continue;
      }
    }
    const size_t j = i + (cp[i] == ' ' && i + 1 < n ? 1 : 0);
    auto run = [&](bool (*cls)(uint32_t)) {
      size_t k = j;
      while (k < n && cls(cp[k])) ++k;
      emit(i, k);
      i = k;
    };
    if (j < n && is_letter(cp[j])) {
      run(is_letter);
    } else if (j < n && is_number(cp[j])) {
      run(is_number);
    } else if (j < n && !is_space(cp[j])) {
      run([](uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); });
    } else {  // whitespace: a run not followed by a non-space, or else all but its last
      size_t k = i;
      while (k < n && is_space(cp[k])) ++k;
      if (k < n && k - i > 1) --k;
      emit(i, k);
      i = k;
    }
  }
  return out;
}
#endif

}  // namespace

struct BpeTokenizer::Impl {
  std::string byte_char[256];                      // byte -> its printable stand-in (UTF-8)
  std::unordered_map<uint32_t, unsigned char> char_byte;  // and back, by code point
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> token_bytes;            // id -> the bytes it stands for
  size_t longest = 1;                              // bytes of the longest token
  std::unordered_map<std::string, int> ranks;      // "a b" -> merge rank
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;  // piece -> ids
  std::vector<SpecialToken> specials;  // matched in text before BPE, longest first

  void add_special(const std::string& content, int64_t id, const std::string& where);
  std::vector<int32_t> encode_plain(const std::string& text) const;

  std::vector<int32_t> bpe(const std::string& piece) const;
};

BpeTokenizer::BpeTokenizer(const std::string& vocab_json, const std::string& merges_txt, int vocab) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  // bytes_to_unicode(): printable bytes stand for themselves, the others for 256 + n.
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t c = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + next++);
    m.byte_char[b] = utf8_of(c);
    m.char_byte[c] = static_cast<unsigned char>(b);
  }
  nlohmann::json v;
  try {
    v = rt::parse_json_text(read_small(vocab_json), vocab_json);
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(vocab_json + ": not JSON: " + e.what());
  }
  if (!v.is_object()) throw rt::Error(vocab_json + ": must map each token to its id");
  m.token_bytes.assign(static_cast<size_t>(vocab), std::string());
  std::vector<bool> seen(static_cast<size_t>(vocab), false);
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= vocab)
      throw rt::Error(vocab_json + ": token '" + rt::visible_text(it.key()) + "' has id " + rt::visible_text(it->dump()) +
                      ", outside the model's vocabulary of " + std::to_string(vocab));
    const int32_t id = static_cast<int32_t>(it->get<int64_t>());
    if (seen[static_cast<size_t>(id)]) throw rt::Error(vocab_json + ": id " + std::to_string(id) + " is given to two tokens");
    seen[static_cast<size_t>(id)] = true;
    std::vector<size_t> at;
    std::string bytes;
    for (uint32_t c : code_points(it.key(), &at)) {
      auto b = m.char_byte.find(c);
      if (b == m.char_byte.end()) {
        bytes.clear();
        break;
      }
      bytes += static_cast<char>(b->second);
    }
    // Special tokens (<|endoftext|>) are not byte strings: they decode to nothing.
    m.longest = std::max(m.longest, bytes.size());
    m.token_bytes[static_cast<size_t>(id)] = bytes;
    m.ids[it.key()] = id;
  }
  for (int b = 0; b < 256; ++b)
    if (!m.ids.count(m.byte_char[b])) throw rt::Error(vocab_json + ": byte " + std::to_string(b) + " has no token (a byte-level BPE needs all 256)");
  std::istringstream lines(read_small(merges_txt));
  std::string line;
  int lineno = 0, rank = 0;
  while (std::getline(lines, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      throw rt::Error(merges_txt + ":" + std::to_string(lineno) + ": a merge is two tokens separated by one space");
    const std::string a = line.substr(0, sp), b = line.substr(sp + 1);
    for (const std::string& t : {a, b, a + b})
      if (!m.ids.count(t))
        throw rt::Error(merges_txt + ":" + std::to_string(lineno) + ": '" + rt::visible_text(t) + "' is not in " + vocab_json + " (the files disagree)");
    m.ranks.emplace(line, rank++);
  }
}

BpeTokenizer::~BpeTokenizer() = default;

// The merges of one piece by rank, lowest first and left to right among equals, as GPT-2's
// encoder.py (a merge's result only enters merges of higher rank, so one pass over a heap of the
// adjacent pairs gives its answer): O(n log n) for a piece of n bytes, where re-scanning the
// pairs after each merge was O(n^2) and a long run of letters could hold a thread for minutes.
std::vector<int32_t> BpeTokenizer::Impl::bpe(const std::string& piece) const {
  const int n = static_cast<int>(piece.size());
  std::vector<std::string> sym(static_cast<size_t>(n));
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n)), version(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    sym[static_cast<size_t>(i)] = byte_char[static_cast<unsigned char>(piece[static_cast<size_t>(i)])];
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Pair {
    int rank, left, right, lv, rv;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<Pair>> heap;
  auto offer = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    auto it = ranks.find(sym[static_cast<size_t>(l)] + " " + sym[static_cast<size_t>(r)]);
    if (it != ranks.end()) heap.push({it->second, l, r, version[static_cast<size_t>(l)], version[static_cast<size_t>(r)]});
  };
  for (int i = 0; i + 1 < n; ++i) offer(i, i + 1);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    const size_t l = static_cast<size_t>(p.left), r = static_cast<size_t>(p.right);
    if (version[l] != p.lv || version[r] != p.rv || next[l] != p.right) continue;  // merged away since
    sym[l] += sym[r];
    ++version[l];
    version[r] = -1;  // gone
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = p.left;
    offer(prev[l], p.left);
    offer(p.left, next[l]);
  }
  std::vector<int32_t> out;
  for (int i = 0; i >= 0 && i < n; i = next[static_cast<size_t>(i)])
    out.push_back(ids.at(sym[static_cast<size_t>(i)]));  // every merge result and byte is a token (checked at load)
  return out;
}

void BpeTokenizer::Impl::add_special(const std::string& content, int64_t id, const std::string& where) {
  if (content.empty()) return;
  if (id < 0 || static_cast<uint64_t>(id) >= token_bytes.size())  // whole: 2^32 + 3 is not 3
    throw rt::Error(where + ": special token '" + rt::visible_text(content) + "' has id " + std::to_string(id) + ", outside the vocabulary");
  for (const auto& s : specials)
    if (s.content == content) return;
  specials.push_back({content, static_cast<int32_t>(id)});
  std::stable_sort(specials.begin(), specials.end(), [](const auto& a, const auto& b) { return a.content.size() > b.content.size(); });
}

void BpeTokenizer::read_special_tokens(const std::string& folder) {
  Impl& m = *impl_;
  auto read = [](const std::string& path, nlohmann::json* out) {
    if (access(path.c_str(), F_OK) != 0) return false;
    try {
      *out = rt::parse_json_text(read_small(path), path);
    } catch (const nlohmann::json::exception& e) {
      throw rt::Error(path + ": not JSON: " + e.what());
    }
    return out->is_object();
  };
  nlohmann::json tj, cfg;
  const std::string tj_path = folder + "/tokenizer.json", cfg_path = folder + "/tokenizer_config.json";
  const bool have_tj = read(tj_path, &tj), have_cfg = read(cfg_path, &cfg);
  if (have_tj && tj.contains("added_tokens") && tj["added_tokens"].is_array())
    for (const auto& t : tj["added_tokens"])
      if (t.is_object() && t.contains("id") && t["id"].is_number_integer() && t.contains("content") && t["content"].is_string())
        m.add_special(t["content"].get<std::string>(), t["id"].is_number_unsigned() && t["id"].get<uint64_t>() > INT64_MAX ? -1 : t["id"].get<int64_t>(), tj_path);
  if (have_cfg && cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object())
    for (auto it = cfg["added_tokens_decoder"].begin(); it != cfg["added_tokens_decoder"].end(); ++it)
      if (it->is_object() && it->contains("content") && (*it)["content"].is_string() && it.key().find_first_not_of("0123456789") == std::string::npos &&
          !it.key().empty() && it.key().size() < 19)
        m.add_special((*it)["content"].get<std::string>(), std::stoll(it.key()), cfg_path);
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    if (!have_cfg || !cfg.contains(key)) continue;
    const auto& v = cfg[key];
    const std::string content = v.is_string() ? v.get<std::string>() : v.is_object() && v.contains("content") && v["content"].is_string() ? v["content"].get<std::string>() : "";
    if (auto id = m.ids.find(content); !content.empty() && id != m.ids.end()) m.add_special(content, id->second, cfg_path);
  }
  if (!have_tj && !have_cfg)
    if (auto id = m.ids.find("<|endoftext|>"); id != m.ids.end()) m.add_special("<|endoftext|>", id->second, folder);  // GPT-2's
}

std::vector<int32_t> encode_around_specials(const std::string& text, const std::vector<SpecialToken>& specials,
                                            const std::function<void(const std::string&, bool, std::vector<int32_t>&)>& plain) {
  std::vector<int32_t> out;
  // Where each special token next occurs at or after `from`: found again only once passed, so
  // each one's search walks the text once (a rescan of the rest per match was quadratic).
  std::vector<size_t> next(specials.size(), 0);
  std::vector<bool> stale(specials.size(), true);
  size_t from = 0;
  while (from < text.size()) {
    size_t at = std::string::npos;
    const SpecialToken* hit = nullptr;
    for (size_t k = 0; k < specials.size(); ++k) {  // the earliest, and the longest there (they are longest first)
      if (stale[k] || (next[k] != std::string::npos && next[k] < from)) next[k] = text.find(specials[k].content, from), stale[k] = false;
      if (next[k] < at) at = next[k], hit = &specials[k];
    }
    if (at != from) plain(text.substr(from, at == std::string::npos ? std::string::npos : at - from), from == 0, out);
    if (!hit) break;
    out.push_back(hit->id);
    from = at + hit->content.size();
  }
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  if (impl_->specials.empty()) return impl_->encode_plain(text);
  return encode_around_specials(text, impl_->specials, [this](const std::string& s, bool, std::vector<int32_t>& out) {
    const std::vector<int32_t> ids = impl_->encode_plain(s);
    out.insert(out.end(), ids.begin(), ids.end());
  });
}

std::vector<int32_t> BpeTokenizer::Impl::encode_plain(const std::string& text) const {
  std::vector<int32_t> out;
  for (const std::string& piece : pretokenize(text)) {
    {
      std::lock_guard<std::mutex> lk(mu);
      auto it = cache.find(piece);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    std::vector<int32_t> ids = bpe(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lk(mu);
    if (cache.size() < 100000 && piece.size() < 64) cache.emplace(piece, std::move(ids));
  }
  return out;
}

size_t BpeTokenizer::max_token_bytes() const { return impl_->longest; }

std::string BpeTokenizer::decode(int32_t token) const {
  if (token < 0 || static_cast<size_t>(token) >= impl_->token_bytes.size()) return "";
  return impl_->token_bytes[static_cast<size_t>(token)];
}

}  // namespace loom::serve::llm
