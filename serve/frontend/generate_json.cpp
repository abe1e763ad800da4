// generate_json.cpp — KServe generate and OpenAI completions requests into SamplingParams.
#include "frontend/generate_json.hpp"

#include <cmath>
#include <set>
#include <nlohmann/json.hpp>

#include "core/kserve_json.hpp"
#include "core/status.hpp"

namespace loom::serve {

using json = nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& msg) { throw ServeError(Status::kInput, msg); }

// The value of `key`: in params (when given) first, then in req.
const json* param(const json& req, const json* params, const char* key) {
  if (params) {
    auto it = params->find(key);
    if (it != params->end() && !it->is_null()) return &*it;
  }
  auto it = req.find(key);
  return it == req.end() || it->is_null() ? nullptr : &*it;
}

int integer(const json& v, const char* key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    bad(std::string(key) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  return static_cast<int>(v.get<int64_t>());
}

std::vector<int32_t> token_ids(const json& v, const char* key, size_t max) {
  if (!v.is_array() || v.size() > max) bad(std::string(key) + " must be a list of at most " + std::to_string(max) + " token ids");
  std::vector<int32_t> ids;
  for (const auto& t : v) ids.push_back(integer(t, key, 0, INT32_MAX));
  return ids;
}

// The sampling parameters both APIs share.
void sampling(const json& req, const json* params, llm::SamplingParams* p) {
  if (const json* v = param(req, params, "max_tokens")) p->max_tokens = integer(*v, "max_tokens", 1, kMaxGenerateTokens);
  if (const json* v = param(req, params, "temperature")) {
    if (!v->is_number() || !(v->get<double>() >= 0) || v->get<double>() > 100) bad("temperature must be a number from 0 to 100");
    p->temperature = v->get<float>();
    p->set_temperature = true;
  }
  if (const json* v = param(req, params, "top_p")) {
    if (!v->is_number() || !(v->get<double>() > 0) || v->get<double>() > 1) bad("top_p must be a number in (0, 1]");
    p->top_p = v->get<float>();
    p->set_top_p = true;
  }
  if (const json* v = param(req, params, "top_k")) {
    p->top_k = std::max(0, integer(*v, "top_k", -1, 1 << 22));  // -1: all, as vLLM
    p->set_top_k = true;
  }
  if (const json* v = param(req, params, "seed")) {
    if (!v->is_number_unsigned()) bad("seed must be a non-negative integer");
    p->has_seed = true;
    p->seed = v->get<uint64_t>();
  }
  if (const json* v = param(req, params, "stop")) {
    const json list = v->is_string() ? json::array({*v}) : *v;
    if (!list.is_array() || list.size() > kMaxStops) bad("stop must be a string or a list of at most " + std::to_string(kMaxStops) + " strings");
    for (const auto& s : list) {
      if (!s.is_string() || s.get<std::string>().empty() || s.get<std::string>().size() > kMaxStopBytes)
        bad("each stop string must be a non-empty string of at most " + std::to_string(kMaxStopBytes) + " bytes");
      p->stop.push_back(s.get<std::string>());
    }
  }
  if (const json* v = param(req, params, "stop_token_ids")) p->stop_token_ids = token_ids(*v, "stop_token_ids", kMaxStops);
  if (const json* v = param(req, params, "ignore_eos")) {
    if (!v->is_boolean()) bad("ignore_eos must be true or false");
    p->ignore_eos = v->get<bool>();
  }
}

json object_body(const std::string& body) {
  json req = parse_json(body.data(), body.data() + body.size());
  if (!req.is_object()) bad("the request must be a JSON object");
  return req;
}

// The members the completion and chat APIs read; the rest of a request is skipped as it is parsed.
const std::set<std::string> kCompletionKeys = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stop_token_ids", "ignore_eos", "n",
    "stream", "stream_options", "logprobs", "echo", "best_of", "presence_penalty", "frequency_penalty", "logit_bias", "suffix"};
const std::set<std::string> kChatKeys = [] {
  std::set<std::string> k = kCompletionKeys;
  k.insert({"messages", "add_generation_prompt", "tools", "tool_choice", "chat_template_kwargs", "max_completion_tokens", "top_logprobs"});
  return k;
}();

CompletionRequest completion_request(const json& req);

}  // namespace

GenerateRequest parse_generate_request(const std::string& body) {
  const json req = object_body(body);
  GenerateRequest r;
  r.params.max_tokens = 64;
  r.params.temperature = 0.0f;  // KServe generate's own defaults: greedy, whatever the model's
  r.params.set_temperature = r.params.set_top_p = r.params.set_top_k = true;
  r.params.has_seed = true;  // the same answer for the same request, as before sampling had a seed
  auto it = req.find("text_input");
  if (it == req.end()) bad("the request has no \"text_input\"");
  if (!it->is_string()) bad("the request \"text_input\" must be a string");
  r.prompt = it->get<std::string>();
  const json* params = nullptr;
  if (auto p = req.find("parameters"); p != req.end()) {
    if (!p->is_object()) bad("the request's parameters must be a JSON object");
    params = &*p;
  }
  sampling(req, params, &r.params);
  return r;
}

CompletionRequest parse_completion_request(const std::string& body) {
  const json req = parse_json(body.data(), body.data() + body.size(), &kCompletionKeys);
  if (!req.is_object()) bad("the request must be a JSON object");
  return completion_request(req);
}

namespace {

CompletionRequest completion_request(const json& req) {
  CompletionRequest r;
  if (auto m = req.find("model"); m != req.end()) {
    if (!m->is_string()) bad("model must be a string");
    r.model = m->get<std::string>();
  }
  auto p = req.find("prompt");
  if (p == req.end()) bad("the request has no prompt");
  json prompt = *p;
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) prompt = prompt[0];
  if (prompt.is_string()) {
    r.prompt_text = prompt.get<std::string>();
  } else if (prompt.is_array() && (prompt.empty() || prompt[0].is_number())) {
    r.prompt_ids = token_ids(prompt, "prompt", 1 << 20);
    r.prompt_is_ids = true;
  } else {
    bad("prompt must be a string, a list of token ids, or a list holding one of either (one prompt per request)");
  }
  sampling(req, nullptr, &r.params);
  if (const json* v = param(req, nullptr, "n")) r.n = integer(*v, "n", 1, kMaxChoices);
  if (const json* v = param(req, nullptr, "stream")) {
    if (!v->is_boolean()) bad("stream must be true or false");
    r.stream = v->get<bool>();
  }
  if (const json* v = param(req, nullptr, "stream_options")) {
    if (!v->is_object()) bad("stream_options must be an object");
    if (auto u = v->find("include_usage"); u != v->end()) {
      if (!u->is_boolean()) bad("stream_options.include_usage must be true or false");
      r.include_usage = u->get<bool>();
    }
  }
  if (const json* v = param(req, nullptr, "logprobs")) r.params.logprobs = integer(*v, "logprobs", 0, kMaxLogprobs);
  if (const json* v = param(req, nullptr, "echo"); v && (!v->is_boolean() || v->get<bool>())) bad("echo is not supported");
  if (const json* v = param(req, nullptr, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == r.n))
    bad("best_of other than n is not supported");
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (const json* v = param(req, nullptr, k); v && !(v->is_number() && v->get<double>() == 0)) bad(std::string(k) + " is not supported");
  if (const json* v = param(req, nullptr, "logit_bias"); v && !(v->is_object() && v->empty())) bad("logit_bias is not supported");
  if (const json* v = param(req, nullptr, "suffix"); v && !(v->is_string() && v->get<std::string>().empty())) bad("suffix is not supported");
  return r;
}

std::string message_content(const nlohmann::ordered_json& c, size_t k) {
  const std::string where = "messages[" + std::to_string(k) + "].content";
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(where + " must be a string or a list of text parts");
  std::string text;
  for (const auto& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      bad(where + ": only parts {\"type\": \"text\", \"text\": ...} are taken by a text model");
    text += part["text"].get<std::string>();
  }
  return text;
}

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": N}}, N one
// of the tools' functions. Absent: "auto" when there are tools (as vLLM), resolved against the
// model's tool-call format when the request is answered.
void read_tool_choice(const nlohmann::ordered_json& req, const nlohmann::ordered_json& tools, ChatRequest* r) {
  auto c = req.find("tool_choice");
  if (c == req.end() || c->is_null()) {
    r->tool_choice = tools.empty() ? "none" : "default";
    return;
  }
  if (c->is_string() && (*c == "none" || *c == "auto" || *c == "required")) {
    r->tool_choice = c->get<std::string>();
  } else if (c->is_object() && c->value("type", "") == "function" && c->contains("function") && (*c)["function"].is_object() &&
             (*c)["function"].contains("name") && (*c)["function"]["name"].is_string()) {
    r->tool_choice = "function";
    r->tool_function = (*c)["function"]["name"].get<std::string>();
    bool known = false;
    for (const auto& t : tools) known = known || (t.is_object() && t.contains("function") && t["function"].is_object() && t["function"].value("name", "") == r->tool_function);
    if (!known) bad("tool_choice names the function '" + r->tool_function.substr(0, 64) + "', which tools does not hold");
  } else {
    bad("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if ((r->tool_choice == "required" || r->tool_choice == "function") && tools.empty()) bad("tool_choice " + r->tool_choice + " needs tools");
}

// The template's variables from the request: `tools` (a list, shown to the model by its template)
// and chat_template_kwargs' members (vLLM's, such as enable_thinking).
// Moved out of the request: nothing of them is copied.
nlohmann::ordered_json template_vars(nlohmann::ordered_json& req, ChatRequest* r) {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (auto k = req.find("chat_template_kwargs"); k != req.end() && !k->is_null()) {
    if (!k->is_object()) bad("chat_template_kwargs must be an object");
    for (auto it = k->begin(); it != k->end(); ++it)
      if (it.key() != "messages") vars[it.key()] = std::move(it.value());
  }
  if (auto t = req.find("tools"); t != req.end() && !t->is_null()) {
    if (!t->is_array()) bad("tools must be a list");
    vars["tools"] = std::move(*t);
  }
  read_tool_choice(req, vars.contains("tools") ? vars["tools"] : nlohmann::ordered_json::array(), r);
  return vars;
}

}  // namespace

ChatRequest parse_chat_request(const std::string& body, bool tools_shown) {
  // Parsed once, in the client's key order (what the template sees keeps it); messages and tools
  // are moved out of it, not copied, and what no one reads was never built: of tools a template
  // never shows, only their functions' names (a tool_choice names one).
  auto ordered = parse_ordered_json(body.data(), body.data() + body.size(), [tools_shown](const std::vector<std::string>& k) {
    if (k.size() == 1) return kChatKeys.count(k[0]) > 0;
    if (k[0] != "tools" || tools_shown) return true;
    return k.size() <= 4 && k[2] == "function" && (k.size() == 3 || k[3] == "name");
  });
  if (!ordered.is_object()) bad("the request must be a JSON object");
  ChatRequest r;
  const auto found = ordered.find("messages");
  if (found == ordered.end() || !found->is_array() || found->empty()) bad("messages must be a non-empty list");
  auto& m = *found;
  if (m.size() > 10000) bad("messages must hold at most 10000 messages");
  r.messages = nlohmann::ordered_json::array();
  for (size_t k = 0; k < m.size(); ++k) {
    if (!m[k].is_object() || !m[k].contains("role") || !m[k]["role"].is_string())
      bad("messages[" + std::to_string(k) + "] must be an object with a role");
    nlohmann::ordered_json msg = std::move(m[k]);
    msg["content"] = message_content(msg.value("content", nlohmann::ordered_json()), k);
    r.messages.push_back(std::move(msg));
  }
  if (auto a = ordered.find("add_generation_prompt"); a != ordered.end()) {
    if (!a->is_boolean()) bad("add_generation_prompt must be true or false");
    r.add_generation_prompt = a->get<bool>();
  }
  r.vars = template_vars(ordered, &r);
  for (const char* k : {"messages", "tools", "tool_choice", "chat_template_kwargs", "add_generation_prompt"}) ordered.erase(k);
  json req = ordered;  // what is left: the sampling parameters
  req["prompt"] = "";
  if (req.contains("max_completion_tokens") && !req.contains("max_tokens")) req["max_tokens"] = req["max_completion_tokens"];
  if (auto lp = req.find("logprobs"); lp != req.end()) {
    if (!lp->is_boolean()) bad("logprobs must be true or false");
    if (lp->get<bool>()) req["logprobs"] = req.value("top_logprobs", json(0));
    else req.erase("logprobs");
  }
  r.completion = completion_request(req);
  return r;
}

}  // namespace loom::serve
