// controller_test.cpp — the serving controller's parts without Slurm: the autoscaler's windows,
// panic and scale-down delay (Knative's KPA), memory quantities as sbatch --mem, the replica
// script, and the router's choice (fewest outstanding, caps, unreachable replicas) against
// real sockets.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "controller/activator.hpp"
#include "controller/autoscaler.hpp"
#include "controller/router.hpp"
#include "controller/slurm.hpp"

namespace {

using namespace loom::serve;

ScalerConfig config(int min, int max, double target) {
  ScalerConfig c;
  c.min_replicas = min;
  c.max_replicas = max;
  c.target = target;
  c.stable_window_s = 60;
  c.panic_window_s = 6;
  c.scale_down_delay_s = 30;
  return c;
}

TEST(Autoscaler, StableWindowAveragesConcurrencyOverTarget) {
  Autoscaler a(config(1, 10, 5));
  for (int t = 0; t < 60; ++t) a.sample(t, 12);  // 12 in flight, 5 per replica: 3 replicas
  const ScaleDecision d = a.decide(60, 3);
  EXPECT_EQ(d.desired, 3);
  EXPECT_FALSE(d.panic);
  EXPECT_NEAR(d.stable_concurrency, 12, 1e-9);
}

TEST(Autoscaler, ClampsToMinAndMax) {
  Autoscaler idle(config(2, 10, 5));
  EXPECT_EQ(idle.decide(0, 0).desired, 2);
  Autoscaler flood(config(1, 4, 1));
  for (int t = 0; t < 60; ++t) flood.sample(t, 100);
  EXPECT_EQ(flood.decide(60, 4).desired, 4);
}

TEST(Autoscaler, ScalesToZeroOnlyAfterTheGracePeriod) {
  ScalerConfig c = config(0, 3, 1);
  c.stable_window_s = 10, c.panic_window_s = 2, c.scale_down_delay_s = 5, c.scale_to_zero_grace_s = 20;
  Autoscaler a(c);
  EXPECT_EQ(a.decide(0, 0).desired, 0);  // no request yet: no replica
  a.sample(1, 1);  // one held request asks for one
  EXPECT_EQ(a.decide(1, 0).desired, 1);
  int t = 2, zero_at = -1;
  for (; t < 100; ++t) {
    a.sample(t, 0);
    if (a.decide(t, 1).desired == 0) {
      zero_at = t;
      break;
    }
  }
  // The stable window empties at 11, the delay holds to 16, then the grace keeps it to 36.
  EXPECT_GE(zero_at, 1 + 10 + 5 + 20 - 1);
  EXPECT_LE(zero_at, 1 + 10 + 5 + 20 + 2);
  a.sample(t + 1, 2);  // demand again: straight back, no grace on the way up
  EXPECT_GE(a.decide(t + 1, 0).desired, 1);
}

TEST(Autoscaler, BurstPanicsOnTheShortWindow) {
  Autoscaler a(config(1, 10, 1));
  for (int t = 0; t < 55; ++t) a.sample(t, 1);
  for (int t = 55; t <= 60; ++t) a.sample(t, 6);  // the last 6 s: 6 in flight, 1 replica ready
  const ScaleDecision d = a.decide(60, 1);
  EXPECT_TRUE(d.panic);
  EXPECT_EQ(d.desired, 6);  // the stable window alone would ask for ceil(1.4) = 2
  EXPECT_LT(std::ceil(d.stable_concurrency), 3);
}

TEST(Autoscaler, NoScaleDownInPanicNorBeforeTheDelay) {
  Autoscaler a(config(1, 10, 1));
  for (int t = 0; t <= 6; ++t) a.sample(t, 8);
  EXPECT_EQ(a.decide(6, 1).desired, 8);
  // The burst stops: still panicking (a stable window from the last trigger), so no fewer.
  for (int t = 7; t <= 20; ++t) {
    a.sample(t, 0);
    EXPECT_EQ(a.decide(t, 8).desired, 8) << "t=" << t;
  }
  // Out of panic after 60 s; then the scale-down delay holds the highest wish for 30 s more.
  int t = 21;
  for (; t <= 200; ++t) {
    a.sample(t, 0);
    if (a.decide(t, 8).desired < 8) break;
  }
  EXPECT_GE(t, 6 + 60 + 30 - 1);
  EXPECT_LE(t, 6 + 60 + 30 + 2);
  for (int u = t + 1; u < t + 100; ++u) a.sample(u, 0);
  EXPECT_EQ(a.decide(t + 100, 8).desired, 1);
}

TEST(Autoscaler, ScaleFromZeroOnDemand) {
  Autoscaler a(config(0, 3, 5));
  EXPECT_EQ(a.decide(0, 0).desired, 0);
  a.sample(1, 1);  // one refused request is demand
  EXPECT_EQ(a.decide(1, 0).desired, 1);
}

TEST(SlurmMemory, KServeQuantitiesAsMiB) {
  EXPECT_EQ(slurm_memory("8Gi"), "8192M");
  EXPECT_EQ(slurm_memory("512Mi"), "512M");
  EXPECT_EQ(slurm_memory("1G"), "954M");   // 10^9 bytes, rounded up
  EXPECT_EQ(slurm_memory("2048Ki"), "2M");
  EXPECT_EQ(slurm_memory("1Ti"), "1048576M");
  EXPECT_EQ(slurm_memory("100"), "1M");    // bytes: at least 1 MiB
  EXPECT_EQ(slurm_memory(""), "");
}

TEST(ReplicaScript, QuotesEveryPathAndAnnouncesTheJob) {
  char tmpl[] = "/tmp/loom-ctl-test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  write_replica_script(dir, "/opt/loom serve/bin/loom-serve", "/specs/it's.yaml", "0.0.0.0", "", {"--max-batch-size", "8"}, 1);
  std::ifstream f(dir + "/replica.sh");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  EXPECT_NE(s.find("exec srun --ntasks=1 --cpus-per-task=\"${SLURM_CPUS_PER_TASK:-1}\" $place '/opt/loom serve/bin/loom-serve' --spec "
                   "'/specs/it'\\''s.yaml' --bind 0.0.0.0"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("place=--loom-bind=gpu"), std::string::npos) << s;
  EXPECT_NE(s.find("--ready-file " + dir + "/replicas/\"$SLURM_JOB_ID.json\""), std::string::npos) << s;
  EXPECT_NE(s.find("--max-batch-size 8"), std::string::npos);
  EXPECT_EQ(s.find("--auth-token-file"), std::string::npos);
  EXPECT_EQ(ready_file(dir, "42"), dir + "/replicas/42.json");
  ::unlink((dir + "/replica.sh").c_str());
  ::rmdir((dir + "/replicas").c_str());
  ::rmdir(dir.c_str());
}

TEST(ReplicaFiles, EndedJobsLoseTheirReadyFileAndAllButTheNewestLogs) {
  char tmpl[] = "/tmp/loom-ctl-test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, rep = dir + "/replicas";
  ASSERT_EQ(::mkdir(rep.c_str(), 0755), 0);
  auto touch = [&](const std::string& name, time_t mtime) {
    std::ofstream(rep + "/" + name) << "x";
    const struct timeval tv[2] = {{mtime, 0}, {mtime, 0}};
    ::utimes((rep + "/" + name).c_str(), tv);
  };
  for (int j = 1; j <= 5; ++j) touch(std::to_string(j) + ".log", 1000 + j);  // 5 the newest
  touch("3.json", 1000);  // job 3 was killed: its ready file stayed
  touch("6.json", 1000);  // job 6 is live
  touch("6.log", 1000);
  touch("notes.txt", 1000);  // not a replica's: never touched
  EXPECT_EQ(prune_replica_files(dir, {"6"}, 2), 4);  // 3.json, 1.log, 2.log, 3.log
  auto exists = [&](const std::string& name) { return ::access((rep + "/" + name).c_str(), F_OK) == 0; };
  for (const char* kept : {"4.log", "5.log", "6.json", "6.log", "notes.txt"}) EXPECT_TRUE(exists(kept)) << kept;
  for (const char* gone : {"1.log", "2.log", "3.log", "3.json"}) EXPECT_FALSE(exists(gone)) << gone;
  EXPECT_EQ(prune_replica_files(dir, {"6"}, 2), 0);
  EXPECT_EQ(prune_replica_files(dir + "/nowhere", {}, 2), 0);
  for (const char* f : {"4.log", "5.log", "6.json", "6.log", "notes.txt"}) ::unlink((rep + "/" + f).c_str());
  ::rmdir(rep.c_str());
  ::rmdir(dir.c_str());
}

// A loopback TCP socket bound to a free port (listening when asked); its port in *port.
int loopback_socket(bool listening, int* port) {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  if (listening && ::listen(s, 4) != 0) return -1;
  socklen_t len = sizeof addr;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  *port = ntohs(addr.sin_port);
  return s;
}

std::shared_ptr<Replica> replica(const std::string& job, ReplicaState s, int outstanding) {
  auto r = std::make_shared<Replica>();
  r->job = job;
  r->state = s;
  r->outstanding = outstanding;
  return r;
}

TEST(ReplicaPool, FewestOutstandingReadyBelowTheCap) {
  ReplicaPool pool(4, 1000);
  pool.put(replica("1", ReplicaState::kReady, 3));
  pool.put(replica("2", ReplicaState::kReady, 1));
  pool.put(replica("3", ReplicaState::kStarting, 0));
  pool.put(replica("4", ReplicaState::kDraining, 0));
  auto a = pool.acquire();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->job, "2");
  EXPECT_EQ(a->outstanding.load(), 2);
  auto b = pool.acquire();
  EXPECT_EQ(b->job, "2");  // 2 of 4 against 3 of 4
  auto c = pool.acquire();
  EXPECT_TRUE(c->job == "1" || c->job == "2");
  auto d = pool.acquire();
  EXPECT_TRUE(d);
  EXPECT_FALSE(pool.acquire()) << "both at the cap: refused";
  EXPECT_EQ(pool.rejected(), 1u);
  pool.release(*a);
  EXPECT_TRUE(pool.acquire());
}

TEST(ReplicaPool, ConcurrencyIsTheTimeAverageOfOutstanding) {
  ReplicaPool pool(100, 1000);
  pool.put(replica("1", ReplicaState::kReady, 0));
  pool.take_load();
  auto a = pool.acquire();
  auto b = pool.acquire();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pool.release(*a);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const ReplicaPool::Load l = pool.take_load();  // 2 for half the time, 1 for the other half
  EXPECT_NEAR(l.concurrency, 1.5, 0.2);
  EXPECT_NEAR(l.rate, 10.0, 2.0) << "2 requests begun in 0.2 s";  // KServe's scaleMetric: rps
  EXPECT_EQ(pool.take_load().rate, 0.0) << "none begun since";
  pool.release(*b);
}

TEST(ReplicaPool, AnUnreachableReplicaIsTakenOutAndTheRequestGoesOn) {
  // A port nothing listens on: bind one, then close it.
  int port = 0;
  const int s = loopback_socket(false, &port);
  ASSERT_GE(s, 0);
  ::close(s);
  ReplicaPool pool(8, 1000);
  auto dead = replica("7", ReplicaState::kReady, 0);
  dead->host = "127.0.0.1";
  dead->http_port = port;
  pool.put(dead);
  const auto res = pool.forward_http("POST", "/v2/models/m/infer", {}, "{}");
  EXPECT_EQ(res.status, 503);
  ASSERT_EQ(res.headers.size(), 1u);
  EXPECT_EQ(res.headers[0].first, "Retry-After");
  EXPECT_EQ(dead->state.load(), ReplicaState::kStarting) << "no longer routed to";
  EXPECT_EQ(dead->outstanding.load(), 0);
  EXPECT_FALSE(pool.any_ready());
}

// The activator: with no replica ready, requests wait (in order, within the bound), count as
// demand, and go the moment one is ready; past the timeout they are refused 503.
TEST(Activator, HoldsUntilAReplicaIsReadyThenHandsOnInOrder) {
  ReplicaPool pool(1, 1000);  // one request at a time per replica: the order shows
  Activator act(pool, {3, 1000, 30});
  pool.set_activator(&act);
  int pokes = 0;
  act.on_hold = [&] { ++pokes; };
  EXPECT_TRUE(act.should_hold()) << "no replica";
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::shared_ptr<Replica>> got;
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(act.hold(10, monotonic_s() + 30, [&, i](std::shared_ptr<Replica> r, int status, const std::string&) {
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(status, 200);
      order.push_back(i);
      got.push_back(r);
    }), 0u);
  EXPECT_EQ(act.hold(10, monotonic_s() + 30, [](auto, int, const auto&) {}), 0u) << "a fourth is over the bound";
  EXPECT_EQ(pokes, 3);
  EXPECT_EQ(act.held(), 3u);
  pool.take_load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NEAR(pool.take_load().concurrency, 3, 0.3) << "held requests are demand";
  auto r = replica("1", ReplicaState::kReady, 0);
  pool.put(r);
  act.wake();
  for (int k = 0; k < 100; ++k) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!got.empty()) {
        pool.release(*got.back());  // answered: the replica takes the next
        got.pop_back();
        if (order.size() == 3) break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(act.held(), 0u);
  EXPECT_NE(act.metrics_text().find("loom_controller_held_total{outcome=\"forwarded\"} 3"), std::string::npos) << act.metrics_text();
}

TEST(Activator, TimesOutWith503AndDropsAClientThatLeft) {
  ReplicaPool pool(4, 1000);
  Activator act(pool, {10, 1000, 0.2});
  int status = 0;
  std::string why;
  const double t0 = monotonic_s();
  EXPECT_FALSE(act.wait(5, [] { return true; }, &status, &why));
  EXPECT_EQ(status, 503);
  EXPECT_NE(why.find("no replica became ready within 0.2 s"), std::string::npos) << why;
  EXPECT_NEAR(monotonic_s() - t0, 0.2, 0.15);
  Activator patient(pool, {10, 1000, 30});
  EXPECT_FALSE(patient.wait(5, [] { return false; }, &status, &why)) << "the client is gone";
  EXPECT_EQ(status, 499);
  EXPECT_EQ(patient.held(), 0u);
  patient.stop();
  EXPECT_FALSE(patient.wait(5, [] { return true; }, &status, &why));
  EXPECT_EQ(status, 503) << "stopping: refused at once";
}

// A peer that takes the connection and closes it without a byte (what a replica does to a
// kept-alive connection it timed out): an error the router can retry, not a crash.
TEST(ReplicaConnection, APeerThatClosesAtOnceIsAFailureNotACrash) {
  int port = 0;
  const int ls = loopback_socket(true, &port);
  ASSERT_GE(ls, 0);
  std::thread peer([ls] {
    for (int i = 0; i < 2; ++i) {
      const int c = ::accept(ls, nullptr, nullptr);
      if (i == 1) {  // the second answers half a header, then closes
        const char half[] = "HTTP/1.1 200 OK\r\nContent-Len";
        (void)!::write(c, half, sizeof half - 1);
      }
      ::close(c);
    }
  });
  for (int i = 0; i < 2; ++i) {
    std::string why;
    auto conn = ReplicaConnection::open("127.0.0.1", port, 1000, &why);
    ASSERT_TRUE(conn) << why;
    const HttpExchange e = conn->call("POST", "/v2/models/m/infer", {}, "{}", 2000);
    EXPECT_EQ(e.status, 0) << i;
    EXPECT_NE(e.body.find("replica"), std::string::npos) << e.body;  // closed, or reset
  }
  peer.join();
  ::close(ls);
}

// A replica that takes the request and never answers: 504 within the timeout, naming the
// replica; it stays routed (the request may still be running there, so it is not retried).
TEST(ReplicaPool, AReplicaThatNeverAnswersIs504NotARetry) {
  int port = 0;
  const int ls = loopback_socket(true, &port);
  ASSERT_GE(ls, 0);
  std::thread peer([ls] {
    const int c = ::accept(ls, nullptr, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::close(c);
  });
  ReplicaPool pool(8, 500);
  auto r = replica("8", ReplicaState::kReady, 0);
  r->host = "127.0.0.1";
  r->http_port = port;
  pool.put(r);
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = pool.forward_http("POST", "/v2/models/m/infer", {}, "{}");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1400));
  EXPECT_EQ(res.status, 504);
  const auto j = nlohmann::json::parse(res.body);
  EXPECT_NE(j["error"].get<std::string>().find("replica 8: the replica did not answer within 500 ms"), std::string::npos) << res.body;
  EXPECT_EQ(r->state.load(), ReplicaState::kReady);
  peer.join();
  ::close(ls);
}

}  // namespace

// A replica that answers generate_stream with two server-sent events 300 ms apart, or a 400, or
// (dies) one event and then its connection closes, as when the replica's job is killed.
void stream_peer(int ls, bool ok, bool dies = false) {
  const int c = ::accept(ls, nullptr, nullptr);
  std::string req;
  char buf[4096];
  while (req.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::read(c, buf, sizeof buf);
    if (n <= 0) break;
    req.append(buf, static_cast<size_t>(n));
  }
  auto put = [c](const std::string& s) { (void)!::write(c, s.data(), s.size()); };
  if (!ok) {
    put("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"error\":\"nope\"}\n");
  } else {
    put("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    put("9\r\ndata: a\n\n\r\n");
    if (dies) {
      ::close(c);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    put("9\r\ndata: b\n\n\r\n0\r\n\r\n");
  }
  ::close(c);
}

// A ready replica "9" at 127.0.0.1:port, in the pool.
std::shared_ptr<Replica> local_replica(ReplicaPool& pool, int port) {
  auto r = replica("9", ReplicaState::kReady, 0);
  r->host = "127.0.0.1";
  r->http_port = port;
  pool.put(r);
  return r;
}

TEST(ReplicaPool, GenerateStreamPassesEachEventAsItComes) {
  int port = 0;
  const int ls = loopback_socket(true, &port);
  ASSERT_GE(ls, 0);
  ReplicaPool pool(8, 5000);
  auto r = local_replica(pool, port);
  std::thread peer(stream_peer, ls, true, false);
  auto res = pool.forward_http("POST", "/v2/models/g/generate_stream", {}, "{\"text_input\":\"x\"}");
  ASSERT_TRUE(res.stream) << res.status << " " << res.body;
  EXPECT_EQ(res.content_type, "text/event-stream");
  std::vector<std::pair<std::string, double>> got;
  const auto t0 = std::chrono::steady_clock::now();
  res.stream([&](const std::string& piece) {
    got.emplace_back(piece, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return true;
  });
  peer.join();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, "data: a\n\n");
  EXPECT_EQ(got[1].first, "data: b\n\n");
  EXPECT_GT(got[1].second - got[0].second, 0.2) << "the first event waited for the second";
  res = {};  // the stream's lease goes with it
  EXPECT_EQ(r->outstanding.load(), 0);
  std::thread refusing(stream_peer, ls, false, false);  // a replica's error comes back as it was, not as a stream
  res = pool.forward_http("POST", "/v2/models/g/generate_stream", {}, "{}");
  refusing.join();
  EXPECT_FALSE(res.stream);
  EXPECT_EQ(res.status, 400);
  EXPECT_EQ(res.body, "{\"error\":\"nope\"}\n");
  // The replica dies mid-stream: the client gets what came, then an error event, never a
  // clean end (it took 461 events for the whole answer; issue 33, item 6).
  std::thread dying(stream_peer, ls, true, true);
  res = pool.forward_http("POST", "/v2/models/g/generate_stream", {}, "{}");
  ASSERT_TRUE(res.stream);
  got.clear();
  res.stream([&](const std::string& piece) {
    got.emplace_back(piece, 0.0);
    return true;
  });
  dying.join();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, "data: a\n\n");
  EXPECT_EQ(got[1].first.rfind("data: {\"error\":\"replica 9 stopped before the stream's end", 0), 0u) << got[1].first;
  EXPECT_EQ(pool.broken_streams(), 1u);
  ::close(ls);
}

// OpenAI completions asking for a stream take the same path: each event as it comes.
TEST(ReplicaPool, OpenAIStreamsPassEachEventAsItComes) {
  int port = 0;
  const int ls = loopback_socket(true, &port);
  ASSERT_GE(ls, 0);
  ReplicaPool pool(8, 5000);
  auto r = local_replica(pool, port);
  std::thread peer(stream_peer, ls, true, false);
  auto res = pool.forward_http("POST", "/v1/completions", {}, R"({"model":"g","prompt":"x","stream":true})");
  ASSERT_TRUE(res.stream);
  std::vector<double> at;
  const auto t0 = std::chrono::steady_clock::now();
  res.stream([&](const std::string&) {
    at.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return true;
  });
  peer.join();
  ASSERT_EQ(at.size(), 2u);
  EXPECT_GT(at[1] - at[0], 0.2) << "the first event waited for the second";
  res = {};
  std::thread plain(stream_peer, ls, true, false);  // without "stream": true, one answer
  res = pool.forward_http("POST", "/v1/completions", {}, R"({"model":"g","prompt":"x"})");
  plain.join();
  EXPECT_FALSE(res.stream);
  ::close(ls);
}

// The autoscaler's count for a language model: running + waiting sequences from /metrics.
TEST(ReplicaPool, SequencesAreReadFromTheReplicasMetrics) {
  int port = 0;
  const int ls = loopback_socket(true, &port);
  ASSERT_GE(ls, 0);
  auto answer = [ls](const std::string& body, std::string* request) {
    const int c = ::accept(ls, nullptr, nullptr);
    char buf[4096];
    const ssize_t n = ::read(c, buf, sizeof buf);
    if (n > 0) request->assign(buf, static_cast<size_t>(n));
    const std::string res = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    (void)!::write(c, res.data(), res.size());
    ::close(c);
  };
  ReplicaPool pool(8, 5000);
  auto r = replica("9", ReplicaState::kReady, 0);
  r->host = "127.0.0.1";
  r->http_port = port;
  std::string req;
  std::thread a(answer,
                "# HELP loom_llm_running_sequences x\nloom_llm_running_sequences{model=\"g\",version=\"1\"} 5\n"
                "loom_llm_waiting_sequences{model=\"g\",version=\"1\"} 3\nloom_llm_running_sequences{model=\"g\",version=\"2\"} 1\n",
                &req);
  EXPECT_EQ(pool.sequences(*r, 1000, "Bearer t0k"), 9.0);
  a.join();
  EXPECT_NE(req.find("GET /metrics"), std::string::npos);
  EXPECT_NE(req.find("Authorization: Bearer t0k"), std::string::npos);
  std::thread b(answer, "loom_requests_total 4\n", &req);  // not a language model
  EXPECT_EQ(pool.sequences(*r, 1000, ""), -1.0);
  b.join();
  ::close(ls);
}
