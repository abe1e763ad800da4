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
#include <sstream>

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

HttpExchange http_call(int fd, const std::string& host, const std::string& method, const std::string& target,
                       const std::vector<std::pair<std::string, std::string>>& headers, const std::string& body,
                       int timeout_ms) {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: keep-alive\r\n";
  for (const auto& [k, v] : headers) req += k + ": " + v + "\r\n";
  if (method != "GET" || !body.empty()) req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  if (!send_all(fd, req, timeout_ms)) return failure("cannot send the request to the replica");
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 31);
  parser.header_limit(64 * 1024);
  parser.eager(true);
  std::string buf;
  char chunk[65536];
  while (!parser.is_done()) {
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    boost::beast::error_code ec;
    if (n > 0) {
      buf.append(chunk, static_cast<size_t>(n));
      const size_t used = parser.put(boost::asio::buffer(buf.data(), buf.size()), ec);
      buf.erase(0, used);
      if (ec && ec != http::error::need_more) return failure("the replica's answer is not HTTP: " + ec.message());
    } else if (n == 0) {
      // Closed before a byte of the answer (a kept-alive connection the replica timed out):
      // Beast's put_eof must not see that (it asserts).
      if (!parser.got_some()) return failure("the replica closed the connection");
      parser.put_eof(ec);
      if (ec || !parser.is_done()) return failure("the replica closed the connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, timeout_ms)) {
        HttpExchange late = failure("the replica did not answer within " + std::to_string(timeout_ms) + " ms");
        late.status = 504;  // not retried elsewhere: the request may be running there
        return late;
      }
    } else if (errno != EINTR) {
      return failure(std::string("reading from the replica: ") + std::strerror(errno));
    }
  }
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
}

uint64_t ReplicaPool::take_refused() { return refused_in_window_.exchange(0); }

double ReplicaPool::take_concurrency() {
  const double now = monotonic_s();
  std::lock_guard<std::mutex> lock(conc_mu_);
  if (last_change_ >= 0) integral_ += total_outstanding_ * (now - last_change_);
  last_change_ = now;
  const double span = window_start_ < 0 ? 0 : now - window_start_;
  const double mean = span > 0 ? integral_ / span : total_outstanding_;
  integral_ = 0;
  window_start_ = now;
  return mean;
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

std::string ReplicaPool::metrics_text() const { return metrics_ ? metrics_() : ""; }

}  // namespace loom::serve
