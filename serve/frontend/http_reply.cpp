// http_reply.cpp — the protocol's error answer and 405.
#include "frontend/http_reply.hpp"

#include "core/kserve_json.hpp"

namespace loom::serve {

// Never throws for what a client sent: dump_json replaces bytes that are not UTF-8.
Reply error_reply(Status s, const std::string& msg, int code) {
  Reply r;
  r.kind = s;
  r.status = static_cast<http::status>(code ? code : http_status(s));
  r.body = dump_json({{"error", msg}});
  if (s == Status::kUnavailable) r.headers.emplace_back("Retry-After", "1");
  if (s == Status::kUnauthorized) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

Reply method_not_allowed(const char* allowed) {
  Reply r = error_reply(Status::kInput, std::string("use ") + allowed, 405);
  r.headers.emplace_back("Allow", allowed);
  return r;
}

}  // namespace loom::serve
