// http_decode.hpp — how loom-serve reads an HTTP/1.1 request: Beast's parser with Loom's limits
// (body, header, and the buffer that holds a header, a chunk header with its extensions or a
// trailer, so none of them can grow without bound), and what each parse error answers. The
// server's connections and the fuzzer (tests/fuzz/fuzz_http.cpp) use the same functions.
#pragma once

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <string>

#include "core/status.hpp"
#include "core/tensor_in.hpp"

namespace loom::serve {

constexpr size_t kHeaderLimit = 16 * 1024;
// The read buffer: a header, a chunk header or a trailer must fit; body bytes pass through it.
constexpr size_t kReadBufferLimit = 64 * 1024;

using HttpParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

void limit_parser(HttpParser& p, size_t max_body);

// The answer to a failed parse (not a closed or timed-out connection): status, HTTP code, text.
struct ParseFailure {
  Status status;
  int http;
  std::string message;
};
ParseFailure parse_failure(const boost::beast::error_code& ec, size_t max_body);

// One request's bytes through the server's parser and limits; for an infer request, its body
// decoded into the model's rows as the server would; a generate or completions request's
// parameters checked. Returns kOk or the 4xx it would answer
// (what the fuzzer checks: never a crash, never a 5xx).
Status decode_http_request(const std::string& bytes, const InputSpec& spec, size_t max_body, int max_rows);

}  // namespace loom::serve
