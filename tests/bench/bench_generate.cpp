// bench_generate.cpp — `loom-bench generate`: a load generator for a language model served with
// OpenAI's completions API (loom-serve, or any server that speaks it and reports token ids).
// --concurrency closed-loop clients send --requests streamed completions between them; prompt
// and output lengths are drawn from a seeded distribution (uniform within +-50% of the means),
// and a --prefix-share of the prompts begin with one shared --shared-prefix tokens. Reports the
// output tokens/s, requests/s, and the time to first token and inter-token latency percentiles.
// The peers (the same server with --max-num-seqs 1, PyTorch's loop) are run by
// tests/bench/llm_figures.sh, which starts the servers; this only measures.
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.hpp"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

struct GenOptions {
  std::string host = "127.0.0.1", port, model;
  int concurrency = 1, requests = 32, prompt_len = 32, output_len = 64, shared_prefix = 0, vocab = 50257;
  double prefix_share = 0;
  unsigned seed = 1;
  std::string format = "text";
};

struct Request {
  std::vector<int> prompt;
  int max_tokens = 0;
};

struct Outcome {
  double ttft = 0, total = 0;
  std::vector<double> itl;
  int tokens = 0;
  std::string error;
};

std::vector<Request> draw(const GenOptions& o) {
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int> tok(0, o.vocab - 1);
  auto around = [&](int mean) { return std::max(1, std::uniform_int_distribution<int>(mean - mean / 2, mean + mean / 2)(rng)); };
  std::vector<int> prefix(static_cast<size_t>(o.shared_prefix));
  for (auto& t : prefix) t = tok(rng);
  std::vector<Request> out(static_cast<size_t>(o.requests));
  for (auto& r : out) {
    if (o.shared_prefix > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < o.prefix_share) r.prompt = prefix;
    const int n = around(o.prompt_len);
    for (int i = 0; i < n; ++i) r.prompt.push_back(tok(rng));
    r.max_tokens = around(o.output_len);
  }
  return out;
}

std::string body_of(const GenOptions& o, const Request& r) {
  std::string p;
  for (int t : r.prompt) p += (p.empty() ? "" : ",") + std::to_string(t);
  return "{\"model\":\"" + o.model + "\",\"prompt\":[" + p + "],\"max_tokens\":" + std::to_string(r.max_tokens) +
         ",\"temperature\":0,\"ignore_eos\":true,\"stream\":true}";
}

// One streamed completion; a token is an event whose token_ids list is not empty.
Outcome run_one(const GenOptions& o, const Request& r) {
  Outcome out;
  try {
    boost::asio::io_context io;
    tcp::resolver resolver(io);
    beast::tcp_stream s(io);
    s.connect(resolver.resolve(o.host, o.port));
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, o.host);
    req.set(http::field::content_type, "application/json");
    req.body() = body_of(o, r);
    req.prepare_payload();
    const auto t0 = Clock::now();
    auto last = t0;
    http::write(s, req);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> p;
    p.body_limit(1ull << 30);
    std::string pending;
    auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
      pending.append(data.data(), data.size());
      size_t at;
      while ((at = pending.find("\n\n")) != std::string::npos) {
        const std::string event = pending.substr(0, at);
        pending.erase(0, at + 2);
        const size_t ids = event.find("\"token_ids\":[");
        if (ids == std::string::npos || event[ids + 13] == ']') continue;
        const auto now = Clock::now();
        if (out.tokens == 0) out.ttft = std::chrono::duration<double>(now - t0).count();
        else out.itl.push_back(std::chrono::duration<double>(now - last).count());
        last = now;
        ++out.tokens;
      }
      return data.size();
    };
    p.on_chunk_body(on_chunk);
    http::read(s, buf, p);
    out.total = std::chrono::duration<double>(Clock::now() - t0).count();
    if (p.get().result() != http::status::ok) out.error = "HTTP " + std::to_string(p.get().result_int()) + ": " + p.get().body().substr(0, 200);
    else if (out.tokens != r.max_tokens) out.error = std::to_string(out.tokens) + " tokens of " + std::to_string(r.max_tokens);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

GenOptions parse(int argc, char** argv) {
  GenOptions o;
  for (int i = 2; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw BenchUsage(a + " needs a value");
    const std::string v = argv[i + 1];
    if (a == "--url") {
      const size_t colon = v.rfind(':');
      if (colon == std::string::npos) throw BenchUsage("--url must be HOST:PORT");
      o.host = v.substr(0, colon);
      o.port = v.substr(colon + 1);
    } else if (a == "--model") o.model = v;
    else if (a == "--concurrency") o.concurrency = bench_int(a, v);
    else if (a == "--requests") o.requests = bench_int(a, v);
    else if (a == "--prompt-len") o.prompt_len = bench_int(a, v);
    else if (a == "--output-len") o.output_len = bench_int(a, v);
    else if (a == "--shared-prefix") o.shared_prefix = bench_int(a, v, 0);
    else if (a == "--prefix-share") o.prefix_share = bench_real(a, v, 0);
    else if (a == "--vocab") o.vocab = bench_int(a, v);
    else if (a == "--seed") o.seed = static_cast<unsigned>(bench_int(a, v, 0));
    else if (a == "--format") o.format = v;
    else throw BenchUsage("unknown option " + a);
  }
  if (o.port.empty() || o.model.empty()) throw BenchUsage("give --url HOST:PORT and --model NAME");
  if (o.prefix_share > 1) throw BenchUsage("--prefix-share must be from 0 to 1");
  return o;
}

}  // namespace

int bench_generate(int argc, char** argv) {
  const GenOptions o = parse(argc, argv);
  const std::vector<Request> reqs = draw(o);
  std::vector<Outcome> outs(reqs.size());
  std::atomic<size_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; ++c)
    clients.emplace_back([&] {
      for (size_t i; (i = next++) < reqs.size();) outs[i] = run_one(o, reqs[i]);
    });
  for (auto& t : clients) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  long tokens = 0;
  int failed = 0;
  std::vector<double> ttft, itl;
  for (const auto& r : outs) {
    if (!r.error.empty()) {
      if (failed++ == 0) std::fprintf(stderr, "loom-bench generate: a request failed: %s\n", r.error.c_str());
      continue;
    }
    tokens += r.tokens;
    ttft.push_back(r.ttft);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  const double tps = static_cast<double>(tokens) / wall;
  if (o.format == "json") {
    std::printf("{\"concurrency\": %d, \"requests\": %zu, \"failed\": %d, \"output_tokens\": %ld, \"seconds\": %.3f, "
                "\"output_tokens_per_s\": %.1f, \"requests_per_s\": %.2f, \"ttft_p50_ms\": %.2f, \"ttft_p90_ms\": %.2f, "
                "\"ttft_p99_ms\": %.2f, \"itl_p50_ms\": %.2f, \"itl_p90_ms\": %.2f, \"itl_p99_ms\": %.2f}\n",
                o.concurrency, reqs.size(), failed, tokens, wall, tps, static_cast<double>(reqs.size() - static_cast<size_t>(failed)) / wall,
                pct(ttft, 0.5) * 1e3, pct(ttft, 0.9) * 1e3, pct(ttft, 0.99) * 1e3, pct(itl, 0.5) * 1e3, pct(itl, 0.9) * 1e3,
                pct(itl, 0.99) * 1e3);
  } else {
    std::printf("generate: %d clients, %zu requests (%d failed), %ld output tokens in %.2f s: %.1f tokens/s, %.2f requests/s\n"
                "  time to first token p50 %.1f ms, p90 %.1f, p99 %.1f; inter-token latency p50 %.2f ms, p90 %.2f, p99 %.2f\n",
                o.concurrency, reqs.size(), failed, tokens, wall, tps, static_cast<double>(reqs.size() - static_cast<size_t>(failed)) / wall,
                pct(ttft, 0.5) * 1e3, pct(ttft, 0.9) * 1e3, pct(ttft, 0.99) * 1e3, pct(itl, 0.5) * 1e3, pct(itl, 0.9) * 1e3,
                pct(itl, 0.99) * 1e3);
  }
  return failed ? 1 : 0;
}
