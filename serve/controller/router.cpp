// router.cpp — router.hpp: routing, the concurrency integral, and HTTP forwarding over kept-alive
// connections to the replicas (replica_http.hpp, on Beast).
#include "router.hpp"

#include <chrono>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "activator.hpp"
#include "core/kserve_json.hpp"

namespace loom::serve {

double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* state_name(ReplicaState s) {
  switch (s) {
    case ReplicaState::kPending: return "pending";
    case ReplicaState::kStarting: return "starting";
    case ReplicaState::kReady: return "ready";
    case ReplicaState::kDraining: return "draining";
    case ReplicaState::kParked: return "parked";
  }
  return "unknown";
}

Replica::~Replica() = default;

namespace {

// An error body as the protocol writes it (the replica's words may be any bytes).
std::string error_body(const std::string& msg) { return dump_json({{"error", msg}}); }

// A refusal as the router answers it: the status, Retry-After and the protocol's error body.
Forwarder::Response refused(int status, const std::string& why) {
  Forwarder::Response res;
  res.status = status;
  res.client_left = status == 499;
  res.headers = {{"Retry-After", "1"}};
  res.body = error_body(why);
  return res;
}

}  // namespace

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
  std::unique_ptr<ReplicaConnection> conn;
  ResponseParser parser;
  std::unique_ptr<Lease> lease;
};

// Passes a streamed answer's chunks on as they come, until its end or the client's; a replica that
// goes away (or stalls) mid-stream ends it with one error event, so the client does not take what
// it got for the whole answer.
void ReplicaPool::relay(StreamedAnswer& a, const std::string& job, const std::function<bool(const std::string&)>& send) {
  bool client = true;
  auto on_body = [&](std::uint64_t, boost::beast::string_view data, boost::beast::error_code& ec) {
    if (client && !data.empty()) client = send(std::string(data.data(), data.size()));
    if (!client) ec = boost::asio::error::operation_aborted;  // the client went away: stop reading
    return data.size();
  };
  a.parser.on_chunk_body(on_body);  // Beast keeps a reference: on_body outlives the reads
  std::string err;
  bool late = false;
  while (client && !a.parser.is_done() && err.empty()) err = a.conn->read_some(a.parser, timeout_ms_, &late);
  if (client && !a.parser.is_done()) {
    broken_streams_.fetch_add(1);
    send("data: " + error_body("replica " + job + " stopped before the stream's end: " +
                               (err.empty() ? std::string("the connection closed") : err)) + "\n\n");
  }
}

Forwarder::Response ReplicaPool::forward_stream(const std::string& method, const std::string& target,
                                                const std::vector<std::pair<std::string, std::string>>& headers,
                                                const std::string& body, const std::function<bool()>& client_here) {
  Response refusal;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto a = std::make_shared<StreamedAnswer>();
    a->lease = std::make_unique<Lease>(*this, route_one(body.size(), client_here, &refusal));
    if (!*a->lease) return refusal;
    Replica& r = *a->lease->get();
    std::string why;
    a->conn = ReplicaConnection::open(r.host, r.http_port, timeout_ms_, &why);
    if (!a->conn || !a->conn->send(method, target, headers, body, timeout_ms_).empty()) {
      demote(r, monotonic_s());
      continue;
    }
    bool late = false;
    std::string err = a->conn->read_header(a->parser, timeout_ms_, &late);
    if (!err.empty() && !late) {
      demote(r, monotonic_s());
      continue;
    }
    Response res;
    if (err.empty() && a->parser.get().result_int() == 200 && a->parser.chunked()) {
      res.content_type = std::string(a->parser.get()[http::field::content_type]);
      res.stream = [this, a, job = r.job](const std::function<bool(const std::string&)>& send) { relay(*a, job, send); };
      return res;
    }
    if (err.empty()) err = a->conn->read_body(a->parser, timeout_ms_, &late);
    const HttpExchange e = err.empty() ? exchange_of(a->parser) : exchange_failure(err, late);
    res.status = e.status;
    res.body = e.status == 504 ? error_body("replica " + r.job + ": " + e.body) : e.body;
    if (!e.content_type.empty()) res.content_type = e.content_type;
    res.headers = e.headers;
    return res;
  }
  return refused(503, kNoReplica);
}

std::shared_ptr<Replica> ReplicaPool::route_one(size_t bytes, const std::function<bool()>& client_here, Response* refusal) {
  std::shared_ptr<Replica> r;
  int status = 503;
  std::string why = kNoReplica;
  if (activator_ && activator_->should_hold()) r = activator_->wait(bytes, client_here, &status, &why);
  else r = acquire();
  if (!r) *refusal = refused(status, why);
  return r;
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
  auto r = try_acquire();
  if (!r) {
    refused_in_window_.fetch_add(1);
    rejected_.fetch_add(1);
  }
  return r;
}

std::shared_ptr<Replica> ReplicaPool::try_acquire() {
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
  if (!best) return nullptr;
  best->routed.fetch_add(1);
  change_outstanding(+1, true);
  return best;
}

void ReplicaPool::release(Replica& r) {
  r.outstanding.fetch_sub(1);
  change_outstanding(-1, false);
}

void ReplicaPool::waiting(int delta) { change_outstanding(delta, false); }

void ReplicaPool::change_outstanding(int delta, bool begun) {
  const double now = monotonic_s();
  std::lock_guard<std::mutex> lock(conc_mu_);
  if (last_change_ >= 0) integral_ += total_outstanding_ * (now - last_change_);
  last_change_ = now;
  total_outstanding_ += delta;
  if (begun) begun_ += static_cast<uint64_t>(delta);
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

bool ReplicaPool::any_ready() const { return ready_at_zero_ || has_ready(); }

bool ReplicaPool::has_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, r] : replicas_)
    if (r->state == ReplicaState::kReady) return true;
  return false;
}

HttpExchange ReplicaPool::exchange(Replica& r, const std::string& method, const std::string& target,
                                   const Headers& headers, const std::string& body) {
  // A kept-alive connection the replica has closed fails at once: then once more on a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<ReplicaConnection> conn;
    {
      std::lock_guard<std::mutex> lock(r.idle_mu);
      if (!r.idle.empty()) conn = std::move(r.idle.back()), r.idle.pop_back();
    }
    const bool reused = conn != nullptr;
    std::string why;
    if (!conn) conn = ReplicaConnection::open(r.host, r.http_port, timeout_ms_, &why);
    if (!conn) return exchange_failure("replica " + r.job + ": " + why, false);
    HttpExchange e = conn->call(method, target, headers, body, timeout_ms_);
    if (e.status != 0 && e.keep_alive) {
      std::lock_guard<std::mutex> lock(r.idle_mu);
      r.idle.push_back(std::move(conn));
    }
    if (e.status != 0 || !reused) return e;
  }
  return exchange_failure("replica " + r.job + " closed the connection", false);
}

Forwarder::Response ReplicaPool::forward_http(const std::string& method, const std::string& target,
                                              const std::vector<std::pair<std::string, std::string>>& headers,
                                              const std::string& body, const std::function<bool()>& client_here) {
  if (streamed(target, body)) return forward_stream(method, target, headers, body, client_here);
  Response res;
  // A replica that cannot be reached (cancelled, crashed, its node gone) is taken out of
  // routing until the controller's health check brings it back, and the request goes to the
  // next one: a client sees an answer or a 503, never the router's trouble.
  for (int attempt = 0; attempt < 3; ++attempt) {
    Lease lease(*this, route_one(body.size(), client_here, &res));
    if (!lease) return res;
    HttpExchange e = exchange(*lease.get(), method, target, headers, body);
    if (e.status == 0) {
      demote(*lease.get(), monotonic_s());
      continue;
    }
    res.status = e.status;
    res.body = std::move(e.body);
    if (e.status == 504) res.body = error_body("replica " + lease->job + ": " + res.body);
    if (!e.content_type.empty()) res.content_type = e.content_type;
    res.headers = std::move(e.headers);
    return res;
  }
  return refused(503, kNoReplica);
}

// A GET on a connection of its own (the replica's keep-alive pool is the requests').
HttpExchange ReplicaPool::get(Replica& r, const std::string& target, const Headers& headers, int timeout_ms) {
  std::string why;
  auto conn = ReplicaConnection::open(r.host, r.http_port, timeout_ms, &why);
  return conn ? conn->call("GET", target, headers, "", timeout_ms) : exchange_failure(why, false);
}

bool ReplicaPool::health_check(Replica& r, int timeout_ms) { return get(r, "/v2/health/ready", {}, timeout_ms).status == 200; }

double ReplicaPool::sequences(Replica& r, int timeout_ms, const std::string& authorization) {
  Headers h;
  if (!authorization.empty()) h.emplace_back("Authorization", authorization);
  const HttpExchange e = get(r, "/metrics", h, timeout_ms);
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
