// http.cpp — the REST front end's transport on Boost.Beast: keep-alive connections, one thread
// each up to a limit, a request size limit, a read deadline per request (slow clients get 408),
// a write deadline, streamed answers; the endpoints themselves are http_routes.cpp.
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <list>
#include <nlohmann/json.hpp>

#include "core/kserve_json.hpp"
#include "frontend/http_decode.hpp"
#include "frontend/http_routes.hpp"
#include "frontend/servers.hpp"

namespace loom::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using json = nlohmann::json;

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

  // Whether the client still holds its end: a peer that closed reads as 0 bytes (its pipelined
  // bytes, if any, stay unread).
  static bool peer_connected(tcp::socket& sock) {
    char c;
    const ssize_t n = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
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
          if (r.finish && !r.finish(r, [&sock] { return peer_connected(sock); })) return false;  // the client left
        } catch (const loom::Error& e) {  // any part's error, answered by its kind
          r = error_reply(e.kind(), e.what());
        } catch (const std::exception& e) {
          r = error_reply(Status::kInternal, e.what());
        }
        if (is_infer) ctx.metrics->request(model, "http", r.kind);
        // A 503 (overload) also ends the connection: a client that never reads the answer must
        // not keep holding one of --max-connections.
        close = !req.keep_alive() || ctx.stopping.load() || r.kind == Status::kUnavailable;
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
