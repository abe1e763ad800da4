// status_page.hpp — what a person opens in a browser: GET / on loom-serve and on the controller,
// server-rendered HTML with no framework and no external assets (the replicas, their jobs and
// states, replicas and demand over the last hour as an inline SVG chart, the last scale events;
// or the models and their states), refreshed every few seconds by a few lines of script; the
// same data as JSON at GET /v2/status.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace loom::serve {

struct Context;

// The controller's status (Context::status), or the repository's models and their states.
nlohmann::json status_json(const Context& ctx);
// The page: with `status` its data; null (the request had no valid token) a form that asks for
// the token, which the script then sends as a bearer token on each refresh.
std::string status_page(const nlohmann::json& status);

}  // namespace loom::serve
