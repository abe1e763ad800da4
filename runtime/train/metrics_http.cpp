// metrics_http.cpp — loom-train's Prometheus endpoint (metrics_http.hpp), on POSIX sockets:
// one fixed GET, so one poll loop over a few non-blocking connections is the whole server.
#include "loom/rt/train/metrics_http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/io/prometheus.hpp"
#include "loom/rt/train/train_config.hpp"

namespace loom::rt {
namespace {

constexpr size_t kMaxRequest = 8192;
constexpr size_t kMaxClients = 16;
constexpr auto kRequestDeadline = std::chrono::seconds(2);

// The answer is a few KiB: it fits the socket's buffer, so a non-blocking send writes it whole
// unless the client stopped reading long ago (then it is dropped, never waited for).
void send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string response(const char* status, const char* type, const std::string& body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

std::string prometheus_text(const TrainGauges& g) {
  PrometheusText o;
  o.family("loom_train_info", "gauge", "The training run (value 1).");
  o.sample("loom_train_info", {{"model", g.model}, {"ranks", std::to_string(g.ranks)}}, 1);
  o.single("loom_train_step", "gauge", "Optimizer steps done.", static_cast<double>(g.step));
  o.single("loom_train_steps_planned", "gauge", "Steps the run will make in all.", static_cast<double>(g.steps_planned));
  o.single("loom_train_epoch", "gauge", "The epoch being trained.", static_cast<double>(g.epoch));
  o.single("loom_train_loss", "gauge", "Training loss of the last step.", g.loss);
  o.single("loom_train_samples_per_second", "gauge", "Training samples per second of the whole job (last step).", g.samples_per_s);
  o.single("loom_train_loss_scale", "gauge", "The AMP loss scale (1 without fp16).", g.loss_scale);
  o.single("loom_train_comm_bytes_total", "counter", "Gradient bytes sent per rank, summed over the run.",
           static_cast<double>(g.comm_bytes));
  o.family("loom_train_rank_batch", "gauge", "Rows of the global batch each rank trains on.");
  for (size_t r = 0; r < g.shares.size(); ++r) o.sample("loom_train_rank_batch", {{"rank", std::to_string(r)}}, g.shares[r]);
  if (g.test_accuracy >= 0) o.single("loom_train_test_accuracy", "gauge", "Test accuracy of the last evaluation.", g.test_accuracy);
  return o.str();
}

MetricsServer::MetricsServer(const std::string& bind, int port) {
  if (port < 0 || port > 65535) throw Error("--metrics-port must be 0..65535, not " + std::to_string(port));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, bind.c_str(), &addr.sin_addr) != 1)
    throw Error("--metrics-bind: '" + bind + "' is not an IPv4 address");
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0) {
    const std::string why = std::strerror(errno);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    throw Error("--metrics-port: cannot listen on " + bind + ":" + std::to_string(port) + ": " + why);
  }
  socklen_t len = sizeof addr;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

// One poll loop over the listening socket and up to kMaxClients connections, each with a
// whole-request deadline: a client that sends slowly (or nothing) holds only its own slot, for at
// most kRequestDeadline, and the loop sees stop_ within 100 ms, so the server never delays exit.
void MetricsServer::serve() {
  struct Conn {
    int fd;
    std::string req;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<Conn> conns;
  std::vector<pollfd> fds;
  while (!stop_) {
    fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
    for (const auto& c : conns) fds.push_back(pollfd{c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) break;
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = conns.size(); i-- > 0;) {
      Conn& c = conns[i];
      bool done = now >= c.deadline;  // too slow: dropped without an answer
      if (!done && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) done = answer(c.fd, c.req);
      if (done) {
        ::close(c.fd);
        conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0 && conns.size() >= kMaxClients) ::close(fd);  // full: the scraper tries again
      else if (fd >= 0) conns.push_back({fd, {}, now + kRequestDeadline});
    }
  }
  for (const auto& c : conns) ::close(c.fd);
}

// Reads what has arrived; true when the connection is finished (answered, refused or closed).
bool MetricsServer::answer(int fd, std::string& req) {
  char buf[1024];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) return true;
    if (n < 0) return !(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    req.append(buf, static_cast<size_t>(n));
    if (req.find("\r\n\r\n") != std::string::npos) break;
    if (req.size() > kMaxRequest) {
      send_all(fd, response("431 Request Header Fields Too Large", "text/plain", "too large\n"));
      return true;
    }
  }
  const std::string line = req.substr(0, req.find("\r\n"));
  if (line.rfind("GET ", 0) != 0) {
    send_all(fd, response("405 Method Not Allowed", "text/plain", "GET only\n"));
    return true;
  }
  const std::string target = line.substr(4, line.find(' ', 4) - 4);
  if (target != "/metrics" && target.rfind("/metrics?", 0) != 0) {
    send_all(fd, response("404 Not Found", "text/plain", "loom-train serves /metrics only\n"));
    return true;
  }
  std::string body;
  {
    std::lock_guard<std::mutex> lock(mu_);
    body = prometheus_text(gauges_);
  }
  send_all(fd, response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body));
  return true;
}

}  // namespace loom::rt
