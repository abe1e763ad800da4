// http.cpp — the KServe v2 REST front end on Boost.Beast: JSON tensors and the binary-data
// extension, the protocol's error body ({"error": "..."}) and status codes, keep-alive, a
// request size limit, a read deadline per request (slow clients get 408), a bearer token.
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <cstring>
#include <list>
#include <nlohmann/json.hpp>

#include "frontend.hpp"

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

std::string Context::server_metadata_json() const {
  return json{{"name", kServerName}, {"version", kServerVersion}, {"extensions", {"binary_tensor_data"}}}.dump();
}

std::string Context::model_metadata_json(const std::string& name, const std::string& version) const {
  auto b = repo->find(name, version);
  const ServedModel& m = b->model();
  return json{{"name", m.name()},
              {"versions", repo->versions(name)},
              {"platform", "loom-hdf5"},
              {"inputs", {{{"name", "input"}, {"datatype", "FP32"}, {"shape", {-1, m.in_features()}}}}},
              {"outputs", {{{"name", "logits"}, {"datatype", "FP32"}, {"shape", {-1, m.out_features()}}}}}}
      .dump();
}

namespace {

struct Reply {
  Status kind = Status::kOk;  // what the metrics count
  http::status status = http::status::ok;
  std::string body, content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

Reply error_reply(Status s, const std::string& msg) {
  Reply r;
  r.kind = s;
  r.status = static_cast<http::status>(http_status(s));
  r.body = json{{"error", msg}}.dump();
  if (s == Status::kUnavailable) r.headers.emplace_back("Retry-After", "1");
  if (s == Status::kUnauthorized) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

// Flattens nested JSON arrays of numbers into little-endian bytes of `datatype`.
void flatten(const json& v, const std::string& datatype, std::string& out) {
  if (v.is_array()) {
    for (const auto& e : v) flatten(e, datatype, out);
    return;
  }
  if (!v.is_number()) throw ServeError(Status::kBadRequest, "input data must hold numbers only");
  if (datatype == "FP32") {
    const float f = v.get<float>();
    char b[4];
    std::memcpy(b, &f, 4);
    out.append(b, 4);
  } else if (datatype == "UINT8") {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > 255)
      throw ServeError(Status::kBadRequest, "UINT8 input data must be integers 0-255");
    out.push_back(static_cast<char>(v.get<uint64_t>()));
  } else {
    throw ServeError(Status::kBadRequest, "input datatype " + datatype + " is not supported (FP32 or UINT8)");
  }
}

// POST .../infer: JSON, or JSON + binary tensors after Inference-Header-Content-Length bytes.
Reply infer(Context& ctx, const std::string& name, const std::string& version, const std::string& body,
            const std::string& header_length) {
  size_t json_len = body.size();
  if (!header_length.empty()) {
    try {
      size_t used = 0;
      json_len = std::stoull(header_length, &used);
      if (used != header_length.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw ServeError(Status::kBadRequest, "Inference-Header-Content-Length is not a number");
    }
    if (json_len > body.size()) throw ServeError(Status::kBadRequest, "Inference-Header-Content-Length exceeds the body");
  }
  json req;
  try {
    req = json::parse(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(json_len));
  } catch (const json::exception& e) {
    throw ServeError(Status::kBadRequest, std::string("malformed JSON: ") + e.what());
  }
  if (!req.is_object()) throw ServeError(Status::kBadRequest, "the request must be a JSON object");
  auto batcher = ctx.repo->find(name, version);
  const ServedModel& m = batcher->model();
  if (!req.contains("inputs") || !req["inputs"].is_array())
    throw ServeError(Status::kBadRequest, "missing inputs: the request needs an \"inputs\" array");
  std::vector<TensorIn> inputs;
  size_t binary_at = json_len;
  try {
    for (const auto& in : req["inputs"]) {
      TensorIn t;
      t.name = in.at("name").get<std::string>();
      t.datatype = in.at("datatype").get<std::string>();
      t.shape = in.at("shape").get<std::vector<int64_t>>();
      const json params = in.value("parameters", json::object());
      if (params.contains("binary_data_size")) {
        const uint64_t n = params["binary_data_size"].get<uint64_t>();
        if (n > body.size() - binary_at) throw ServeError(Status::kBadRequest, "binary_data_size of " + t.name + " exceeds the body");
        t.data = body.substr(binary_at, n);
        binary_at += n;
      } else {
        if (!in.contains("data")) throw ServeError(Status::kBadRequest, "input " + t.name + " has no data");
        flatten(in["data"], t.datatype, t.data);
      }
      inputs.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    throw ServeError(Status::kBadRequest, std::string("malformed input tensor: ") + e.what());
  }
  if (binary_at != body.size()) throw ServeError(Status::kBadRequest, "the body holds bytes no input claims");
  bool binary_out = req.value("parameters", json::object()).value("binary_data_output", false);
  if (req.contains("outputs")) {
    if (!req["outputs"].is_array()) throw ServeError(Status::kBadRequest, "outputs must be an array");
    for (const auto& o : req["outputs"]) {
      const std::string n = o.is_object() ? o.value("name", "") : "";
      if (n != "logits") throw ServeError(Status::kBadRequest, "unknown output '" + n + "': the model's output is 'logits'");
      binary_out = o.value("parameters", json::object()).value("binary_data", binary_out);
    }
  }
  int rows = 0;
  std::vector<float> x = decode_input(m, inputs, &rows);
  auto out = batcher->run(std::move(x), rows, Clock::now() + std::chrono::milliseconds(ctx.options.request_timeout_ms));
  if (out.status != Status::kOk) throw ServeError(out.status, out.error);
  json res = {{"model_name", m.name()}, {"model_version", m.version()}};
  if (req.contains("id") && req["id"].is_string()) res["id"] = req["id"];
  json o = {{"name", "logits"}, {"datatype", "FP32"}, {"shape", {rows, m.out_features()}}};
  Reply r;
  if (binary_out) {
    const size_t n = out.out.size() * sizeof(float);
    o["parameters"] = {{"binary_data_size", n}};
    res["outputs"] = json::array({o});
    r.body = res.dump();
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.body.size()));
    r.body.append(reinterpret_cast<const char*>(out.out.data()), n);
    r.content_type = "application/octet-stream";
  } else {
    o["data"] = out.out;
    res["outputs"] = json::array({o});
    r.body = res.dump();
  }
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

Reply route(Context& ctx, const http::request<http::string_body>& req, std::string* model_for_metrics) {
  const auto p = split_path(std::string(req.target()));
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  auto ok = [](std::string body) {
    Reply r;
    r.body = std::move(body);
    return r;
  };
  if (p.size() == 3 && p[0] == "v2" && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    if (!get) return error_reply(Status::kBadRequest, "use GET");
    if (p[2] == "live") return ok(json{{"live", true}}.dump());
    const bool ready = ctx.ready.load() && !ctx.stopping.load();
    Reply r = ok(json{{"ready", ready}}.dump());
    if (!ready) r.status = http::status::service_unavailable;
    return r;
  }
  // Every other endpoint needs the token, when there is one.
  if (!ctx.authorized(std::string(req[http::field::authorization])))
    return error_reply(Status::kUnauthorized, "missing or wrong bearer token");
  if (p.size() == 1 && p[0] == "metrics" && get) {
    Reply r = ok(ctx.metrics->text());
    r.content_type = "text/plain; version=0.0.4";
    return r;
  }
  if (p.size() == 1 && p[0] == "v2" && get) return ok(ctx.server_metadata_json());
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
    *model_for_metrics = name;
    if (p.size() == rest && get) return ok(ctx.model_metadata_json(name, version));
    if (p.size() == rest + 1 && p[rest] == "ready" && get) {
      ctx.repo->find(name, version);  // 404 when unknown
      return ok(json{{"name", name}, {"ready", ctx.ready.load() && !ctx.stopping.load()}}.dump());
    }
    if (p.size() == rest + 1 && p[rest] == "infer") {
      if (!post) return error_reply(Status::kBadRequest, "use POST for infer");
      const auto hl = req.find("Inference-Header-Content-Length");
      return infer(ctx, name, version, req.body(), hl == req.end() ? "" : std::string(hl->value()));
    }
  }
  return error_reply(Status::kNotFound, "unknown endpoint " + std::string(req.method_string()) + " " +
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
    Clock::time_point deadline;  // of the request being read; max() while it is served
    bool timed_out = false;
  };
  std::list<Conn> conns;
  bool closing = false;

  explicit Impl(Context& c) : ctx(c) {}

  void serve(tcp::socket sock, std::list<Conn>::iterator me) {
    beast::flat_buffer buf;
    beast::error_code ec;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        me->deadline = Clock::now() + std::chrono::seconds(closing ? 1 : ctx.read_timeout_s);
      }
      http::request_parser<http::string_body> parser;
      parser.body_limit(ctx.max_request_bytes);
      parser.header_limit(16 * 1024);
      http::read(sock, buf, parser, ec);
      bool timed_out;
      {
        std::lock_guard<std::mutex> lock(mu);
        me->deadline = Clock::time_point::max();
        timed_out = me->timed_out;
      }
      Reply r;
      bool close = false;
      std::string model = "-";
      if (timed_out && parser.got_some()) {
        r = error_reply(Status::kTimeout, "the request did not arrive within " + std::to_string(ctx.read_timeout_s) + " s");
        r.status = http::status::request_timeout;
        close = true;
      } else if (ec == http::error::end_of_stream || timed_out || (ec && !parser.got_some())) {
        break;  // the client closed, or an idle keep-alive connection is closed
      } else if (ec == http::error::body_limit) {
        r = error_reply(Status::kTooLarge, "request body exceeds " + std::to_string(ctx.max_request_bytes) + " bytes");
        close = true;
      } else if (ec == http::error::header_limit) {
        r = error_reply(Status::kBadRequest, "request headers exceed 16 KiB");
        r.status = http::status::request_header_fields_too_large;
        close = true;
      } else if (ec) {
        r = error_reply(Status::kBadRequest, "malformed HTTP request: " + ec.message());
        close = true;
      } else {
        const auto& req = parser.get();
        const bool is_infer = req.target().find("/infer") != beast::string_view::npos;
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
      http::response<http::string_body> res{r.status, 11};
      res.set(http::field::server, kServerName);
      res.set(http::field::content_type, r.content_type);
      for (const auto& h : r.headers) res.set(h.first, h.second);
      res.body() = std::move(r.body);
      res.keep_alive(!close);
      res.prepare_payload();
      http::write(sock, res, ec);
      if (ec || close) break;
    }
    sock.shutdown(tcp::socket::shutdown_both, ec);
    sock.close(ec);
    std::lock_guard<std::mutex> lock(mu);
    conns.erase(me);
    cv.notify_all();
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
        res.body() = json{{"error", "too many connections"}}.dump();
        res.keep_alive(false);
        res.prepare_payload();
        http::write(sock, res, e);
        continue;
      }
      im->conns.push_back({sock.native_handle(), Clock::time_point::max(), false});
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
        if (im->closing && c.deadline != Clock::time_point::max())
          c.deadline = std::min(c.deadline, now + std::chrono::seconds(1));
        if (!c.timed_out && now > c.deadline) {
          c.timed_out = true;
          ::shutdown(c.fd, SHUT_RD);
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
