// cli.hpp — what loom-compress's subcommands share: loom-train's options for fine-tuning and
// distillation, the option parsing and its usage errors, the reports side by side, and the float
// model files prune and quantize take.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "gpt_eval.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/train/options.hpp"
#include "model_eval.hpp"

namespace loom::compress {

namespace po = boost::program_options;

// loom-train's options that fine-tuning and distillation take: the same table
// (loom/rt/train/options.hpp), bound to a TrainConfig whose defaults are loom-train's.
struct TrainOpts {
  rt::TrainConfig c;
  rt::TrainOptionText in;
};

void add_train_options(po::options_description& d, TrainOpts& t);
// fashion-mnist[:DIR] as a folder; a gpt's text: or tokens: is a usage error for an mlp.
std::string data_dir(const std::string& data);
// loom-train's configuration from the options: an mlp on fashion-mnist[:DIR], or a gpt on
// text:FILE or tokens:PATTERN.
rt::TrainConfig train_config(const TrainOpts& t, const std::string& model = "mlp");
// A gpt trains with AdamW at `lr`, 16 sequences a step, where the options were left out.
void gpt_training_defaults(const po::variables_map& vm, float lr, rt::TrainConfig* c);

// The options of a subcommand (`positional` taking `count` values), Boost's errors as Usage.
po::variables_map parse(int argc, char** argv, const po::options_description& d, const char* positional, int count);
// --help: prints the subcommand's usage and returns true.
bool wants_help(int argc, char** argv, const std::string& name, const po::options_description& d);
void require(const po::variables_map& vm, const char* opt, const std::string& cmd);
void train_log(const std::string& line);

void print_side_by_side(const ModelReport& a, const ModelReport& b, const char* what);
void print_side_by_side(const GptReport& a, const GptReport& b, const char* what);
void print_gpt(const std::string& path, const GptReport& r, const std::string& format);

// The inputs of prune and quantize: float files, never INT8 ones.
rt::Gpt float_gpt(const std::string& path, const rt::ModelFile& f, const std::string& cmd);
rt::ModelFile float_model(const std::string& path, const std::string& cmd);

struct TempFile {  // removed when it leaves scope, whatever happened
  std::string path;
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace loom::compress
