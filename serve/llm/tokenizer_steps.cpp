// tokenizer_steps.cpp — tokenizer.json's normalizers, pre-tokenizers and decoders (tokenizer_steps.hpp).
#include "tokenizer_steps.hpp"

#include <functional>

#ifdef LOOM_HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include "core/status.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/text.hpp"
#include "tokenizer.hpp"

namespace loom::serve::llm {

namespace {

struct ByteChars {
  std::string of[256];
  int byte_of[512];
  ByteChars() {
    std::fill(std::begin(byte_of), std::end(byte_of), -1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const int c = printable ? b : 256 + next++;
      of[b] = utf8_of(static_cast<uint32_t>(c));
      byte_of[c] = b;
    }
  }
};
const ByteChars& byte_chars() {
  static const ByteChars t;
  return t;
}

}  // namespace

uint32_t next_cp(const std::string& s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (n == 1 || i + static_cast<size_t>(n) > s.size()) return ++i, c;
  uint32_t cp = c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
  i += static_cast<size_t>(n);
  return cp;
}

namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) out += s.substr(at, hit - at) + to;
  return out + s.substr(at);
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw rt::Error(where + ": no " + key);
  return j[key];
}
std::string str_field(const nlohmann::json& j, const char* key, const std::string& where, const char* fallback = nullptr) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return fallback;
    throw rt::Error(where + ": no " + key);
  }
  if (!j[key].is_string()) throw rt::Error(where + ": " + key + " must be a string");
  return j[key].get<std::string>();
}
bool bool_field(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw rt::Error(where + ": " + key + " must be true or false");
  return j[key].get<bool>();
}
// A step's pattern: {"String": s} or {"Regex": r}.
std::unique_ptr<Pattern> pattern_of(const nlohmann::json& j, const std::string& where, std::string* literal) {
  const auto& p = field(j, "pattern", where);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    if (literal) *literal = p["String"].get<std::string>();
    return std::make_unique<Pattern>(p["String"].get<std::string>(), false, where);
  }
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) return std::make_unique<Pattern>(p["Regex"].get<std::string>(), true, where);
  throw rt::Error(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}
std::string type_of(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) throw rt::Error(where + ": each step is an object with a type");
  return j["type"].get<std::string>();
}
const nlohmann::json& list_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& l = field(j, key, where);
  if (!l.is_array() || l.size() > 64) throw rt::Error(where + ": " + key + " must be a list of at most 64 steps");
  return l;
}

}  // namespace

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const std::string& byte_char(unsigned char b) { return byte_chars().of[b]; }
int char_byte(uint32_t cp) { return cp < 512 ? byte_chars().byte_of[cp] : -1; }

// ---------------------------------------------------------------- normalizers

namespace {

class Nfc : public Normalizer {
 public:
  explicit Nfc(const std::string& where) {
#ifndef LOOM_HAVE_ICU
    throw rt::Error(where + ": NFC, and this build of loom-serve has no ICU (configure found no libicu-dev)");
#else
    (void)where;
#endif
  }
  std::string run(const std::string& s) const override {
#ifdef LOOM_HAVE_ICU
    bool ascii = true;
    for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) return s;
    UErrorCode e = U_ZERO_ERROR;
    const UNormalizer2* nfc = unorm2_getNFCInstance(&e);
    int32_t n = 0;
    u_strFromUTF8(nullptr, 0, &n, s.data(), static_cast<int32_t>(s.size()), &e);
    if (e != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(e)) throw ServeError(Status::kInput, "the text is not UTF-8");
    e = U_ZERO_ERROR;
    std::u16string in(static_cast<size_t>(n), u'\0'), out(static_cast<size_t>(n) * 3 + 16, u'\0');
    u_strFromUTF8(reinterpret_cast<UChar*>(in.data()), n, nullptr, s.data(), static_cast<int32_t>(s.size()), &e);
    const int32_t m = unorm2_normalize(nfc, reinterpret_cast<const UChar*>(in.data()), n, reinterpret_cast<UChar*>(out.data()),
                                       static_cast<int32_t>(out.size()), &e);
    if (U_FAILURE(e)) throw ServeError(Status::kInput, "the text is not UTF-8");
    std::string r(static_cast<size_t>(m) * 3, '\0');
    int32_t len = 0;
    u_strToUTF8(r.data(), static_cast<int32_t>(r.size()), &len, reinterpret_cast<const UChar*>(out.data()), m, &e);
    if (U_FAILURE(e)) throw ServeError(Status::kInput, "the text is not UTF-8");
    r.resize(static_cast<size_t>(len));
    return r;
#else
    return s;
#endif
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  std::string run(const std::string& s) const override { return s.empty() ? s : p_ + s; }

 private:
  std::string p_;
};

class Replace : public Normalizer, public TokenDecoder {
 public:
  Replace(const nlohmann::json& j, const std::string& where) : content_(str_field(j, "content", where)) {
    pattern_ = pattern_of(j, where, nullptr);
  }
  std::string run(const std::string& s) const override {
    std::string out;
    size_t at = 0;
    for (const auto& m : pattern_->find_all(s)) out += s.substr(at, m.first - at) + content_, at = m.second;
    return out + s.substr(at);
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  std::string content_;
};

class NormalizerSequence : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> steps;
  std::string run(const std::string& s) const override {
    std::string t = s;
    for (const auto& n : steps) t = n->run(t);
    return t;
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where), w = where + " " + type;
  if (type == "NFC") return std::make_unique<Nfc>(w);
  if (type == "Prepend") return std::make_unique<Prepend>(str_field(j, "prepend", w));
  if (type == "Replace") return std::make_unique<Replace>(j, w);
  if (type == "Sequence") {
    auto seq = std::make_unique<NormalizerSequence>();
    for (const auto& s : list_field(j, "normalizers", w))
      if (auto n = make_normalizer(s, w)) seq->steps.push_back(std::move(n));
    return seq;
  }
  throw rt::Error(where + ": the normalizer " + rt::visible_text(type) + " is not one loom-serve implements (NFC, Prepend, Replace, Sequence)");
}

// ---------------------------------------------------------------- pre-tokenizers

namespace {

enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior behavior_of(const nlohmann::json& j, const std::string& where) {
  const std::string b = str_field(j, "behavior", where, "Isolated");
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  throw rt::Error(where + ": behavior " + rt::visible_text(b) + " (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous)");
}

// Splits each piece at the matches, as tokenizers' split with a delimiter behaviour.
void split_pieces(std::vector<Piece>& pieces, const std::function<std::vector<std::pair<size_t, size_t>>(const std::string&)>& find,
                  Behavior how, bool invert) {
  std::vector<Piece> out;
  for (const Piece& p : pieces) {
    std::vector<std::pair<std::pair<size_t, size_t>, bool>> seg;  // [begin, end), a match
    size_t at = 0;
    for (const auto& m : find(p.text)) {
      if (m.first > at) seg.push_back({{at, m.first}, invert});
      seg.push_back({m, !invert});
      at = m.second;
    }
    if (at < p.text.size()) seg.push_back({{at, p.text.size()}, invert});
    // tokenizers' delimiter behaviours: "the-final--countdown" is MergedWithPrevious
    // [the-, final-, -, countdown], MergedWithNext [the, -final, -, -countdown], Contiguous
    // [the, -, final, --, countdown].
    std::vector<std::pair<size_t, size_t>> parts;
    bool last_match = false, any = false;
    for (const auto& s : seg) {
      const bool match = s.second;
      const bool glue = any && ((match && how == Behavior::kMergedWithPrevious && !last_match) || (match && how == Behavior::kContiguous && last_match) ||
                                (!match && how == Behavior::kMergedWithNext && last_match));
      if (!(match && how == Behavior::kRemoved)) {
        if (glue) parts.back().second = s.first.second;
        else parts.push_back(s.first);
      }
      last_match = match, any = any || !(match && how == Behavior::kRemoved);
    }
    for (size_t i = 0; i < parts.size(); ++i)
      out.push_back({p.text.substr(parts[i].first, parts[i].second - parts[i].first), p.first && parts[i].first == 0});
  }
  pieces.swap(out);
}

class Split : public PreTokenizer {
 public:
  Split(const nlohmann::json& j, const std::string& where)
      : pattern_(pattern_of(j, where, nullptr)), how_(behavior_of(j, where)), invert_(bool_field(j, "invert", false, where)) {}
  void run(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [this](const std::string& s) { return pattern_->find_all(s); }, how_, invert_);
  }

 private:
  std::unique_ptr<Pattern> pattern_;
  Behavior how_;
  bool invert_;
};


class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(const nlohmann::json& j, const std::string& where)
      : prefix_(bool_field(j, "add_prefix_space", true, where)), regex_(bool_field(j, "use_regex", true, where)) {
    if (regex_) pattern_ = std::make_unique<Pattern>(kGpt2Pattern, true, where);
  }
  void run(std::vector<Piece>& pieces) const override {
    if (prefix_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text = " " + p.text;
    if (regex_) split_pieces(pieces, [this](const std::string& s) { return pattern_->find_all(s); }, Behavior::kIsolated, false);
  }
  bool byte_level() const override { return true; }

 private:
  bool prefix_, regex_;
  std::unique_ptr<Pattern> pattern_;
};

class Metaspace : public PreTokenizer {
 public:
  Metaspace(const nlohmann::json& j, const std::string& where) : rep_(str_field(j, "replacement", where, "\u2581")), split_(bool_field(j, "split", true, where)) {
    scheme_ = str_field(j, "prepend_scheme", where, bool_field(j, "add_prefix_space", true, where) ? "always" : "never");
    if (scheme_ != "always" && scheme_ != "first" && scheme_ != "never") throw rt::Error(where + ": prepend_scheme must be always, first or never");
  }
  void run(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces) {
      p.text = replace_all(p.text, " ", rep_);
      if ((scheme_ == "always" || (scheme_ == "first" && p.first)) && p.text.compare(0, rep_.size(), rep_) != 0) p.text = rep_ + p.text;
    }
    if (split_)
      split_pieces(pieces, [this](const std::string& s) {
        std::vector<std::pair<size_t, size_t>> m;
        for (size_t at = 0, hit; (hit = s.find(rep_, at)) != std::string::npos; at = hit + rep_.size()) m.emplace_back(hit, hit + rep_.size());
        return m;
      }, Behavior::kMergedWithNext, false);
  }

 private:
  std::string rep_, scheme_;
  bool split_;
};

class Digits : public PreTokenizer {
 public:
  Digits(const nlohmann::json& j, const std::string& where) : each_(bool_field(j, "individual_digits", false, where)) {}
  void run(std::vector<Piece>& pieces) const override {
    split_pieces(pieces, [this](const std::string& s) {
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] < '0' || s[i] > '9') continue;
        size_t k = i + 1;
        while (!each_ && k < s.size() && s[k] >= '0' && s[k] <= '9') ++k;
        m.emplace_back(i, k);
        i = k - 1;
      }
      return m;
    }, each_ ? Behavior::kIsolated : Behavior::kContiguous, false);
  }

 private:
  bool each_;
};

class PreSequence : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void run(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps) s->run(pieces);
  }
  bool byte_level() const override {
    for (const auto& s : steps)
      if (s->byte_level()) return true;
    return false;
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where), w = where + " " + type;
  if (type == "Split") return std::make_unique<Split>(j, w);
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j, w);
  if (type == "Metaspace") return std::make_unique<Metaspace>(j, w);
  if (type == "Digits") return std::make_unique<Digits>(j, w);
  if (type == "Sequence") {
    auto seq = std::make_unique<PreSequence>();
    for (const auto& s : list_field(j, "pretokenizers", w))
      if (auto p = make_pre_tokenizer(s, w)) seq->steps.push_back(std::move(p));
    return seq;
  }
  throw rt::Error(where + ": the pre-tokenizer " + rt::visible_text(type) + " is not one loom-serve implements (Split, ByteLevel, Metaspace, Digits, Sequence)");
}

// ---------------------------------------------------------------- decoders, one token at a time

namespace {

class ByteLevelDecoder : public TokenDecoder {
 public:
  std::string run(const std::string& t) const override {
    std::string out;
    for (size_t i = 0; i < t.size();) {
      const size_t at = i;
      const int b = char_byte(next_cp(t, i));
      out += b >= 0 ? std::string(1, static_cast<char>(b)) : t.substr(at, i - at);
    }
    return out;
  }
};

class MetaspaceDecoder : public TokenDecoder {
 public:
  explicit MetaspaceDecoder(std::string rep) : rep_(std::move(rep)) {}
  std::string run(const std::string& t) const override { return replace_all(t, rep_, " "); }

 private:
  std::string rep_;
};

class ByteFallbackDecoder : public TokenDecoder {
 public:
  std::string run(const std::string& t) const override {
    auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0)
      return std::string(1, static_cast<char>(hex(t[3]) * 16 + hex(t[4])));
    return t;
  }
};

class Unchanged : public TokenDecoder {  // Fuse joins tokens, which streaming does anyway
 public:
  std::string run(const std::string& t) const override { return t; }
};

class DecoderSequence : public TokenDecoder {
 public:
  std::vector<std::unique_ptr<TokenDecoder>> steps;
  std::string run(const std::string& t) const override {
    std::string s = t;
    for (const auto& d : steps) s = d->run(s);
    return s;
  }
};

}  // namespace

std::unique_ptr<TokenDecoder> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where), w = where + " " + type;
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(str_field(j, "replacement", w, "\u2581"));
  if (type == "Replace") return std::make_unique<Replace>(j, w);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<Unchanged>();
  if (type == "Strip") {
    // The leading space a Metaspace tokenizer strips from a whole text: a completion decoded
    // after its prompt keeps it (as vLLM's detokenizer does). Stripping more is not implemented.
    const int start = j.value("start", 0), stop = j.value("stop", 0);
    if (start > 1 || stop != 0) throw rt::Error(w + ": stripping more than the first character is not implemented");
    return std::make_unique<Unchanged>();
  }
  if (type == "Sequence") {
    auto seq = std::make_unique<DecoderSequence>();
    for (const auto& s : list_field(j, "decoders", w))
      if (auto d = make_decoder(s, w)) seq->steps.push_back(std::move(d));
    return seq;
  }
  throw rt::Error(where + ": the decoder " + rt::visible_text(type) + " is not one loom-serve implements (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)");
}

}  // namespace loom::serve::llm
