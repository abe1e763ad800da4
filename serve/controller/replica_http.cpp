// replica_http.cpp — replica_http.hpp: each operation is one asynchronous Beast call run to its
// end on the connection's own io_context, so the stream's timer bounds it (Beast's timeouts
// apply to asynchronous operations only).
#include "replica_http.hpp"

#include <boost/asio/ip/tcp.hpp>

namespace loom::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

void limit(ResponseParser& parser) {
  parser.body_limit(1ull << 31);
  parser.header_limit(64 * 1024);
}

std::string describe(beast::error_code ec, int timeout_ms, bool* late) {
  if (ec == beast::error::timeout) {
    if (late) *late = true;
    return "the replica did not answer within " + std::to_string(timeout_ms) + " ms";
  }
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset)
    return "the replica closed the connection";
  if (ec.category() == http::make_error_code(http::error::bad_version).category())
    return "the replica's answer is not HTTP: " + ec.message();
  return "talking to the replica: " + ec.message();
}

}  // namespace

template <typename Start>
beast::error_code ReplicaConnection::run(int timeout_ms, Start start) {
  beast::error_code result = asio::error::would_block;
  stream_.expires_after(std::chrono::milliseconds(timeout_ms));
  start([&result](beast::error_code ec, auto&&...) { result = ec; });
  io_.restart();
  io_.run();
  return result;
}

std::unique_ptr<ReplicaConnection> ReplicaConnection::open(const std::string& host, int port, int timeout_ms,
                                                           std::string* why) {
  std::unique_ptr<ReplicaConnection> c(new ReplicaConnection(host));
  beast::error_code ec;
  tcp::resolver resolver(c->io_);
  const auto at = resolver.resolve(host, std::to_string(port), ec);
  if (!ec) ec = c->run(timeout_ms, [&](auto done) { c->stream_.async_connect(at, done); });
  if (ec) {
    *why = "cannot connect to " + host + ":" + std::to_string(port) + ": " + ec.message();
    return nullptr;
  }
  c->stream_.socket().set_option(tcp::no_delay(true), ec);
  return c;
}

std::string ReplicaConnection::send(const std::string& method, const std::string& target, const Headers& headers,
                                    const std::string& body, int timeout_ms) {
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, host_);
  req.keep_alive(true);
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  if (method != "GET" || !body.empty()) req.content_length(body.size());
  const beast::error_code ec = run(timeout_ms, [&](auto done) { http::async_write(stream_, req, done); });
  return ec ? "cannot send the request to the replica: " + ec.message() : "";
}

std::string ReplicaConnection::read_header(ResponseParser& parser, int timeout_ms, bool* late) {
  limit(parser);
  const beast::error_code ec = run(timeout_ms, [&](auto done) { http::async_read_header(stream_, buf_, parser, done); });
  return ec ? describe(ec, timeout_ms, late) : "";
}

std::string ReplicaConnection::read_body(ResponseParser& parser, int timeout_ms, bool* late) {
  const beast::error_code ec = run(timeout_ms, [&](auto done) { http::async_read(stream_, buf_, parser, done); });
  return ec ? describe(ec, timeout_ms, late) : "";
}

std::string ReplicaConnection::read_some(ResponseParser& parser, int timeout_ms, bool* late) {
  const beast::error_code ec = run(timeout_ms, [&](auto done) { http::async_read_some(stream_, buf_, parser, done); });
  return ec ? describe(ec, timeout_ms, late) : "";
}

HttpExchange ReplicaConnection::call(const std::string& method, const std::string& target, const Headers& headers,
                                     const std::string& body, int timeout_ms) {
  std::string err = send(method, target, headers, body, timeout_ms);
  if (!err.empty()) return exchange_failure(err, false);
  ResponseParser parser;
  limit(parser);
  bool late = false;
  err = read_body(parser, timeout_ms, &late);
  return err.empty() ? exchange_of(parser) : exchange_failure(err, late);
}

HttpExchange exchange_of(ResponseParser& parser) {
  auto& res = parser.get();
  HttpExchange e;
  e.status = static_cast<int>(res.result_int());
  e.keep_alive = res.keep_alive();
  e.content_type = std::string(res[http::field::content_type]);
  for (const char* h : {"Inference-Header-Content-Length", "Retry-After", "WWW-Authenticate", "Allow"}) {
    const auto it = res.find(h);
    if (it != res.end()) e.headers.emplace_back(h, std::string(it->value()));
  }
  e.body = std::move(res.body());
  return e;
}

HttpExchange exchange_failure(const std::string& why, bool late) {
  HttpExchange e;
  e.body = why;
  if (late) e.status = 504;
  return e;
}

}  // namespace loom::serve
