// metrics_http.cpp — loom-train's Prometheus endpoint (metrics_http.hpp), on POSIX sockets:
// one fixed GET, so a loop of poll, accept and one bounded read is the whole server.
#include "loom/rt/train/metrics_http.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "loom/rt/error.hpp"
#include "loom/rt/train/train_config.hpp"

namespace loom::rt {
namespace {

constexpr size_t kMaxRequest = 8192;

void gauge(std::ostringstream& o, const char* name, const char* help, const std::string& value, const char* type = "gauge") {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << value << '\n';
}

void send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
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
  std::ostringstream o;
  o << "# HELP loom_train_info The training run (value 1).\n# TYPE loom_train_info gauge\n"
    << "loom_train_info{model=\"" << g.model << "\",ranks=\"" << g.ranks << "\"} 1\n";
  gauge(o, "loom_train_step", "Optimizer steps done.", std::to_string(g.step));
  gauge(o, "loom_train_steps_planned", "Steps the run will make in all.", std::to_string(g.steps_planned));
  gauge(o, "loom_train_epoch", "The epoch being trained.", std::to_string(g.epoch));
  gauge(o, "loom_train_loss", "Training loss of the last step.", num(g.loss));
  gauge(o, "loom_train_samples_per_second", "Training samples per second of the whole job (last step).", num(g.samples_per_s));
  gauge(o, "loom_train_loss_scale", "The AMP loss scale (1 without fp16).", num(g.loss_scale));
  gauge(o, "loom_train_comm_bytes_total", "Gradient bytes sent per rank, summed over the run.", std::to_string(g.comm_bytes),
        "counter");
  o << "# HELP loom_train_rank_batch Rows of the global batch each rank trains on.\n# TYPE loom_train_rank_batch gauge\n";
  for (size_t r = 0; r < g.shares.size(); ++r) o << "loom_train_rank_batch{rank=\"" << r << "\"} " << g.shares[r] << '\n';
  if (g.test_accuracy >= 0) gauge(o, "loom_train_test_accuracy", "Test accuracy of the last evaluation.", num(g.test_accuracy));
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

void MetricsServer::serve() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    answer(fd);
    ::close(fd);
  }
}

void MetricsServer::answer(int fd) {
  std::string req;
  char buf[1024];
  while (req.find("\r\n\r\n") == std::string::npos) {
    if (req.size() > kMaxRequest) return send_all(fd, response("431 Request Header Fields Too Large", "text/plain", "too large\n"));
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;  // closed or too slow
    req.append(buf, static_cast<size_t>(n));
  }
  const std::string line = req.substr(0, req.find("\r\n"));
  if (line.rfind("GET ", 0) != 0) return send_all(fd, response("405 Method Not Allowed", "text/plain", "GET only\n"));
  const std::string target = line.substr(4, line.find(' ', 4) - 4);
  if (target != "/metrics" && target.rfind("/metrics?", 0) != 0)
    return send_all(fd, response("404 Not Found", "text/plain", "loom-train serves /metrics only\n"));
  std::string body;
  {
    std::lock_guard<std::mutex> lock(mu_);
    body = prometheus_text(gauges_);
  }
  send_all(fd, response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body));
}

}  // namespace loom::rt
