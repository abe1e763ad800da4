// kserve_json.cpp — strict decoding of KServe v2 REST infer requests, and safe JSON text.
#include "core/kserve_json.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/status.hpp"
#include "loom/json_text.hpp"

namespace loom::serve {

using json = nlohmann::json;

std::string dump_json(const json& j) { return loom::json_text(j); }

namespace {

// The callback sees each value's depth as the parser reaches it: nothing deeper is built, so
// neither the parser nor whatever walks the value later can run out of stack. A member that
// `build` declines (given the parser's event) is skipped: its value is read but never built.
template <class J, class Build>
J parse_bounded(const char* begin, const char* end, Build build) {
  typename J::parser_callback_t limit = [&build](int depth, typename J::parse_event_t event, J& parsed) {
    if (depth > kMaxJsonDepth)
      throw ServeError(Status::kInput, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    return build(depth, event, parsed);
  };
  try {
    return J::parse(begin, end, limit);
  } catch (const nlohmann::json::exception& e) {
    // e.what() may quote the client's bytes; dump_json makes them safe wherever they go.
    throw ServeError(Status::kInput, std::string("malformed JSON: ") + e.what());
  }
}

// The top-level members `keep` names (all without it).
template <class J>
auto top_members(const std::set<std::string>* keep) {
  return [keep](int depth, typename J::parse_event_t event, J& parsed) {
    return !keep || depth != 1 || event != J::parse_event_t::key || keep->count(parsed.template get<std::string>()) > 0;
  };
}

}  // namespace

json parse_json(const char* begin, const char* end, const std::set<std::string>* keep) {
  return parse_bounded<json>(begin, end, top_members<json>(keep));
}

nlohmann::ordered_json parse_ordered_json(const char* begin, const char* end, const std::set<std::string>* keep) {
  return parse_bounded<nlohmann::ordered_json>(begin, end, top_members<nlohmann::ordered_json>(keep));
}

nlohmann::ordered_json parse_ordered_json(const char* begin, const char* end, const BuildMember& build) {
  using J = nlohmann::ordered_json;
  std::vector<std::string> keys;  // keys[d - 1]: the key of the member at depth d, "" in a list
  return parse_bounded<J>(begin, end, [&](int depth, J::parse_event_t event, J& parsed) {
    if (event == J::parse_event_t::array_start) {  // its elements are at depth + 1
      keys.resize(static_cast<size_t>(depth) + 1);
      keys.back().clear();
    }
    if (event != J::parse_event_t::key) return true;
    keys.resize(static_cast<size_t>(depth));
    keys.back() = parsed.get<std::string>();
    return build(keys);
  });
}

namespace {

[[noreturn]] void bad(const std::string& msg) { throw ServeError(Status::kInput, msg); }

const json* member(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// The optional "parameters" object of a request, an input or an output.
const json* parameters(const json& obj, const std::string& where) {
  const json* p = member(obj, "parameters");
  if (p && !p->is_object()) bad(where + " parameters must be a JSON object");
  return p;
}

bool flag(const json* params, const char* key, bool fallback, const std::string& where) {
  const json* v = params ? member(*params, key) : nullptr;
  if (!v) return fallback;
  if (!v->is_boolean()) bad(where + " parameter " + key + " must be true or false");
  return v->get<bool>();
}

std::string text(const json& obj, const char* key, const std::string& where) {
  const json* v = member(obj, key);
  if (!v) bad(where + " has no \"" + key + "\"");
  if (!v->is_string()) bad(where + " \"" + key + "\" must be a string");
  return v->get<std::string>();
}

std::vector<int64_t> shape_of(const json& in, const std::string& where) {
  const json* v = member(in, "shape");
  if (!v) bad(where + " has no \"shape\"");
  if (!v->is_array() || v->size() > 8) bad(where + " \"shape\" must be an array of at most 8 integers");
  std::vector<int64_t> shape;
  for (const auto& d : *v) {
    if (!d.is_number_integer()) bad(where + " \"shape\" must hold integers, not " + dump_json(d).substr(0, 40));
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

// Nested JSON arrays of numbers as little-endian bytes of `datatype` (depth bounded by the parse).
void flatten(const json& v, const std::string& datatype, std::string& out) {
  if (v.is_array()) {
    for (const auto& e : v) flatten(e, datatype, out);
    return;
  }
  if (datatype == "BOOL") {
    if (!v.is_boolean() && !(v.is_number_unsigned() && v.get<uint64_t>() <= 1)) bad("BOOL input data must be true or false");
    out.push_back(static_cast<char>(v.is_boolean() ? v.get<bool>() : v.get<uint64_t>() == 1));
    return;
  }
  if (!v.is_number()) bad("input data must hold numbers only");
  if (datatype == "FP32") {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 3.4028234663852886e38) bad("FP32 input data out of range");
    const float f = static_cast<float>(d);
    char b[4];
    std::memcpy(b, &f, 4);
    out.append(b, 4);
  } else if (datatype == "UINT8") {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > 255) bad("UINT8 input data must be integers 0-255");
    out.push_back(static_cast<char>(v.get<uint64_t>()));
  } else if (datatype == "INT64" || datatype == "INT32" || datatype == "INT8") {
    if (!v.is_number_integer()) bad(datatype + " input data must be integers");
    const bool neg = v.is_number_unsigned() ? false : v.get<int64_t>() < 0;
    if (!neg && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) bad(datatype + " input data out of range");
    const int64_t i = v.get<int64_t>();
    if (datatype == "INT64") {
      out.append(reinterpret_cast<const char*>(&i), 8);
    } else if (datatype == "INT32") {
      if (i < INT32_MIN || i > INT32_MAX) bad("INT32 input data out of range");
      const int32_t k = static_cast<int32_t>(i);
      out.append(reinterpret_cast<const char*>(&k), 4);
    } else {
      if (i < -128 || i > 127) bad("INT8 input data out of range");
      out.push_back(static_cast<char>(static_cast<int8_t>(i)));
    }
  } else {
    bad("input datatype " + datatype + " is not supported (FP32, UINT8, INT64, INT32, INT8 or BOOL)");
  }
}

size_t json_length(const std::string& body, const std::string& header_length) {
  if (header_length.empty()) return body.size();
  if (header_length.size() > 19 || header_length.find_first_not_of("0123456789") != std::string::npos)
    bad("Inference-Header-Content-Length is not a number");
  const size_t n = std::stoull(header_length);
  if (n > body.size()) bad("Inference-Header-Content-Length exceeds the body");
  return n;
}

}  // namespace

InferRequest parse_infer_request(const std::string& body, const std::string& header_length) {
  if (header_length.empty())
    if (auto fast = scan_infer_request(body.data(), body.data() + body.size())) return std::move(*fast);
  return parse_infer_request_strict(body, header_length);
}

InferRequest parse_infer_request_strict(const std::string& body, const std::string& header_length) {
  const size_t json_len = json_length(body, header_length);
  const json req = parse_json(body.data(), body.data() + json_len);
  if (!req.is_object()) bad("the request must be a JSON object");
  InferRequest r;
  if (const json* id = member(req, "id")) {
    if (!id->is_string()) bad("\"id\" must be a string");
    r.id = id->get<std::string>();
    r.has_id = true;
  }
  const json* inputs = member(req, "inputs");
  if (!inputs || !inputs->is_array()) bad("missing inputs: the request needs an \"inputs\" array");
  size_t binary_at = json_len;
  for (const auto& in : *inputs) {
    if (!in.is_object()) bad("each input must be a JSON object");
    TensorIn t;
    t.name = text(in, "name", "an input");
    const std::string where = "input " + t.name;
    t.datatype = text(in, "datatype", where);
    t.shape = shape_of(in, where);
    const json* params = parameters(in, where);
    const json* size = params ? member(*params, "binary_data_size") : nullptr;
    if (size) {
      if (!size->is_number_unsigned()) bad(where + " binary_data_size must be a non-negative integer");
      const uint64_t n = size->get<uint64_t>();
      if (n > body.size() - binary_at) bad("binary_data_size of " + t.name + " exceeds the body");
      t.data = body.substr(binary_at, n);
      binary_at += n;
    } else {
      const json* data = member(in, "data");
      if (!data) bad(where + " has no data");
      flatten(*data, t.datatype, t.data);
    }
    r.inputs.push_back(std::move(t));
  }
  if (binary_at != body.size()) bad("the body holds bytes no input claims");
  r.binary_out = flag(parameters(req, "the request's"), "binary_data_output", false, "the request's");
  if (const json* outputs = member(req, "outputs")) {
    if (!outputs->is_array()) bad("outputs must be an array");
    for (const auto& o : *outputs) {
      if (!o.is_object()) bad("each output must be a JSON object");
      r.outputs.push_back(text(o, "name", "an output"));
      r.binary_out = flag(parameters(o, "output " + r.outputs.back()), "binary_data", r.binary_out,
                          "output " + r.outputs.back());
    }
  }
  return r;
}

std::string Utf8Chunker::add(const std::string& bytes) {
  pending_ += bytes;
  // The start of the last character, and how long it must be.
  size_t i = pending_.size();
  while (i > 0 && (static_cast<unsigned char>(pending_[i - 1]) & 0xC0) == 0x80 && pending_.size() - i < 3) --i;
  if (i == 0) return flush();
  const unsigned char lead = static_cast<unsigned char>(pending_[i - 1]);
  const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (lead >= 0xC0 && lead < 0xF8 && pending_.size() - (i - 1) < need) {  // the last character is incomplete
    std::string out = pending_.substr(0, i - 1);
    pending_.erase(0, i - 1);
    return out;
  }
  return flush();
}

std::string Utf8Chunker::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace loom::serve
