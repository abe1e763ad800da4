// router.cpp — router.hpp: routing, the concurrency integral, and HTTP forwarding over POSIX
// sockets (poll deadlines) with Beast's response parser.
#include "router.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/kserve_json.hpp"

namespace loom::serve {

namespace http = boost::beast::http;

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* state_name(ReplicaState s) {
  switch (s) {
    case ReplicaState::kPending: return "pending";
    case ReplicaState::kStarting: return "starting";
    case ReplicaState::kReady: return "ready";
    case ReplicaState::kDraining: return "draining";
  }
  return "unknown";
}

Replica::~Replica() {
  for (int fd : idle) ::close(fd);
}

namespace {

bool wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    return n > 0;
  }
}

bool send_all(int fd, const std::string& data, int timeout_ms) {
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = ::send(fd, data.data() + at, data.size() - at, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      at += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, timeout_ms)) return false;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return false;
    }
  }
  return true;
}

HttpExchange failure(const std::string& why) {
  HttpExchange e;
  e.body = why;
  return e;
}

}  // namespace

int http_connect(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) return -1;
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      fd = -1;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (!wait_fd(fd, POLLOUT, timeout_ms) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

namespace {

using Parser = http::response_parser<http::string_body>;

std::string request_text(const std::string& host, const std::string& method, const std::string& target,
                         const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: keep-alive\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (method != "GET" || !body.empty()) req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  return req;
}

void limit(Parser& parser) {
  parser.body_limit(1ull << 31);
  parser.header_limit(64 * 1024);
}

// Reads the replica's answer into `parser` until `until()` holds. Returns "" or what went wrong
// (*late: no byte within timeout_ms, so the request may still be running there).
std::string read_until(int fd, Parser& parser, std::string& buf, int timeout_ms, const std::function<bool()>& until,
                       bool* late) {
  char chunk[65536];
  // Bytes already read (past a header a non-eager parser stopped at) are parsed first.
  auto feed = [&]() -> std::string {
    while (!buf.empty() && !until()) {
      boost::beast::error_code ec;
      const size_t used = parser.put(boost::asio::buffer(buf.data(), buf.size()), ec);
      buf.erase(0, used);
      if (ec == http::error::need_more) break;
      if (ec) return "the replica's answer is not HTTP: " + ec.message();
      if (used == 0) break;
    }
    return "";
  };
  for (;;) {
    const std::string bad = feed();
    if (!bad.empty()) return bad;
    if (until()) break;
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    boost::beast::error_code ec;
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
    } else if (n == 0) {
      // Closed before a byte of the answer (a kept-alive connection the replica timed out):
      // Beast's put_eof must not see that (it asserts).
      if (!parser.got_some()) return "the replica closed the connection";
      parser.put_eof(ec);
      if (ec || !until()) return "the replica closed the connection";
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, timeout_ms)) {
        *late = true;
        return "the replica did not answer within " + std::to_string(timeout_ms) + " ms";
      }
    } else if (errno != EINTR) {
      return std::string("reading from the replica: ") + std::strerror(errno);
    }
  }
  return "";
}

HttpExchange exchange_of(Parser& parser) {
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

HttpExchange late_failure(const std::string& why) {
  HttpExchange e = failure(why);
  e.status = 504;  // not retried elsewhere: the request may be running there
  return e;
}

}  // namespace

HttpExchange http_call(int fd, const std::string& host, const std::string& method, const std::string& target,
                       const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                       int timeout_ms) {
  if (!send_all(fd, request_text(host, method, target, headers, body), timeout_ms))
    return failure("cannot send the request to the replica");
  Parser parser;
  limit(parser);
  parser.eager(true);
  std::string buf;
  bool late = false;
  const std::string err = read_until(fd, parser, buf, timeout_ms, [&] { return parser.is_done(); }, &late);
  if (!err.empty()) return late ? late_failure(err) : failure(err);
  return exchange_of(parser);
}

// generate_stream, and OpenAI completions asking for "stream": true: the replica's server-sent
// events pass on chunk by chunk as they come.
bool streamed(const std::string& target, const std::string& body) {
  const std::string path = target.substr(0, target.find('?'));
  const std::string tail = "/generate_stream";
  if (path.size() > tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0) return true;
  if (path != "/v1/completions" && path != "/v1/chat/completions") return false;
  static const std::set<std::string> only_stream = {"stream"};
  try {  // only "stream" is built (the prompt and messages are skipped as they are read)
    const nlohmann::json j = parse_json(body.data(), body.data() + body.size(), &only_stream);
    return j.is_object() && j.contains("stream") && j["stream"] == true;
  } catch (const loom::Error&) {  // malformed or too deep: the replica answers it, unstreamed
    return false;
  }
}

// A streamed answer in progress: its connection, parser and lease live until the stream ends.
struct StreamedAnswer {
  int fd = -1;
  Parser parser;
  std::string buf;
  std::unique_ptr<Lease> lease;
  ~StreamedAnswer() {
    if (fd >= 0) ::close(fd);
  }
};

Forwarder::Response ReplicaPool::forward_stream(const std::string& method, const std::string& target,
                                                const std::vector<std::pair<std::string, std::string>>& headers,
                                                const std::string& body) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto a = std::make_shared<StreamedAnswer>();
    a->lease = std::make_unique<Lease>(*this, acquire());
    if (!*a->lease) break;
    Replica& r = *a->lease->get();
    a->fd = http_connect(r.host, r.http_port, timeout_ms_);
    if (a->fd < 0 || !send_all(a->fd, request_text(r.host, method, target, headers, body), timeout_ms_)) {
      demote(r, monotonic_s());
      continue;
    }
    limit(a->parser);
    a->parser.eager(false);
    bool late = false;
    std::string err = read_until(a->fd, a->parser, a->buf, timeout_ms_, [&] { return a->parser.is_header_done(); }, &late);
    if (!err.empty() && !late) {
      demote(r, monotonic_s());
      continue;
    }
    Response res;
    if (err.empty() && a->parser.get().result_int() == 200 && a->parser.chunked()) {
      res.content_type = std::string(a->parser.get()[http::field::content_type]);
      const int timeout = timeout_ms_;
      const std::string job = r.job;
      res.stream = [this, a, timeout, job](const std::function<bool(const std::string&)>& send) {
        bool client = true;
        auto on_body = [&](std::uint64_t, boost::beast::string_view data, boost::beast::error_code& ec) {
          if (client && !data.empty()) client = send(std::string(data.data(), data.size()));
          if (!client) ec = boost::asio::error::operation_aborted;  // the client went away: stop reading
          return data.size();
        };
        a->parser.on_chunk_body(on_body);  // Beast keeps a reference: on_body outlives the reads
        bool late_body = false;
        const std::string err =
            read_until(a->fd, a->parser, a->buf, timeout, [&] { return !client || a->parser.is_done(); }, &late_body);
        if (client && !a->parser.is_done()) {
          // The replica went away (or stalled) mid-stream: the client must not take what it got
          // for the whole answer. One error event, as the protocol's stream carries errors.
          broken_streams_.fetch_add(1);
          const nlohmann::json e = {{"error", "replica " + job + " stopped before the stream's end: " +
                                                  (err.empty() ? std::string("the connection closed") : err)}};
          send("data: " + e.dump() + "\n\n");
        }
      };
      return res;
    }
    if (err.empty()) err = read_until(a->fd, a->parser, a->buf, timeout_ms_, [&] { return a->parser.is_done(); }, &late);
    const HttpExchange e = err.empty() ? exchange_of(a->parser) : late_failure(err);
    res.status = e.status;
    res.body = e.status == 504 ? "{\"error\":\"replica " + r.job + ": " + e.body + "\"}" : e.body;
    if (!e.content_type.empty()) res.content_type = e.content_type;
    res.headers = e.headers;
    return res;
  }
  Response res;
  res.status = 503;
  res.headers.emplace_back("Retry-After", "1");
  res.body = "{\"error\":\"no replica can take the request now (none ready, or every one is full)\"}";
  return res;
}

void ReplicaPool::put(std::shared_ptr<Replica> r) {
  std::lock_guard<std::mutex> lock(mu_);
  replicas_[r->job] = std::move(r);
}

void ReplicaPool::remove(const std::string& job) {
  std::lock_guard<std::mutex> lock(mu_);
  replicas_.erase(job);
}

std::vector<std::shared_ptr<Replica>> ReplicaPool::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Replica>> v;
  for (const auto& [id, r] : replicas_) v.push_back(r);
  return v;
}

std::shared_ptr<Replica> ReplicaPool::find(const std::string& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = replicas_.find(job);
  return it == replicas_.end() ? nullptr : it->second;
}

void ReplicaPool::set_state(Replica& r, ReplicaState s, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (r.state.load() != s) r.since = now;
  r.state = s;
}

void ReplicaPool::demote(Replica& r, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  ReplicaState ready = ReplicaState::kReady;
  if (r.state.compare_exchange_strong(ready, ReplicaState::kStarting)) r.since = now;
}

std::shared_ptr<Replica> ReplicaPool::acquire() {
  std::shared_ptr<Replica> best;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int least = cap_;
    for (const auto& [id, r] : replicas_) {
      const int n = r->outstanding.load();
      if (r->state == ReplicaState::kReady && n < least) least = n, best = r;
    }
    if (best) best->outstanding.fetch_add(1);
  }
  if (!best) {
    refused_in_window_.fetch_add(1);
    rejected_.fetch_add(1);
    return nullptr;
  }
  best->routed.fetch_add(1);
  change_outstanding(+1);
  return best;
}

void ReplicaPool::release(Replica& r) {
  r.outstanding.fetch_sub(1);
  change_outstanding(-1);
}

void ReplicaPool::change_outstanding(int delta) {
  const double now = monotonic_s();
  std::lock_guard<std::mutex> lock(conc_mu_);
  if (last_change_ >= 0) integral_ += total_outstanding_ * (now - last_change_);
  last_change_ = now;
  total_outstanding_ += delta;
  if (delta > 0) begun_ += static_cast<uint64_t>(delta);
}

uint64_t ReplicaPool::take_refused() { return refused_in_window_.exchange(0); }

ReplicaPool::Load ReplicaPool::take_load() {
  const double now = monotonic_s();
  std::lock_guard<std::mutex> lock(conc_mu_);
  if (last_change_ >= 0) integral_ += total_outstanding_ * (now - last_change_);
  last_change_ = now;
  const double span = window_start_ < 0 ? 0 : now - window_start_;
  Load l;
  l.concurrency = span > 0 ? integral_ / span : total_outstanding_;
  l.rate = span > 0 ? static_cast<double>(begun_) / span : 0;
  integral_ = 0;
  begun_ = 0;
  window_start_ = now;
  return l;
}

bool ReplicaPool::any_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : replicas_)
    if (r->state == ReplicaState::kReady) return true;
  return false;
}

HttpExchange ReplicaPool::exchange(Replica& r, const std::string& method, const std::string& target,
                                   const std::vector<std::pair<std::string, std::string>>& headers,
                                   const std::string& body) {
  // A kept-alive connection the replica has closed fails at once: then once more on a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = -1;
    {
      std::lock_guard<std::mutex> lock(r.idle_mu);
      if (!r.idle.empty()) fd = r.idle.back(), r.idle.pop_back();
    }
    const bool reused = fd >= 0;
    if (fd < 0) fd = http_connect(r.host, r.http_port, timeout_ms_);
    if (fd < 0) return failure("cannot connect to replica " + r.job + " at " + r.host + ":" + std::to_string(r.http_port));
    HttpExchange e = http_call(fd, r.host, method, target, headers, body, timeout_ms_);
    if (e.status != 0 && e.keep_alive) {
      std::lock_guard<std::mutex> lock(r.idle_mu);
      r.idle.push_back(fd);
    } else {
      ::close(fd);
    }
    if (e.status != 0 || !reused) return e;
  }
  return failure("replica " + r.job + " closed the connection");
}

Forwarder::Response ReplicaPool::forward_http(const std::string& method, const std::string& target,
                                              const std::vector<std::pair<std::string, std::string>>& headers,
                                              const std::string& body) {
  if (streamed(target, body)) return forward_stream(method, target, headers, body);
  Response res;
  // A replica that cannot be reached (cancelled, crashed, its node gone) is taken out of
  // routing until the controller's health check brings it back, and the request goes to the
  // next one: a client sees an answer or a 503, never the router's trouble.
  for (int attempt = 0; attempt < 3; ++attempt) {
    Lease lease(*this, acquire());
    if (!lease) break;
    HttpExchange e = exchange(*lease.get(), method, target, headers, body);
    if (e.status == 0) {
      demote(*lease.get(), monotonic_s());
      continue;
    }
    res.status = e.status;
    res.body = std::move(e.body);
    if (e.status == 504) res.body = "{\"error\":\"replica " + lease->job + ": " + res.body + "\"}";
    if (!e.content_type.empty()) res.content_type = e.content_type;
    res.headers = std::move(e.headers);
    return res;
  }
  res.status = 503;
  res.headers.emplace_back("Retry-After", "1");
  res.body = "{\"error\":\"no replica can take the request now (none ready, or every one is full)\"}";
  return res;
}

bool ReplicaPool::health_check(Replica& r, int timeout_ms) {
  const int fd = http_connect(r.host, r.http_port, timeout_ms);
  if (fd < 0) return false;
  const HttpExchange e = http_call(fd, r.host, "GET", "/v2/health/ready", {}, "", timeout_ms);
  ::close(fd);
  return e.status == 200;
}

double ReplicaPool::sequences(Replica& r, int timeout_ms, const std::string& authorization) {
  const int fd = http_connect(r.host, r.http_port, timeout_ms);
  if (fd < 0) return -1;
  std::vector<std::pair<std::string, std::string>> h;
  if (!authorization.empty()) h.emplace_back("Authorization", authorization);
  const HttpExchange e = http_call(fd, r.host, "GET", "/metrics", h, "", timeout_ms);
  ::close(fd);
  if (e.status != 200) return -1;
  double n = -1;
  std::istringstream lines(e.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("loom_llm_running_sequences{", 0) != 0 && line.rfind("loom_llm_waiting_sequences{", 0) != 0) continue;
    const size_t sp = line.rfind(' ');
    try {
      n = std::max(n, 0.0) + std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return n;
}

std::string ReplicaPool::metrics_text() const { return metrics_ ? metrics_() : ""; }

}  // namespace loom::serve
