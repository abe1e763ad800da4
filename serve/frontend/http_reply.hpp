// http_reply.hpp — what an HTTP endpoint answers (a Reply: status, body, headers, or a stream),
// shared by the KServe routes (http_routes.cpp), the language-model routes (llm_routes.cpp) and
// the transport that writes it (http.cpp).
#pragma once

#include <boost/beast/http.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

namespace loom::serve {

namespace http = boost::beast::http;

struct Reply {
  Status kind = Status::kOk;  // what the metrics count
  http::status status = http::status::ok;
  std::string body, content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  // Set for a streamed answer (server-sent events): called with a function that sends one
  // chunk (false once the client is gone); the body is not used.
  std::function<void(const std::function<bool(const std::string&)>&)> stream;
  // Set for an answer that takes long to make (a generation answered whole): called before the
  // answer is written, with a probe that says whether the client is still connected. It fills
  // the reply and returns true, or returns false once the client left (its work cancelled:
  // nothing is written).
  std::function<bool(Reply&, const std::function<bool()>& client_here)> finish;
};

// The protocol's error answer ({"error": msg}) for `s`, or HTTP `code` when given. Never throws
// for what a client sent: bytes that are not UTF-8 are replaced.
Reply error_reply(Status s, const std::string& msg, int code = 0);

// 405 naming the method the endpoint takes.
Reply method_not_allowed(const char* allowed);

}  // namespace loom::serve
