// http_decode.cpp — Beast's request parser with Loom's limits, and parse errors as answers.
#include "frontend/http_decode.hpp"

#include <cstring>

#include "core/kserve_json.hpp"
#include "frontend/generate_json.hpp"

namespace loom::serve {

namespace http = boost::beast::http;

void limit_parser(HttpParser& p, size_t max_body) {
  p.body_limit(max_body);
  p.header_limit(kHeaderLimit);
}

ParseFailure parse_failure(const boost::beast::error_code& ec, size_t max_body) {
  if (ec == http::error::body_limit)
    return {Status::kTooLarge, 413, "request body exceeds " + std::to_string(max_body) + " bytes"};
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow)
    return {Status::kTooLarge, 431,
            "request headers, a chunk extension or a trailer exceed " + std::to_string(kHeaderLimit / 1024) + " KiB"};
  return {Status::kInput, 400, "malformed HTTP request: " + ec.message()};
}

Status decode_http_request(const std::string& bytes, const InputSpec& spec, size_t max_body, int max_rows) {
  HttpParser parser;
  limit_parser(parser, max_body);
  boost::beast::flat_buffer buf(kReadBufferLimit);
  boost::beast::error_code ec;
  size_t at = 0;
  while (!parser.is_done()) {  // as reads would deliver it: up to the buffer's room at a time
    if (buf.size() > 0) {
      const size_t used = parser.put(buf.data(), ec);
      buf.consume(used);
      if (ec == http::error::need_more) ec = {};
      if (ec) return parse_failure(ec, max_body).status;
      if (used > 0) continue;
    }
    const size_t room = buf.max_size() - buf.size();
    if (room == 0) return parse_failure(http::error::buffer_overflow, max_body).status;
    const size_t n = std::min(room, bytes.size() - at);
    if (n == 0) return Status::kInput;  // the request ends early
    auto mb = buf.prepare(n);
    std::memcpy(mb.data(), bytes.data() + at, n);
    buf.commit(n);
    at += n;
  }
  const auto& req = parser.get();
  const boost::beast::string_view target = req.target();
  try {
    if (target.find("/generate") != boost::beast::string_view::npos) {
      parse_generate_request(req.body());
      return Status::kOk;
    }
    if (target.find("/v1/completions") != boost::beast::string_view::npos) {
      parse_completion_request(req.body());
      return Status::kOk;
    }
    if (target.find("/infer") == boost::beast::string_view::npos) return Status::kOk;
    const auto hl = req.find("Inference-Header-Content-Length");
    InferRequest r = parse_infer_request(req.body(), hl == req.end() ? "" : std::string(hl->value()));
    int rows = 0;
    decode_input(spec, r.inputs, max_rows, &rows);
    return Status::kOk;
  } catch (const loom::Error& e) {
    return e.kind();
  }
}

}  // namespace loom::serve
