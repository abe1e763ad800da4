// kserve_json_scan.cpp — the common KServe v2 infer request read in one pass, its "data" arrays
// decoded straight into the tensors' bytes (a 32 x 256 float input: 3.8 ms through a JSON DOM,
// a few hundred microseconds here). It only ever accepts: anything it does not take as it is
// (an escape in a string, a member it does not know, a duplicate, a number out of its
// datatype's range, malformed JSON) gives up, and the strict decoder (kserve_json.cpp) reads the
// request instead, with its error messages; what the scanner accepts, that decoder reads alike.
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/kserve_json.hpp"

namespace loom::serve {

namespace {

struct GiveUp {};

// One number of a data array, before its datatype is known.
struct Num {
  double d;
  int64_t i;
  bool integer, negative, boolean;  // boolean: true or false, in i
};

class Scanner {
 public:
  Scanner(const char* p, const char* end) : p_(p), end_(end) {}

  InferRequest request() {
    InferRequest r;
    bool seen_id = false, seen_inputs = false, seen_outputs = false, seen_params = false;
    object(1, [&](const std::string& key) {
      if (key == "id") once(seen_id), r.id = string(), r.has_id = true;
      else if (key == "inputs") once(seen_inputs), array(2, [&] { r.inputs.push_back(input()); });
      else if (key == "outputs") once(seen_outputs), array(2, [&] { output(r); });
      else if (key == "parameters") once(seen_params), request_parameters(r);
      else throw GiveUp{};
    });
    if (!seen_inputs) throw GiveUp{};
    space();
    if (p_ != end_) throw GiveUp{};
    return r;
  }

 private:
  const char* p_;
  const char* end_;
  std::vector<Num> pending_;

  static void once(bool& seen) {
    if (seen) throw GiveUp{};
    seen = true;
  }
  void space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  void expect(char c) {
    space();
    if (p_ >= end_ || *p_ != c) throw GiveUp{};
    ++p_;
  }
  bool peek(char c) {
    space();
    return p_ < end_ && *p_ == c;
  }
  // A string of printable ASCII without escapes (anything else: the strict decoder).
  std::string string() {
    expect('"');
    const char* s = p_;
    while (p_ < end_ && *p_ != '"') {
      if (*p_ == '\\' || static_cast<unsigned char>(*p_) < 0x20 || static_cast<unsigned char>(*p_) > 0x7e) throw GiveUp{};
      ++p_;
    }
    if (p_ >= end_) throw GiveUp{};
    return std::string(s, p_++);
  }
  template <class F>
  void object(int depth, F&& member) {
    if (depth > kMaxJsonDepth) throw GiveUp{};
    expect('{');
    if (peek('}')) return void(++p_);
    std::vector<std::string> keys;
    do {
      std::string key = string();
      for (const auto& k : keys)
        if (k == key) throw GiveUp{};
      keys.push_back(key);
      expect(':');
      member(key);
    } while (comma('}'));
  }
  template <class F>
  void array(int depth, F&& element) {
    if (depth > kMaxJsonDepth) throw GiveUp{};
    expect('[');
    if (peek(']')) return void(++p_);
    do element(); while (comma(']'));
  }
  bool comma(char close) {
    space();
    if (p_ < end_ && *p_ == ',') return ++p_, true;
    expect(close);
    return false;
  }
  bool boolean() {
    space();
    if (end_ - p_ >= 4 && std::memcmp(p_, "true", 4) == 0) return p_ += 4, true;
    if (end_ - p_ >= 5 && std::memcmp(p_, "false", 5) == 0) return p_ += 5, false;
    throw GiveUp{};
  }
  // A JSON number, by JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  Num number() {
    space();
    const char* s = p_;
    Num n{0, 0, true, false, false};
    if (p_ < end_ && *p_ == '-') ++p_, n.negative = true;
    if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_))) throw GiveUp{};
    if (*p_ == '0') ++p_;
    else while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
    if (p_ < end_ && *p_ == '.') {
      n.integer = false;
      if (++p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_))) throw GiveUp{};
      while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      n.integer = false;
      if (++p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ >= end_ || !std::isdigit(static_cast<unsigned char>(*p_))) throw GiveUp{};
      while (p_ < end_ && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
    }
    if (std::from_chars(s, p_, n.d).ec != std::errc()) throw GiveUp{};
    if (n.integer && std::from_chars(s, p_, n.i).ec != std::errc()) throw GiveUp{};  // past int64: strict decoder
    if (n.integer) n.d = static_cast<double>(n.i);  // as JSON readers take an integer: -0 is 0
    return n;
  }

  void request_parameters(InferRequest& r) {
    object(2, [&](const std::string& key) {
      if (key != "binary_data_output") throw GiveUp{};
      r.binary_out = boolean();
    });
  }

  // An output by name (one with parameters: the strict decoder).
  void output(InferRequest& r) {
    bool named = false;
    object(3, [&](const std::string& key) {
      if (key != "name") throw GiveUp{};
      once(named), r.outputs.push_back(string());
    });
    if (!named) throw GiveUp{};
  }

  TensorIn input() {
    TensorIn t;
    bool named = false, typed = false, shaped = false, data = false;
    object(3, [&](const std::string& key) {
      if (key == "name") once(named), t.name = string();
      else if (key == "datatype") once(typed), t.datatype = string();
      else if (key == "shape") once(shaped), shape(t);
      else if (key == "data") once(data), values(t, typed);
      else throw GiveUp{};
    });
    if (!named || !typed || !shaped || !data) throw GiveUp{};
    if (!pending_.empty()) convert(t);  // data came before its datatype
    return t;
  }

  void shape(TensorIn& t) {
    array(4, [&] {
      const Num n = number();
      if (!n.integer || t.shape.size() >= 8) throw GiveUp{};
      t.shape.push_back(n.i);
    });
  }

  // The data array (nested as the client likes): straight into bytes when the datatype is known.
  void values(TensorIn& t, bool typed) {
    pending_.clear();
    const bool direct = typed && t.datatype == "FP32";
    elements(4, [&] {
      space();
      Num n{0, 0, true, false, false};
      if (p_ < end_ && (*p_ == 't' || *p_ == 'f')) n.boolean = true, n.i = boolean();
      else n = number();
      if (direct) put_fp32(t, n);
      else pending_.push_back(n);
    });
    if (typed) convert(t);
  }
  template <class F>
  void elements(int depth, F&& scalar) {
    array(depth, [&] {
      if (peek('[')) elements(depth + 1, scalar);
      else scalar();
    });
  }

  static void put_fp32(TensorIn& t, const Num& n) {
    if (n.boolean || !std::isfinite(n.d) || std::fabs(n.d) > 3.4028234663852886e38) throw GiveUp{};
    const float f = static_cast<float>(n.d);
    char b[4];
    std::memcpy(b, &f, 4);
    t.data.append(b, 4);
  }
  template <class T>
  static void put_int(TensorIn& t, const Num& n, int64_t lo, int64_t hi) {
    if (n.boolean || !n.integer || n.i < lo || n.i > hi) throw GiveUp{};
    const T v = static_cast<T>(n.i);
    t.data.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void convert(TensorIn& t) {
    if (pending_.empty()) return;  // written already, or no elements (any datatype, as the strict decoder)
    t.data.clear();
    for (Num n : pending_) {
      if (t.datatype == "FP32") put_fp32(t, n);
      else if (t.datatype == "INT64") put_int<int64_t>(t, n, INT64_MIN, INT64_MAX);
      else if (t.datatype == "INT32") put_int<int32_t>(t, n, INT32_MIN, INT32_MAX);
      else if (t.datatype == "INT8") put_int<int8_t>(t, n, -128, 127);
      else if (t.datatype == "UINT8") put_int<uint8_t>(t, n, n.negative ? 1 : 0, 255);
      else if (t.datatype == "BOOL") n.boolean = false, put_int<uint8_t>(t, n, n.negative ? 1 : 0, 1);
      else throw GiveUp{};
    }
    pending_.clear();
  }
};

}  // namespace

std::optional<InferRequest> scan_infer_request(const char* begin, const char* end) {
  try {
    return Scanner(begin, end).request();
  } catch (const GiveUp&) {
    return std::nullopt;
  }
}

}  // namespace loom::serve
