// llm_routes.hpp — the language-model endpoints over the one decoder engine (llm/engine.hpp):
// KServe's generate and generate_stream, and OpenAI's /v1/completions, /v1/chat/completions
// and /v1/models with OpenAI's error body ({"error": {"message", "type", "code"}}) and
// server-sent events ending in "data: [DONE]".
#pragma once

#include <string>
#include <vector>

#include "frontend/context.hpp"
#include "frontend/http_reply.hpp"

namespace loom::serve {

// POST /v2/models/M[/versions/V]/generate[_stream]. Throws ServeError (the KServe error body).
Reply generate(Context& ctx, const std::string& name, const std::string& version, const std::string& body, bool stream);

// Any /v1/... request, and vLLM's /tokenize and /detokenize (path split at '/'); never throws.
Reply openai_route(Context& ctx, const std::vector<std::string>& path, bool get, bool post, const std::string& body);

}  // namespace loom::serve
