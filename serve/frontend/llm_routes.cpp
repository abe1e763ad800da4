// llm_routes.cpp — KServe generate and OpenAI completions: the request decoded (generate_json),
// its sequences submitted to the model's engine, their events gathered into one answer or sent
// as server-sent events as they come; a client that goes away cancels its sequences.
#include "frontend/llm_routes.hpp"

#include <algorithm>
#include <atomic>
#include <ctime>
#include <set>
#include <nlohmann/json.hpp>

#include "core/kserve_json.hpp"
#include "frontend/chat_tools.hpp"
#include "frontend/generate_json.hpp"

namespace loom::serve {

using json = nlohmann::json;

namespace {

// A generative model's engine, with the batcher that keeps it loaded.
struct Target {
  std::shared_ptr<Batcher> keep;
  llm::Engine* engine;
  std::string name, version;
};

Target language_model(Context& ctx, const std::string& name, const std::string& version, const char* use_instead) {
  auto b = ctx.repo->find(name, version);
  llm::Engine* e = b->model().engine();
  if (!e) throw ServeError(Status::kInput, "model " + name + " is not a language model: use " + use_instead);
  return {b, e, b->model().name(), b->model().version()};
}

// The next event of s, or kTimeout when the engine gave none by the deadline (it ends
// sequences past their deadline itself; this is the backstop).
llm::TokenEvent next_event(llm::Stream& s, Clock::time_point deadline) {
  llm::TokenEvent e;
  if (!s.next(&e, deadline + std::chrono::seconds(5))) {
    s.cancel();
    throw ServeError(Status::kTimeout, "generation timed out");
  }
  return e;
}

// The next event of s, looking at the client's connection every 100 ms (`checked`: when it last
// did) so that a client who left is noticed: false then, its sequences cancelled (freed at the
// engine's next step).
bool next_event_while(llm::Stream& s, Clock::time_point deadline, const std::function<bool()>& client_here, Clock::time_point& checked,
                      llm::TokenEvent* e) {
  const auto last = deadline + std::chrono::seconds(5);
  for (;;) {
    const auto now = Clock::now();
    if (now - checked >= std::chrono::milliseconds(100)) {  // tokens may come every step: look by the clock
      checked = now;
      if (!client_here()) return s.cancel(), false;
    }
    if (s.next(e, std::min(last, now + std::chrono::milliseconds(100)))) return true;
    if (Clock::now() >= last) {
      s.cancel();
      throw ServeError(Status::kTimeout, "generation timed out");
    }
  }
}

// One of the server's streams while it is held; 503 when half the connections stream already.
std::shared_ptr<void> stream_slot(Context& ctx) {
  const int limit = std::max(1, ctx.max_connections / 2);
  if (ctx.streams.fetch_add(1) >= limit) {
    ctx.streams.fetch_sub(1);
    throw ServeError(Status::kUnavailable, "the server holds " + std::to_string(limit) + " streams (half of --max-connections): try again");
  }
  return std::shared_ptr<void>(nullptr, [&ctx](void*) { ctx.streams.fetch_sub(1); });
}

constexpr size_t kMaxPromptBytes = 1 << 20;  // what a chat template may render

Clock::time_point deadline_of(const Context& ctx) { return Clock::now() + std::chrono::milliseconds(ctx.options.request_timeout_ms); }

// specials: the tokenizer's post-processor adds its special tokens (a completion's prompt, as
// vLLM's add_special_tokens); a chat template's output has them already.
std::vector<int32_t> prompt_ids(const Target& t, const std::string& text, bool specials) {
  if (!t.engine->tokenizer())
    throw ServeError(Status::kInput, "model " + t.name +
                                              " has no tokenizer (its folder has no tokenizer.json, or vocab.json and merges.txt, that loom-serve reads): "
                                              "send token ids to POST /v1/completions");
  // Bounded before it is encoded: a text no context could hold is refused at once.
  const size_t most = static_cast<size_t>(t.engine->context()) * t.engine->tokenizer()->max_token_bytes();
  if (text.size() > most)
    throw ServeError(Status::kInput, "the prompt's " + std::to_string(text.size()) + " bytes cannot fit in the model's context of " +
                                              std::to_string(t.engine->context()) + " tokens");
  return specials ? t.engine->tokenizer()->encode_with_specials(text) : t.engine->tokenizer()->encode(text);
}

}  // namespace

Reply generate(Context& ctx, const std::string& name, const std::string& version, const std::string& body, bool stream) {
  const Target t = language_model(ctx, name, version, ("POST /v2/models/" + name + "/infer").c_str());
  GenerateRequest req;
  try {
    req = parse_generate_request(body);
  } catch (const loom::Error& e) {  // the generate extension's 422 for parameters; malformed JSON stays a 400
    const std::string what = e.what();
    if (e.kind() != Status::kInput || what.rfind("malformed JSON", 0) == 0 || what.find("JSON object") != std::string::npos) throw;
    return error_reply(e.kind(), what, 422);
  }
  const auto deadline = deadline_of(ctx);
  std::shared_ptr<void> slot = stream ? stream_slot(ctx) : nullptr;
  auto s = t.engine->submit(prompt_ids(t, req.prompt, true), req.params, deadline);
  // Each answer and stream event: model_name, model_version, text_output; a stream's events say
  // whether they are the last (done), and the last why (finish_reason: stop or length).
  auto event = [name = t.name, ver = t.version](const std::string& text, const llm::TokenEvent* end, bool streamed) {
    json j = {{"model_name", name}, {"model_version", ver}, {"text_output", text}};
    if (streamed) j["done"] = end != nullptr;
    if (end) j["finish_reason"] = end->finish_reason;
    return dump_json(j);
  };
  Reply r;
  if (!stream) {
    r.finish = [s, deadline, event](Reply& r, const std::function<bool()>& client_here) {
      std::string text;
      Clock::time_point checked{};
      for (;;) {
        llm::TokenEvent e;
        if (!next_event_while(*s, deadline, client_here, checked, &e)) return false;
        if (e.error != Status::kOk) throw ServeError(e.error, e.message);
        text += e.text;
        if (e.done) {
          r.body = event(text, &e, false);
          return true;
        }
      }
    };
    return r;
  }
  r.content_type = "text/event-stream";
  r.stream = [t, s, deadline, event, slot](const std::function<bool(const std::string&)>& send) {
    Utf8Chunker chunker;
    try {
      for (;;) {
        const llm::TokenEvent e = next_event(*s, deadline);
        if (e.error != Status::kOk) throw ServeError(e.error, e.message);
        std::string whole = chunker.add(e.text);
        if (e.done) whole += chunker.flush();
        if ((!whole.empty() || e.done) && !send("data: " + event(whole, e.done ? &e : nullptr, true) + "\n\n")) return s->cancel();
        if (e.done) return;
      }
    } catch (const loom::Error& e) {
      send("data: " + dump_json({{"error", e.what()}}) + "\n\n");
    }
  };
  return r;
}

namespace {

const char* openai_type(Status s) {
  switch (s) {
    case Status::kInput: case Status::kTooLarge: return "invalid_request_error";
    case Status::kNotFound: return "not_found_error";
    case Status::kUnauthorized: return "authentication_error";
    case Status::kUnavailable: return "server_overloaded";
    case Status::kTimeout: return "timeout";
    default: return "server_error";
  }
}

Reply openai_error(Status s, const std::string& msg) {
  Reply r = error_reply(s, msg);
  r.body = dump_json({{"error", {{"message", msg}, {"type", openai_type(s)}, {"param", nullptr}, {"code", http_status(s)}}}});
  return r;
}

std::string completion_id() {
  static std::atomic<uint64_t> n{0};
  char buf[32];
  std::snprintf(buf, sizeof buf, "cmpl-%llx%04llx", static_cast<unsigned long long>(std::time(nullptr)),
                static_cast<unsigned long long>(n++ & 0xFFFF));
  return buf;
}

// What one choice has gathered.
struct ChoiceText {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  json top = json::array();
  std::string finish;
  int completion_tokens = 0;
  Utf8Chunker chunker;
  bool role_sent = false;  // a chat stream's first delta carries the role
  size_t tool_sent = 0;    // with tools: the bytes of content a stream sent
  std::string tool_text;   // with tools: the output with its special tokens' texts, as a parser reads it
};

// With tools, the event's text into c.tool_text, and a special token's that marks a call ([TOOL_CALLS]).
void add_tool_text(ChoiceText& c, const llm::TokenEvent& e, const ToolMode& tools, const llm::Tokenizer* tok) {
  if (tools.parser == llm::ToolParser::kNone) return;
  const std::string special = tok && e.token >= 0 ? tok->special_text(e.token) : "";
  c.tool_text += llm::is_tool_marker(special) ? special : e.text;
}

std::string token_name(int32_t id) { return "token_id:" + std::to_string(id); }

json logprobs_json(const std::vector<int32_t>& ids, const std::vector<float>& lp, const json& top) {
  json tokens = json::array();
  for (int32_t id : ids) tokens.push_back(token_name(id));
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}};
}

// The chat API's logprobs, {"content": [{token, logprob, bytes, top_logprobs}]}, from a
// completion's {tokens, token_logprobs, top_logprobs}.
json chat_logprobs(const json& lp) {
  json content = json::array();
  for (size_t k = 0; k < lp["tokens"].size(); ++k) {
    json alts = json::array();
    for (const auto& a : lp["top_logprobs"][k].items()) alts.push_back({{"token", a.key()}, {"logprob", a.value()}, {"bytes", nullptr}});
    content.push_back({{"token", lp["tokens"][k]}, {"logprob", lp["token_logprobs"][k]}, {"bytes", nullptr}, {"top_logprobs", alts}});
  }
  return {{"content", content}};
}

// A completion choice as the chat API gives it: the text as the assistant's message (a stream's
// chunk: a delta, the first with the role).
json as_chat(json choice, ChoiceText& c, bool stream, const CompletionRequest& req) {
  json msg = {{"content", choice["text"]}};
  if (!stream || !c.role_sent) msg["role"] = "assistant", c.role_sent = true;
  choice[stream ? "delta" : "message"] = msg;
  choice.erase("text");
  if (req.params.logprobs >= 0) choice["logprobs"] = chat_logprobs(choice["logprobs"]);
  return choice;
}

// Adds e to c; returns the event's own piece (text, ids, logprobs) for a stream chunk.
json add_event(ChoiceText& c, const llm::TokenEvent& e, const CompletionRequest& req) {
  std::vector<int32_t> ids;
  std::vector<float> lp;
  json top = json::array();
  if (e.token >= 0) {
    ids.push_back(e.token);
    lp.push_back(e.logprob);
    json alt = json::object();
    for (const auto& a : e.top) alt[token_name(a.first)] = a.second;
    top.push_back(alt);
  }
  c.ids.insert(c.ids.end(), ids.begin(), ids.end());
  c.logprobs.insert(c.logprobs.end(), lp.begin(), lp.end());
  for (const auto& t : top) c.top.push_back(t);
  std::string piece = c.chunker.add(e.text);
  if (e.done) piece += c.chunker.flush(), c.finish = e.finish_reason, c.completion_tokens = e.completion_tokens;
  c.text += e.text;
  json choice = {{"index", e.index}, {"text", piece}, {"token_ids", ids},
                 {"finish_reason", e.done ? json(e.finish_reason) : json(nullptr)}};
  choice["logprobs"] = req.params.logprobs >= 0 ? logprobs_json(ids, lp, top) : json(nullptr);
  return choice;
}

// The sequences of `req` on `prompt`, answered as a completion (or, with `chat`, a chat
// completion): one JSON answer, or server-sent events ending with [DONE].
Reply answer(Context& ctx, const Target& t, const CompletionRequest& req, const std::vector<int32_t>& prompt, bool chat,
             const ToolMode& tools = {}) {
  const auto deadline = deadline_of(ctx);
  std::shared_ptr<void> slot = req.stream ? stream_slot(ctx) : nullptr;
  auto s = std::make_shared<llm::Stream>();
  for (int i = 0; i < req.n; ++i) {
    llm::SamplingParams p = req.params;
    if (p.has_seed) p.seed += static_cast<uint64_t>(i);  // n draws, each its own
    try {
      t.engine->submit(prompt, p, deadline, s, i);
    } catch (...) {
      s->cancel();
      throw;
    }
  }
  const std::string id = completion_id();
  const long long created = static_cast<long long>(std::time(nullptr));
  const int prompt_tokens = static_cast<int>(prompt.size());
  auto usage = [prompt_tokens](const std::vector<ChoiceText>& cs) {
    int out = 0;
    for (const auto& c : cs) out += c.completion_tokens;
    return json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", out}, {"total_tokens", prompt_tokens + out}};
  };
  const char* object = !chat ? "text_completion" : req.stream ? "chat.completion.chunk" : "chat.completion";
  auto head = [id = (chat ? "chat" : "") + id, created, model = t.name, object]() {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", model}};
  };
  Reply r;
  if (!req.stream) {  // answered whole, once every sequence ends; a client who leaves first cancels them
    r.finish = [s, deadline, req, head, usage, chat, tools, tok = t.engine->tokenizer()](Reply& r, const std::function<bool()>& client_here) {
      std::vector<ChoiceText> cs(static_cast<size_t>(req.n));
      Clock::time_point checked{};
      try {
        for (int left = req.n; left > 0;) {
          llm::TokenEvent e;
          if (!next_event_while(*s, deadline, client_here, checked, &e)) return false;
          if (e.error != Status::kOk) throw ServeError(e.error, e.message);
          add_event(cs[static_cast<size_t>(e.index)], e, req);
          add_tool_text(cs[static_cast<size_t>(e.index)], e, tools, tok);
          left -= e.done ? 1 : 0;
        }
      } catch (const loom::Error& e) {  // OpenAI's error body, in r's fields: r holds this function
        s->cancel();
        Reply err = openai_error(e.kind(), e.what());
        r.kind = err.kind, r.status = err.status, r.body = std::move(err.body);
        return true;
      }
      json res = head();
      res["choices"] = json::array();
      for (size_t i = 0; i < cs.size(); ++i) {
        json c = {{"index", i}, {"text", cs[i].text}, {"token_ids", cs[i].ids}, {"finish_reason", cs[i].finish}};
        c["logprobs"] = req.params.logprobs >= 0 ? logprobs_json(cs[i].ids, cs[i].logprobs, cs[i].top) : json(nullptr);
        if (chat) {
          c = as_chat(c, cs[i], false, req);
          tool_message(tools, cs[i].tool_text, c);
        }
        res["choices"].push_back(c);
      }
      res["usage"] = usage(cs);
      r.body = dump_json(res);
      return true;
    };
    return r;
  }
  r.content_type = "text/event-stream";
  r.stream = [t, s, deadline, req, head, usage, slot, chat, tools](const std::function<bool(const std::string&)>& send) {
    std::vector<ChoiceText> cs(static_cast<size_t>(req.n));
    try {
      for (int left = req.n; left > 0;) {
        const llm::TokenEvent e = next_event(*s, deadline);
        if (e.error != Status::kOk) throw ServeError(e.error, e.message);
        json chunk = head();
        ChoiceText& c = cs[static_cast<size_t>(e.index)];
        json choice = add_event(c, e, req);
        add_tool_text(c, e, tools, t.engine->tokenizer());
        if (chat) {
          choice = as_chat(choice, c, true, req);
          tool_delta(tools, c.tool_text, &c.tool_sent, e.done, choice);
        }
        chunk["choices"] = json::array({choice});
        left -= e.done ? 1 : 0;
        if (!send("data: " + dump_json(chunk) + "\n\n")) return s->cancel();
      }
      if (req.include_usage) {
        json chunk = head();
        chunk["choices"] = json::array();
        chunk["usage"] = usage(cs);
        send("data: " + dump_json(chunk) + "\n\n");
      }
    } catch (const loom::Error& e) {
      s->cancel();
      send("data: " + dump_json({{"error", {{"message", e.what()}, {"type", openai_type(e.kind())}, {"code", http_status(e.kind())}}}}) + "\n\n");
    }
    send("data: [DONE]\n\n");
  };
  return r;
}

Reply completions(Context& ctx, const std::string& body) {
  const CompletionRequest req = parse_completion_request(body);
  if (req.model.empty()) throw ServeError(Status::kInput, "the request names no model");
  const Target t = language_model(ctx, req.model, "", "POST /v2/models/<name>/infer");
  return answer(ctx, t, req, req.prompt_is_ids ? req.prompt_ids : prompt_ids(t, req.prompt_text, true), false);
}

// The model's chat format, or the refusal that names what is missing.
const llm::ChatFormat& chat_format(const Target& t) {
  const llm::ChatFormat* f = t.keep->model().chat();
  if (!f)
    throw ServeError(Status::kInput, "model " + t.name + " has no chat template (no chat_template.jinja in its folder, "
                                     "no chat_template in its tokenizer_config.json): use POST /v1/completions");
  return *f;
}

// The model a request names, read before the rest of it is built ("" when it names none as a string).
std::string named_model(const std::string& body) {
  static const std::set<std::string> kModel = {"model"};
  const json j = parse_json(body.data(), body.data() + body.size(), &kModel);
  const auto m = j.is_object() ? j.find("model") : j.end();
  return m != j.end() && m->is_string() ? m->get<std::string>() : "";
}

Reply chat_completions(Context& ctx, const std::string& body) {
  const std::string model = named_model(body);
  if (model.empty()) {
    parse_chat_request(body);  // refuses the request's faults first, as for a request that names one
    throw ServeError(Status::kInput, "the request names no model");
  }
  const Target t = language_model(ctx, model, "", "POST /v2/models/<name>/infer");
  const llm::ChatFormat& f = chat_format(t);
  const ChatRequest req = parse_chat_request(body, f.tmpl.reads("tools"));
  const ToolMode tools = tool_mode(req, f, t.name);
  const std::string prompt = f.tmpl.render(req.messages, req.vars, req.add_generation_prompt, f.bos, f.eos, kMaxPromptBytes, deadline_of(ctx));
  return answer(ctx, t, req.completion, prompt_ids(t, prompt + tools.opening, false), true, tools);
}

// vLLM's POST /tokenize {"model", "prompt"} -> {"tokens", "count", "max_model_len"} and
// POST /detokenize {"model", "tokens"} -> {"prompt"}.
Reply tokenizer_route(Context& ctx, bool encode, const std::string& body) {
  static const std::set<std::string> kRead = {"model", "prompt", "messages", "add_special_tokens", "tokens"};
  const json req = parse_json(body.data(), body.data() + body.size(), &kRead);
  if (!req.is_object() || !req.contains("model") || !req["model"].is_string()) throw ServeError(Status::kInput, "the request names no model");
  const Target t = language_model(ctx, req["model"].get<std::string>(), "", "POST /v2/models/<name>/infer");
  Reply r;
  if (encode) {
    std::string text;
    bool specials = !req.contains("messages");
    if (req.contains("add_special_tokens")) {
      if (!req["add_special_tokens"].is_boolean()) throw ServeError(Status::kInput, "add_special_tokens must be true or false");
      specials = req["add_special_tokens"].get<bool>();
    }
    if (req.contains("messages")) {  // vLLM's chat form: the prompt the chat template renders
      const llm::ChatFormat& f = chat_format(t);
      const ChatRequest c = parse_chat_request(body, f.tmpl.reads("tools"));
      text = f.tmpl.render(c.messages, c.vars, c.add_generation_prompt, f.bos, f.eos, kMaxPromptBytes, deadline_of(ctx));
    } else {
      if (!req.contains("prompt") || !req["prompt"].is_string()) throw ServeError(Status::kInput, "prompt must be a string");
      text = req["prompt"].get<std::string>();
    }
    const std::vector<int32_t> ids = prompt_ids(t, text, specials);
    r.body = dump_json({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", t.engine->context()}});
    return r;
  }
  if (!req.contains("tokens") || !req["tokens"].is_array() || req["tokens"].size() > (1u << 20))
    throw ServeError(Status::kInput, "tokens must be a list of token ids");
  if (!t.engine->tokenizer()) prompt_ids(t, "", false);  // says there is no tokenizer
  std::vector<int32_t> ids;
  for (const auto& id : req["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= t.engine->vocab())
      throw ServeError(Status::kInput, "tokens must be ids from 0 to " + std::to_string(t.engine->vocab() - 1));
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  r.body = dump_json({{"prompt", t.engine->tokenizer()->decode_text(ids)}});
  return r;
}

Reply models(Context& ctx) {
  json data = json::array();
  for (const auto& l : ctx.repo->loaded_versions()) {
    const llm::Engine* e = l.batcher->model().engine();
    if (!e) continue;
    bool seen = false;
    for (const auto& d : data) seen = seen || d["id"] == l.name;
    if (!seen)
      data.push_back({{"id", l.name}, {"object", "model"}, {"created", 0}, {"owned_by", "loom"}, {"max_model_len", e->context()}});
  }
  Reply r;
  r.body = dump_json({{"object", "list"}, {"data", data}});
  return r;
}

}  // namespace

Reply openai_route(Context& ctx, const std::vector<std::string>& p, bool get, bool post, const std::string& body) {
  auto method_not_allowed = [](const char* allowed) {
    Reply r = openai_error(Status::kInput, std::string("use ") + allowed);
    r.status = http::status::method_not_allowed;
    r.headers.emplace_back("Allow", allowed);
    return r;
  };
  try {
    if (p.size() == 1) {  // tokenize, detokenize
      if (!post) return method_not_allowed("POST");
      return tokenizer_route(ctx, p[0] == "tokenize", body);
    }
    if (p.size() == 2 && p[1] == "models") {
      if (!get) return method_not_allowed("GET");
      return models(ctx);
    }
    if (p.size() == 2 && p[1] == "completions") {
      if (!post) return method_not_allowed("POST");
      return completions(ctx, body);
    }
    if (p.size() == 3 && p[1] == "chat" && p[2] == "completions") {
      if (!post) return method_not_allowed("POST");
      return chat_completions(ctx, body);
    }
    return openai_error(Status::kNotFound, "unknown endpoint /" + [&] {
      std::string s;
      for (const auto& x : p) s += (s.empty() ? "" : "/") + x;
      return s.substr(0, 200);
    }());
  } catch (const loom::Error& e) {
    return openai_error(e.kind(), e.what());
  }
}

}  // namespace loom::serve
