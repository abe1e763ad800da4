// cli.cpp — what loom-compress's subcommands share (cli.hpp).
#include "cli.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "loom/rt/io/data.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/io/text.hpp"

namespace loom::compress {

namespace {

std::string pct(double before, double after) {
  char b[64];
  std::snprintf(b, sizeof b, "%+.1f%%", 100.0 * (after - before) / before);
  return b;
}

}  // namespace

void add_train_options(po::options_description& d, TrainOpts& t) {
  d.add(rt::train_options(t.c, t.in,
                          {"data", "global-batch", "lr", "optimizer", "momentum", "lr-schedule", "seed", "threads", "ckpt-dir",
                           "ckpt-every", "resume", "tensorboard"},
                          "training options (loom-train's)"));
}

std::string data_dir(const std::string& data) {
  if (data.rfind("text:", 0) == 0 || data.rfind("tokens:", 0) == 0)
    throw Usage{"--data " + data.substr(0, data.find(':')) + ":... is for a gpt; an mlp takes fashion-mnist[:DIR]"};
  if (data == "fashion-mnist") return rt::kFashionMnistDir;
  if (data.rfind("fashion-mnist:", 0) == 0 && data.size() > 14) return data.substr(14);
  throw Usage{"--data must be fashion-mnist or fashion-mnist:DIR, not '" + data + "'"};
}

// loom-train's configuration from the options: an mlp on fashion-mnist[:DIR], or a gpt on text:FILE or tokens:PATTERN.
rt::TrainConfig train_config(const TrainOpts& t, const std::string& model) {
  rt::TrainConfig c = t.c;
  c.model = parse_choice<rt::ModelKind>(model);
  const std::string data = t.in.data.empty() ? "fashion-mnist" : t.in.data;
  if (model == "mlp") c.data_dir = data_dir(data);
  else {
    const GptData d = gpt_data(data, "--data");
    c.text_path = d.text;
    c.token_files = d.tokens;
  }
  c.device = rt::DeviceChoice::kCpu;
  c.seed = rt::parse_seed(t.in.seed);
  if (c.ckpt_every < 0) throw Usage{"--ckpt-every must not be negative"};
  rt::validate(c);
  return c;
}

po::variables_map parse(int argc, char** argv, const po::options_description& d, const char* positional, int count) {
  po::positional_options_description pos;
  if (positional) pos.add(positional, count);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(d).positional(pos).run(), vm);
  po::notify(vm);
  return vm;
}

bool wants_help(int argc, char** argv, const std::string& name, const po::options_description& d) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << "usage: loom-compress " << name << " [options]\n" << d;
      return true;
    }
  return false;
}

void require(const po::variables_map& vm, const char* opt, const std::string& cmd) {
  if (!vm.count(opt)) throw Usage{cmd + " needs --" + std::string(opt)};
}

void train_log(const std::string& line) { std::cerr << line << "\n"; }

void print_side_by_side(const ModelReport& a, const ModelReport& b, const char* what) {
  std::printf("%-15s %-18s %-18s\n", "", "before", what);
  std::printf("%-15s %-18s %-18s\n", "layers", a.layers.c_str(), b.layers.c_str());
  std::printf("%-15s %-18s %-18s\n", "precision", a.precision.c_str(), b.precision.c_str());
  std::printf("%-15s %-18lld %-18lld %s\n", "params", static_cast<long long>(a.params), static_cast<long long>(b.params),
              pct(static_cast<double>(a.params), static_cast<double>(b.params)).c_str());
  std::printf("%-15s %-18lld %-18lld %.2fx\n", "file bytes", static_cast<long long>(a.file_bytes),
              static_cast<long long>(b.file_bytes), static_cast<double>(b.file_bytes) / static_cast<double>(a.file_bytes));
  std::printf("%-15s %-18.4f %-18.4f %+.2f pt\n", "test accuracy", a.test_accuracy, b.test_accuracy,
              100.0 * (b.test_accuracy - a.test_accuracy));
}

void print_side_by_side(const GptReport& a, const GptReport& b, const char* what) {
  std::printf("%-15s %-18s %-18s\n", "", "before", what);
  std::printf("%-15s %-18s %-18s\n", "precision", a.precision.c_str(), b.precision.c_str());
  std::printf("%-15s %-18lld %-18lld %s\n", "params", static_cast<long long>(a.params), static_cast<long long>(b.params),
              pct(static_cast<double>(a.params), static_cast<double>(b.params)).c_str());
  std::printf("%-15s %-18lld %-18lld %.2fx\n", "file bytes", static_cast<long long>(a.file_bytes),
              static_cast<long long>(b.file_bytes), static_cast<double>(b.file_bytes) / static_cast<double>(a.file_bytes));
  std::printf("%-15s %-18.4f %-18.4f %s\n", "perplexity", a.perplexity, b.perplexity, pct(a.perplexity, b.perplexity).c_str());
  std::printf("%-15s %-18.4f %-18.4f %+.2f pt\n", "accuracy", a.accuracy, b.accuracy, 100.0 * (b.accuracy - a.accuracy));
  if (b.agreement >= 0)
    std::printf("%-15s %-18s %-18.4f greedy: the same next token at %lld of %lld positions\n", "agreement", "", b.agreement,
                static_cast<long long>(std::llround(b.agreement * static_cast<double>(b.tokens))), static_cast<long long>(b.tokens));
}

void print_gpt(const std::string& path, const GptReport& r, const std::string& format) {
  if (format == "json") {
    nlohmann::json j{{"model", path},           {"type", r.kind},         {"loss", r.loss},
                     {"perplexity", r.perplexity}, {"accuracy", r.accuracy}, {"params", r.params},
                     {"file_bytes", r.file_bytes}, {"precision", r.precision}, {"tokens", r.tokens},
                     {"unknown_bytes", r.unknown_bytes}};
    std::cout << j.dump() << "\n";
    return;
  }
  std::printf("%s: %s (%s), %s, %lld params, %lld bytes; on %lld tokens: loss %.4f nats/token, perplexity %.4f, "
              "next-token accuracy %.4f\n",
              path.c_str(), r.kind.c_str(), r.shape.c_str(), r.precision.c_str(), static_cast<long long>(r.params),
              static_cast<long long>(r.file_bytes), static_cast<long long>(r.tokens), r.loss, r.perplexity, r.accuracy);
  if (r.unknown_bytes)
    std::printf("  %lld bytes of the text are outside the model's vocabulary and were left out\n",
                static_cast<long long>(r.unknown_bytes));
}

// The gpt file of quantize: a float one.
rt::Gpt float_gpt(const std::string& path, const rt::ModelFile& f, const std::string& cmd) {
  const std::string precision = rt::model_precision(path, f);
  if (precision != "fp32")
    throw rt::Error(path + ": an " + precision + " model; " + cmd + " takes the float model");
  return rt::load_gpt(path, f);
}

// The input of prune and quantize: a float Loom MLP model file, never an INT8 one.
rt::ModelFile float_model(const std::string& path, const std::string& cmd) {
  rt::ModelFile f = read_model(path);
  const std::string precision = mlp_precision(path, f);
  if (precision != "fp32")
    throw rt::Error(path + ": an " + precision + " model; " + cmd + " takes the float model (prune first, then quantize)");
  return f;
}

// A gpt trains with AdamW at `lr`, 16 sequences a step, where the options were left out: the
// MLP's SGD defaults do not train a transformer.
void gpt_training_defaults(const po::variables_map& vm, float lr, rt::TrainConfig* c) {
  if (vm["optimizer"].defaulted()) c->optim.kind = rt::OptimKind::kAdamw;
  if (vm["lr"].defaulted()) c->lr = lr;
  if (vm["global-batch"].defaulted()) c->global_batch = 16;
}

}  // namespace loom::compress
