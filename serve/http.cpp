// http.cpp — the KServe v2 REST front end on Boost.Beast: JSON tensors and the binary-data
// extension, the protocol's error body ({"error": "..."}) and status codes, keep-alive, a
// request size limit, a read deadline per request (slow clients get 408), a bearer token.
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <future>
#include <list>
#include <nlohmann/json.hpp>

#include "frontend.hpp"
#include "http_decode.hpp"
#include "infer.hpp"
#include "kserve_json.hpp"

namespace loom::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

bool Context::authorized(const std::string& authorization) const {
  if (token.empty()) return true;
  const std::string want = "Bearer " + token;
  if (authorization.size() != want.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(authorization[i] ^ want[i]);
  return diff == 0;
}

bool Context::is_ready() const {
  if (forward) return ready.load() && !stopping.load() && forward->any_ready();
  for (const auto& p : pipelines)
    if (!p->ready()) return false;
  return ready.load() && !stopping.load() && (!strict_readiness || repo->all_ready());
}

std::string Context::metrics_label(const std::string& name) const {
  return (repo && repo->loaded(name)) || pipeline(name) || (forward && forward->serves(name)) ? name : kUnknownModelLabel;
}

PipelineRunner* Context::pipeline(const std::string& name) const {
  for (const auto& p : pipelines)
    if (p->name() == name) return p.get();
  return nullptr;
}

std::string Context::server_metadata_json() const {
  return dump_json({{"name", kServerName}, {"version", kServerVersion}, {"extensions", {"binary_tensor_data", "model_repository"}}});
}

namespace {

json descs_json(const std::vector<TensorDesc>& ds) {
  json a = json::array();
  for (const auto& d : ds) a.push_back({{"name", d.name}, {"datatype", d.datatype}, {"shape", d.shape}});
  return a;
}

}  // namespace

std::string Context::model_metadata_json(const std::string& name, const std::string& version) const {
  if (const PipelineRunner* p = pipeline(name)) {
    require_connected(*p);
    return dump_json({{"name", name}, {"versions", {"1"}}, {"platform", "loom-pipeline"},
                      {"inputs", descs_json(p->inputs())}, {"outputs", descs_json(p->outputs())}});
  }
  auto b = repo->find(name, version);
  const ServedModel& m = b->model();
  if (m.generator())
    return dump_json({{"name", m.name()},
                      {"versions", repo->versions(name)},
                      {"platform", "loom-hdf5"},
                      {"inputs", {{{"name", "text_input"}, {"datatype", "BYTES"}, {"shape", {1}}}}},
                      {"outputs", {{{"name", "text_output"}, {"datatype", "BYTES"}, {"shape", {1}}}}}});
  json params = {{"precision", m.precision()}};
  if (m.opset()) params["opset"] = m.opset();
  return json{{"name", m.name()},
              {"versions", repo->versions(name)},
              {"platform", m.platform()},
              {"parameters", params},
              {"inputs", descs_json(m.inputs())},
              {"outputs", descs_json(m.outputs())}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

struct Reply {
  Status kind = Status::kOk;  // what the metrics count
  http::status status = http::status::ok;
  std::string body, content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  // Set for a streamed answer (server-sent events): called with a function that sends one
  // chunk (false once the client is gone); the body is not used.
  std::function<void(const std::function<bool(const std::string&)>&)> stream;
};

// Never throws for what a client sent: dump_json replaces bytes that are not UTF-8.
Reply error_reply(Status s, const std::string& msg, int code = 0) {
  Reply r;
  r.kind = s;
  r.status = static_cast<http::status>(code ? code : http_status(s));
  r.body = dump_json({{"error", msg}});
  if (s == Status::kUnavailable) r.headers.emplace_back("Retry-After", "1");
  if (s == Status::kUnauthorized) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// A tensor's elements as a flat JSON array (KServe v2's "data"), numbers or booleans by its
// datatype.
template <typename T>
json numbers(const char* data, size_t bytes) {
  std::vector<T> v(bytes / sizeof(T));
  std::memcpy(v.data(), data, v.size() * sizeof(T));
  return v;
}

json tensor_json(const std::string& datatype, const char* data, size_t bytes) {
  if (datatype == "FP32") return numbers<float>(data, bytes);
  if (datatype == "INT64") return numbers<int64_t>(data, bytes);
  if (datatype == "INT32") return numbers<int32_t>(data, bytes);
  if (datatype == "INT8") return numbers<int8_t>(data, bytes);
  if (datatype == "UINT8") return numbers<uint8_t>(data, bytes);
  if (datatype == "BOOL") {
    json a = json::array();
    for (size_t i = 0; i < bytes; ++i) a.push_back(data[i] != 0);
    return a;
  }
  throw ServeError(Status::kInternal, "an output of datatype " + datatype);
}

// The bytes rendering `bytes` of `datatype` as JSON numbers takes at most: a json value (16
// bytes) and the longest text of one element with its comma, per element.
size_t json_cost(const std::string& datatype, size_t bytes) {
  const size_t width = datatype_width(datatype);
  const size_t text = datatype == "FP32" ? 16 : datatype == "INT64" ? 21 : datatype == "INT32" ? 12 : 6;
  return width ? bytes / width * (sizeof(json) + text) : 0;
}

// A JSON answer may take many times its tensors' bytes: counted in the request's memory budget
// (--max-run-memory-mb) before any of it is built. The binary extension needs no rendering.
void check_json_cost(const std::vector<const TensorIn*>& outs, size_t budget) {
  size_t cost = 0;
  for (const TensorIn* t : outs) cost += t->data.size() + json_cost(t->datatype, t->data.size());
  if (budget && cost > budget)
    throw ServeError(Status::kBadRequest, "the answer as JSON would take " + std::to_string(cost >> 20) +
                                              " MiB to render, past --max-run-memory-mb " + std::to_string(budget >> 20) +
                                              ": ask for the binary extension (\"binary_data_output\": true) or fewer rows");
}

// The infer answer: the outputs asked for, as JSON data or the binary extension.
Reply infer_reply(const std::string& model, const std::string& version, const InferRequest& req,
                  const std::vector<const TensorIn*>& outs, size_t budget) {
  if (!req.binary_out) check_json_cost(outs, budget);
  json res = {{"model_name", model}, {"model_version", version}};
  if (req.has_id) res["id"] = req.id;
  Reply r;
  std::string binary;
  res["outputs"] = json::array();
  for (const TensorIn* t : outs) {
    json o = {{"name", t->name}, {"datatype", t->datatype}, {"shape", t->shape}};
    if (req.binary_out) {
      o["parameters"] = {{"binary_data_size", t->data.size()}};
      binary += t->data;
    } else {
      o["data"] = tensor_json(t->datatype, t->data.data(), t->data.size());
    }
    res["outputs"].push_back(std::move(o));
  }
  r.body = dump_json(res);
  if (req.binary_out) {
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.body.size()));
    r.body += binary;
    r.content_type = "application/octet-stream";
  }
  return r;
}

// POST .../infer: JSON, or JSON + binary tensors after Inference-Header-Content-Length bytes,
// through the one request flow (infer.hpp).
Reply infer(Context& ctx, const std::string& name, const std::string& version, const std::string& body,
            const std::string& header_length) {
  check_target(ctx, name, version);  // an unknown model is a 404 whatever the body
  InferRequest req = parse_infer_request(body, header_length);
  InferCall call{name, version, std::move(req.inputs), req.outputs,
                 Clock::now() + std::chrono::milliseconds(ctx.options.request_timeout_ms)};
  const InferAnswer a = run_inference(ctx, std::move(call));
  std::vector<const TensorIn*> outs;
  for (const auto& t : a.outputs) outs.push_back(&t);
  return infer_reply(a.model, a.version, req, outs, static_cast<size_t>(ctx.options.max_run_memory_mb) << 20);
}

// POST .../generate and .../generate_stream (the generate extension): {"text_input": "...",
// "parameters": {"max_tokens", "temperature", "seed"}} (the parameters may also stand at the top
// level) -> {"model_name", "model_version", "text_output"}; the stream sends one server-sent
// event per piece of text, whole UTF-8 characters at a time.
Reply generate(Context& ctx, const std::string& name, const std::string& version, const std::string& body, bool stream) {
  auto batcher = ctx.repo->find(name, version);
  const ServedModel& m = batcher->model();
  if (!m.generator())
    throw ServeError(Status::kBadRequest, "model " + name + " is not a gpt: use POST /v2/models/" + name + "/infer");
  const GenerateRequest req = parse_generate_request(body);
  GenerateParams p;
  p.max_tokens = req.max_tokens;
  p.temperature = req.temperature;
  p.seed = req.seed;
  p.deadline = Clock::now() + std::chrono::milliseconds(ctx.options.request_timeout_ms);
  auto event = [name = m.name(), ver = m.version()](const std::string& text) {
    return dump_json({{"model_name", name}, {"model_version", ver}, {"text_output", text}});
  };
  Reply r;
  if (!stream) {
    r.body = event(m.generator()->generate(req.prompt, p));
    return r;
  }
  r.content_type = "text/event-stream";
  TextGenerator* gen = m.generator();
  r.stream = [gen, batcher, req, p, event](const std::function<bool(const std::string&)>& send) {
    Utf8Chunker chunker;
    try {
      gen->generate(req.prompt, p, [&](const std::string& piece) {
        const std::string whole = chunker.add(piece);
        return whole.empty() || send("data: " + event(whole) + "\n\n");
      });
      const std::string rest = chunker.flush();
      if (!rest.empty()) send("data: " + event(rest) + "\n\n");
    } catch (const ServeError& e) {
      send("data: " + dump_json({{"error", e.what()}}) + "\n\n");
    }
  };
  return r;
}

std::vector<std::string> split_path(const std::string& target) {
  std::vector<std::string> parts;
  const std::string path = target.substr(0, target.find('?'));
  size_t at = 0;
  while (at < path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    if (slash > at) parts.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

Reply method_not_allowed(const char* allowed) {
  Reply r = error_reply(Status::kBadRequest, std::string("use ") + allowed, 405);
  r.headers.emplace_back("Allow", allowed);
  return r;
}

// POST /v2/repository/index (the repository extension): every model version found, its state
// and why it is not ready.
Reply repository_index(Context& ctx) {
  json list = json::array();
  for (const auto& st : ctx.repo->index()) {
    json e = {{"name", st.name}, {"version", st.version}, {"state", st.state}};
    if (!st.reason.empty()) e["reason"] = st.reason;
    list.push_back(e);
  }
  for (const auto& p : ctx.pipelines) {  // a pipeline that waits for its steps says for which
    std::string why;
    json e = {{"name", p->name()}, {"version", "1"}, {"state", p->ready(&why) ? "READY" : "UNAVAILABLE"}};
    if (!why.empty()) e["reason"] = why;
    list.push_back(e);
  }
  Reply r;
  r.body = dump_json(list);
  return r;
}

Status status_of(int http) {
  switch (http) {
    case 200: return Status::kOk;
    case 400: case 405: case 411: return Status::kBadRequest;
    case 401: return Status::kUnauthorized;
    case 404: return Status::kNotFound;
    case 413: case 431: return Status::kTooLarge;
    case 503: return Status::kUnavailable;
    case 408: case 504: return Status::kTimeout;
    default: return http < 400 ? Status::kOk : Status::kInternal;
  }
}

// The controller: a replica answers; its status, type and the protocol's headers come back.
Reply forwarded(Context& ctx, const http::request<http::string_body>& req) {
  std::vector<std::pair<std::string, std::string>> pass;
  for (const char* h : {"Inference-Header-Content-Length", "Content-Type", "Authorization"}) {
    const auto it = req.find(h);
    if (it != req.end()) pass.emplace_back(h, std::string(it->value()));
  }
  Forwarder::Response a = ctx.forward->forward_http(std::string(req.method_string()), std::string(req.target()), pass, req.body());
  Reply r;
  r.status = static_cast<http::status>(a.status);
  r.kind = status_of(a.status);
  r.body = std::move(a.body);
  r.content_type = std::move(a.content_type);
  r.headers = std::move(a.headers);
  r.stream = std::move(a.stream);
  return r;
}

Reply route(Context& ctx, const http::request<http::string_body>& req, std::string* model_for_metrics) {
  const auto p = split_path(std::string(req.target()));
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  auto ok = [](const json& body) {
    Reply r;
    r.body = dump_json(body);
    return r;
  };
  if (p.size() == 3 && p[0] == "v2" && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    if (!get) return method_not_allowed("GET");
    if (p[2] == "live") return ok({{"live", true}});
    const bool ready = ctx.is_ready();
    Reply r = ok({{"ready", ready}});
    if (!ready) r.status = http::status::service_unavailable;
    return r;
  }
  // Every other endpoint needs the token, when there is one.
  if (!ctx.authorized(std::string(req[http::field::authorization])))
    return error_reply(Status::kUnauthorized, "missing or wrong bearer token");
  if (p.size() == 1 && p[0] == "metrics") {
    if (!get) return method_not_allowed("GET");
    Reply r;
    r.body = ctx.metrics->text() + (ctx.forward ? ctx.forward->metrics_text() : "");
    r.content_type = "text/plain; version=0.0.4";
    return r;
  }
  if (ctx.forward) {
    if (p.size() >= 3 && p[0] == "v2" && p[1] == "models") *model_for_metrics = ctx.metrics_label(p[2]);
    return forwarded(ctx, req);
  }
  if (p.size() == 1 && p[0] == "v2") {
    if (!get) return method_not_allowed("GET");
    Reply r;
    r.body = ctx.server_metadata_json();
    return r;
  }
  if (p.size() == 3 && p[0] == "v2" && p[1] == "repository" && p[2] == "index") {
    if (!post) return method_not_allowed("POST");
    return repository_index(ctx);
  }
  if (p.size() >= 3 && p[0] == "v2" && p[1] == "models") {
    const std::string name = p[2];
    std::string version;
    size_t rest = 3;
    if (p.size() >= 5 && p[3] == "versions") {
      version = p[4];
      rest = 5;
    }
    if (!valid_name(name) || (rest == 5 && !valid_name(version)))
      return error_reply(Status::kBadRequest, "bad model name or version in the URL");
    *model_for_metrics = ctx.metrics_label(name);  // unknown names share one label
    if (p.size() == rest) {
      if (!get) return method_not_allowed("GET");
      Reply r;
      r.body = ctx.model_metadata_json(name, version);
      return r;
    }
    if (p.size() == rest + 1 && p[rest] == "ready") {
      if (!get) return method_not_allowed("GET");
      const PipelineRunner* pipe = ctx.pipeline(name);
      if (!pipe) ctx.repo->find(name, version);  // 404 when unknown
      return ok({{"name", name}, {"ready", ctx.ready.load() && !ctx.stopping.load() && (!pipe || pipe->ready())}});
    }
    if (p.size() == rest + 1 && (p[rest] == "generate" || p[rest] == "generate_stream")) {
      if (!post) return method_not_allowed("POST");
      return generate(ctx, name, version, req.body(), p[rest] == "generate_stream");
    }
    if (p.size() == rest + 1 && p[rest] == "infer") {
      if (!post) return method_not_allowed("POST");
      const auto hl = req.find("Inference-Header-Content-Length");
      return infer(ctx, name, version, req.body(), hl == req.end() ? "" : std::string(hl->value()));
    }
  }
  return error_reply(Status::kNotFound, "unknown endpoint " + std::string(req.method_string()).substr(0, 20) + " " +
                                            std::string(req.target()).substr(0, 200));
}

}  // namespace

struct HttpServer::Impl {
  Context& ctx;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::thread accept_thread, watchdog;
  std::mutex mu;
  std::condition_variable cv;
  struct Conn {
    int fd;
    Clock::time_point deadline;  // of the request being read or the answer being written
    bool writing = false;
    bool timed_out = false;
  };
  std::list<Conn> conns;
  bool closing = false;

  explicit Impl(Context& c) : ctx(c) {}

  // A connection's thread: whatever happens, no exception leaves it and the connection is
  // closed and forgotten.
  void serve(tcp::socket sock, std::list<Conn>::iterator me) {
    bool linger = false;
    try {
      linger = serve_requests(sock, me);
    } catch (...) {
    }
    beast::error_code ec;
    if (linger) {
      // A request refused mid-way (too large, malformed) may still be arriving: stop sending,
      // then read and drop what comes for up to a second, so the client reads the answer
      // instead of a reset (RFC 9112's "lingering close").
      sock.shutdown(tcp::socket::shutdown_send, ec);
      start_phase(me, 1, false);
      char drop[16384];
      while (!ec) sock.read_some(asio::buffer(drop), ec);
      end_phase(me);
    }
    sock.shutdown(tcp::socket::shutdown_both, ec);
    sock.close(ec);
    std::lock_guard<std::mutex> lock(mu);
    conns.erase(me);
    cv.notify_all();
  }

  void start_phase(std::list<Conn>::iterator me, int seconds, bool writing) {
    std::lock_guard<std::mutex> lock(mu);
    me->deadline = Clock::now() + std::chrono::seconds(closing && !writing ? 1 : seconds);
    me->writing = writing;
  }
  bool end_phase(std::list<Conn>::iterator me) {  // whether the watchdog cut it short
    std::lock_guard<std::mutex> lock(mu);
    me->deadline = Clock::time_point::max();
    return me->timed_out;
  }

  // Returns whether the connection ends on a request refused before it was read whole.
  bool serve_requests(tcp::socket& sock, std::list<Conn>::iterator me) {
    // Bounded: a header, a chunk header with its extensions, or a trailer that does not fit is
    // refused (431) instead of growing the heap.
    beast::flat_buffer buf(kReadBufferLimit);
    for (;;) {
      start_phase(me, ctx.read_timeout_s, false);
      HttpParser parser;
      limit_parser(parser, ctx.max_request_bytes);
      beast::error_code ec;
      http::read(sock, buf, parser, ec);
      const bool timed_out = end_phase(me);
      Reply r;
      bool close = true;
      std::string model = kUnknownModelLabel;
      if (timed_out && parser.got_some()) {
        r = error_reply(Status::kTimeout, "the request did not arrive within " + std::to_string(ctx.read_timeout_s) + " s", 408);
      } else if (ec == http::error::end_of_stream || timed_out || (ec && !parser.got_some())) {
        return false;  // the client closed, or an idle keep-alive connection is closed
      } else if (ec) {
        const ParseFailure f = parse_failure(ec, ctx.max_request_bytes);
        r = error_reply(f.status, f.message, f.http);
        write_reply(sock, me, r, true);
        return true;
      } else {
        const auto& req = parser.get();
        const bool is_infer = req.target().find("/infer") != beast::string_view::npos ||
                              req.target().find("/generate") != beast::string_view::npos;
        try {
          r = route(ctx, req, &model);
        } catch (const ServeError& e) {
          r = error_reply(e.status, e.what());
        } catch (const std::exception& e) {
          r = error_reply(Status::kInternal, e.what());
        }
        if (is_infer) ctx.metrics->request(model, "http", r.kind);
        close = !req.keep_alive() || ctx.stopping.load();
      }
      if (!write_reply(sock, me, r, close) || close) return false;
    }
  }

  // The answer, within --write-timeout-s: a client that does not read has its connection cut.
  bool write_reply(tcp::socket& sock, std::list<Conn>::iterator me, Reply& r, bool close) {
    if (r.stream) return write_stream(sock, me, r, close);
    http::response<http::string_body> res{r.status, 11};
    res.set(http::field::server, kServerName);
    res.set(http::field::content_type, r.content_type);
    for (const auto& h : r.headers) res.set(h.first, h.second);
    res.body() = std::move(r.body);
    res.keep_alive(!close);
    res.prepare_payload();
    start_phase(me, ctx.write_timeout_s, true);
    beast::error_code ec;
    http::write(sock, res, ec);
    return !end_phase(me) && !ec;
  }

  // A chunked answer whose chunks come as they are made; each write has the write deadline.
  bool write_stream(tcp::socket& sock, std::list<Conn>::iterator me, Reply& r, bool close) {
    http::response<http::empty_body> res{r.status, 11};
    res.set(http::field::server, kServerName);
    res.set(http::field::content_type, r.content_type);
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(!close);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    beast::error_code ec;
    start_phase(me, ctx.write_timeout_s, true);
    http::write_header(sock, sr, ec);
    bool ok = !end_phase(me) && !ec;
    r.stream([&](const std::string& data) {
      if (!ok) return false;
      start_phase(me, ctx.write_timeout_s, true);
      asio::write(sock, http::make_chunk(asio::buffer(data)), ec);
      ok = !end_phase(me) && !ec;
      return ok;
    });
    if (!ok) return false;
    start_phase(me, ctx.write_timeout_s, true);
    asio::write(sock, http::make_chunk_last(), ec);
    return !end_phase(me) && !ec;
  }
};

HttpServer::HttpServer(Context& ctx, const std::string& bind, int port) : impl_(std::make_unique<Impl>(ctx)) {
  beast::error_code ec;
  const auto addr = asio::ip::make_address(bind, ec);
  if (ec) throw rt::Error("--bind " + bind + ": not an IP address");
  tcp::endpoint ep(addr, static_cast<unsigned short>(port));
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw rt::Error("HTTP: cannot listen on " + bind + ":" + std::to_string(port) + ": " + ec.message());
  Impl* im = impl_.get();
  im->accept_thread = std::thread([im] {
    for (;;) {
      tcp::socket sock(im->ioc);
      beast::error_code e;
      im->acceptor.accept(sock, e);
      if (e) {
        std::lock_guard<std::mutex> lock(im->mu);
        if (im->closing) return;
        continue;
      }
      std::unique_lock<std::mutex> lock(im->mu);
      if (im->closing) return;
      if (im->conns.size() >= static_cast<size_t>(im->ctx.max_connections)) {
        lock.unlock();
        http::response<http::string_body> res{http::status::service_unavailable, 11};
        res.set(http::field::content_type, "application/json");
        res.set("Retry-After", "1");
        res.body() = dump_json({{"error", "too many connections"}});
        res.keep_alive(false);
        res.prepare_payload();
        http::write(sock, res, e);
        continue;
      }
      im->conns.push_back({sock.native_handle(), Clock::time_point::max(), false, false});
      auto me = std::prev(im->conns.end());
      lock.unlock();
      std::thread([im, s = std::move(sock), me]() mutable { im->serve(std::move(s), me); }).detach();
    }
  });
  // The watchdog: a request that has not arrived whole by its deadline has its connection's
  // reading side shut down (the reader then answers 408), and so have idle connections once
  // the server closes.
  im->watchdog = std::thread([im] {
    std::unique_lock<std::mutex> lock(im->mu);
    for (;;) {
      im->cv.wait_for(lock, std::chrono::milliseconds(100));
      const auto now = Clock::now();
      for (auto& c : im->conns) {
        // Once the server closes, a connection waiting for a request gets one more second: a
        // request already on its way is read and answered, an idle keep-alive one is closed.
        if (im->closing && !c.writing && c.deadline != Clock::time_point::max())
          c.deadline = std::min(c.deadline, now + std::chrono::seconds(1));
        if (!c.timed_out && now > c.deadline) {
          c.timed_out = true;
          // A late request: its reader answers 408. A late answer (the client does not read):
          // the connection is cut.
          ::shutdown(c.fd, c.writing ? SHUT_RDWR : SHUT_RD);
        }
      }
      if (im->closing && im->conns.empty()) return;
    }
  });
}

HttpServer::~HttpServer() {
  stop_accepting();
  wait_idle();
  if (impl_->accept_thread.joinable()) impl_->accept_thread.join();
  if (impl_->watchdog.joinable()) impl_->watchdog.join();
}

int HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::stop_accepting() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closing) return;
    impl_->closing = true;
  }
  // Wakes the accept() call: shutting down a listening socket makes it return.
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->cv.notify_all();
}

void HttpServer::wait_idle() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait(lock, [this] { return impl_->conns.empty(); });
}

}  // namespace loom::serve
