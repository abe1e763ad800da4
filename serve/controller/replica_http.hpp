// replica_http.hpp — the router's HTTP/1.1 client to a replica, on Boost.Beast (the stack the
// front ends use): one kept-alive connection, each operation bounded by a timeout, no exception
// on network failure.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace loom::serve {

namespace http = boost::beast::http;

using Headers = std::vector<std::pair<std::string, std::string>>;

// One exchange's outcome: status 0 when the replica could not be reached or the connection
// failed (the reason in body: the request may go to another replica); 504 when it did not answer
// in time (the request may still be running there: never retried elsewhere).
struct HttpExchange {
  int status = 0;
  std::string body, content_type;
  Headers headers;  // those a client needs: Inference-Header-Content-Length, Retry-After, ...
  bool keep_alive = false;
};

using ResponseParser = http::response_parser<http::string_body>;

class ReplicaConnection {
 public:
  // Connects to host:port within timeout_ms; null (and *why) when it cannot.
  static std::unique_ptr<ReplicaConnection> open(const std::string& host, int port, int timeout_ms, std::string* why);

  // Sends the request (the body as it came); "" or what went wrong.
  std::string send(const std::string& method, const std::string& target, const Headers& headers,
                   const std::string& body, int timeout_ms);
  // Reads into `parser`: its header, then (read_body) all of it, each wait bounded by timeout_ms.
  // "" or what went wrong; *late when the replica sent nothing in time.
  std::string read_header(ResponseParser& parser, int timeout_ms, bool* late);
  std::string read_body(ResponseParser& parser, int timeout_ms, bool* late);
  // Reads what arrives next of a chunked body (its chunks go to the parser's chunk callback).
  std::string read_some(ResponseParser& parser, int timeout_ms, bool* late);

  // send + read: the whole answer.
  HttpExchange call(const std::string& method, const std::string& target, const Headers& headers,
                    const std::string& body, int timeout_ms);

 private:
  explicit ReplicaConnection(std::string host) : host_(std::move(host)) {}
  template <typename Start>
  boost::beast::error_code run(int timeout_ms, Start start);
  std::string host_;
  boost::asio::io_context io_{1};
  boost::beast::tcp_stream stream_{io_};
  boost::beast::flat_buffer buf_;
};

// The parts of a finished answer a client needs.
HttpExchange exchange_of(ResponseParser& parser);

// A failure before or during an exchange (status 0), and one that timed out (504).
HttpExchange exchange_failure(const std::string& why, bool late);

}  // namespace loom::serve
