// kserve_json.hpp — the KServe v2 REST request body, decoded strictly: JSON parsed with a
// nesting limit, every field checked for its type (a wrong one is a 400 naming the field, never
// a 500), tensors from JSON arrays or the binary-data extension. And JSON text that never
// throws: bytes that are not UTF-8 (a client's, quoted in an error) become U+FFFD.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor_in.hpp"

namespace loom::serve {

constexpr int kMaxJsonDepth = 32;  // an inference request nests 4 levels, its data a few more

// JSON text of `j`; invalid UTF-8 in its strings is replaced, so this never throws.
std::string dump_json(const nlohmann::json& j);

// Parses [begin, end) as JSON no deeper than kMaxJsonDepth. Throws ServeError kInput. With
// `keep`, members of the top-level object not named there are skipped as they are read, never
// built: a field nobody reads costs a request no memory.
nlohmann::json parse_json(const char* begin, const char* end, const std::set<std::string>* keep = nullptr);
// The same, its objects keeping the client's key order (what a chat template sees).
nlohmann::ordered_json parse_ordered_json(const char* begin, const char* end, const std::set<std::string>* keep = nullptr);
// Whether a parse builds a member, given the keys from the top-level object down to it (a list's
// level as ""): {"tools": [{"function": {"name": ...}}]} reaches "name" as
// {"tools", "", "function", "name"}. A member declined is read but never built.
using BuildMember = std::function<bool(const std::vector<std::string>& keys)>;
nlohmann::ordered_json parse_ordered_json(const char* begin, const char* end, const BuildMember& build);

struct InferRequest {
  std::string id;
  bool has_id = false;
  std::vector<TensorIn> inputs;
  std::vector<std::string> outputs;  // the names asked for (empty: all)
  bool binary_out = false;           // binary_data_output, or an output's binary_data
};

// An infer request's body: JSON, or `header_length` bytes of JSON followed by the binary
// tensors (Inference-Header-Content-Length). Throws ServeError kInput naming the fault.
InferRequest parse_infer_request(const std::string& body, const std::string& header_length);
// The two ways parse_infer_request reads a body. The scan: the common JSON request (names,
// datatypes, shapes, data arrays, outputs by name) in one pass, its data decoded straight into
// the tensors' bytes (kserve_json_scan.cpp); nullopt for anything else, valid or not. The strict
// decoder: any request, through a JSON document, each fault named. Where the scan answers, the
// strict decoder answers the same (the HTTP fuzzer holds them to it).
std::optional<InferRequest> scan_infer_request(const char* begin, const char* end);
InferRequest parse_infer_request_strict(const std::string& body, const std::string& header_length);

// Hands on whole UTF-8 characters of a byte stream (a byte-level model emits one byte at a
// time): add() returns what is complete, flush() the rest.
class Utf8Chunker {
 public:
  std::string add(const std::string& bytes);
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace loom::serve
