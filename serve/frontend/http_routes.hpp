// http_routes.hpp — the REST front end's endpoints (http_routes.cpp) as the transport
// (http.cpp) calls them: a request in, a Reply (http_reply.hpp) out.
#pragma once

#include <string>

#include "frontend/context.hpp"
#include "frontend/http_reply.hpp"

namespace loom::serve {

// The answer to one request (token, health and metrics endpoints included); the model a
// request named, for the metrics, in *model_for_metrics.
Reply route(Context& ctx, const http::request<http::string_body>& req, std::string* model_for_metrics);

}  // namespace loom::serve
