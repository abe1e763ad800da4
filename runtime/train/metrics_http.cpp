// metrics_http.cpp — loom-train's Prometheus endpoint (metrics_http.hpp) on Boost.Beast, the
// HTTP stack loom-serve uses: one thread runs the accept loop and every connection
// asynchronously, each with a whole-request deadline, so a slow client holds only its own slot.
#include "loom/rt/train/metrics_http.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "loom/rt/error.hpp"
#include "loom/rt/io/prometheus.hpp"

#ifdef LOOM_HAVE_BEAST
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#endif

namespace loom::rt {

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

std::string MetricsServer::scrape_text() {
  std::lock_guard<std::mutex> lock(mu_);
  return prometheus_text(gauges_);
}

#ifdef LOOM_HAVE_BEAST

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr size_t kMaxRequest = 8192;
constexpr int kMaxClients = 16;
constexpr auto kRequestDeadline = std::chrono::seconds(2);

// One connection: read a request within the deadline, answer it, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, std::function<std::string()> text, std::atomic<int>& clients)
      : stream_(std::move(s)), text_(std::move(text)), clients_(clients) {}
  ~Session() { --clients_; }
  void start() {
    parser_.header_limit(kMaxRequest);
    parser_.body_limit(kMaxRequest);
    stream_.expires_after(kRequestDeadline);
    http::async_read(stream_, buf_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit || ec == http::error::body_limit)
      return reply(http::status::request_header_fields_too_large, "too large\n");
    if (ec) return;  // closed, or too slow: dropped without an answer
    const auto& req = parser_.get();
    if (req.method() != http::verb::get) return reply(http::status::method_not_allowed, "GET only\n");
    const std::string target(req.target());
    if (target != "/metrics" && target.rfind("/metrics?", 0) != 0)
      return reply(http::status::not_found, "loom-train serves /metrics only\n");
    reply(http::status::ok, text_(), "text/plain; version=0.0.4; charset=utf-8");
  }
  void reply(http::status status, std::string body, const char* type = "text/plain") {
    res_.result(status);
    res_.set(http::field::content_type, type);
    res_.keep_alive(false);
    res_.body() = std::move(body);
    res_.prepare_payload();
    stream_.expires_after(kRequestDeadline);
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code, size_t) {
      beast::error_code ignored;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    });
  }
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  http::request_parser<http::string_body> parser_;
  http::response<http::string_body> res_;
  std::function<std::string()> text_;
  std::atomic<int>& clients_;
};

}  // namespace

// Declared so that the io_context, whose pending handlers hold the sessions, goes before what
// the sessions use.
struct MetricsServer::Impl {
  std::atomic<int> clients{0};
  std::function<std::string()> text;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec && clients < kMaxClients) {  // full: closed, the scraper tries again
        ++clients;
        std::make_shared<Session>(std::move(s), text, clients)->start();
      }
      accept();
    });
  }
};

MetricsServer::MetricsServer(const std::string& bind, int port) : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) throw Error("--metrics-port must be 0..65535, not " + std::to_string(port));
  beast::error_code ec;
  const auto addr = asio::ip::make_address_v4(bind, ec);
  if (ec) throw Error("--metrics-bind: '" + bind + "' is not an IPv4 address");
  const tcp::endpoint at(addr, static_cast<uint16_t>(port));
  auto& a = impl_->acceptor;
  a.open(at.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(at, ec);
  if (!ec) a.listen(kMaxClients, ec);
  if (ec) throw Error("--metrics-port: cannot listen on " + bind + ":" + std::to_string(port) + ": " + ec.message());
  port_ = a.local_endpoint().port();
  impl_->text = [this] { return scrape_text(); };
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
}

// Stopping drops every connection at once: the server never delays the run's exit.
MetricsServer::~MetricsServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

#else

struct MetricsServer::Impl {};

MetricsServer::MetricsServer(const std::string&, int) {
  throw Error("--metrics-port needs a build with Boost.Beast (apt-get install libboost-dev)");
}
MetricsServer::~MetricsServer() = default;

#endif

}  // namespace loom::rt
