// commands.cpp — loom-compress prune, quantize, distill, eval and convert (their shared option
// handling and reports are cli.hpp's).
#include "commands.hpp"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "calibrate.hpp"
#include "cli.hpp"
#include "gpt_eval.hpp"
#include "hf_compress.hpp"
#include "loom/rt/io/data.hpp"
#include "loom/rt/io/onnx_export.hpp"
#include "loom/rt/io/model_io.hpp"
#include "loom/rt/io/quant_model.hpp"
#include "loom/rt/io/text.hpp"
#include "loom/rt/train/trainer.hpp"
#include "model_eval.hpp"
#include "prune.hpp"

namespace loom::compress {

namespace {

// Heads and MLP neurons of a gpt, optionally fine-tuned on text:FILE by loom-train's loop
// (--finetune-steps); --eval-data text:FILE scores the model before and after.
int prune_gpt_file(const std::string& in, const std::string& out, const rt::ModelFile& f, double sparsity,
                   const std::string& criterion, const TrainOpts& t, const po::variables_map& vm) {
  if (!vm["finetune-epochs"].defaulted()) throw Usage{"a gpt is fine-tuned for --finetune-steps, not --finetune-epochs"};
  const int64_t steps = vm["finetune-steps"].as<int64_t>();
  if (steps < 0) throw Usage{"--finetune-steps must not be negative"};
  const std::string eval = vm.count("eval-data") ? vm["eval-data"].as<std::string>() : std::string();
  if (!eval.empty()) gpt_data(eval, "--eval-data");
  rt::TrainConfig c;
  if (steps > 0) c = train_config(t, "gpt");
  rt::Gpt g = float_gpt(in, f, "prune");
  auto cfg = nlohmann::json::parse(f.config_json);
  if (cfg.contains("pruned"))
    throw rt::Error(in + ": pruned already (sparsity " + cfg["pruned"].value("sparsity", nlohmann::json()).dump() +
                    "); prune the original model with the sparsity you want");
  GptPruneResult r = prune_gpt(g, sparsity, criterion);
  const rt::GptConfig& pc = r.model.config();
  auto shaped = nlohmann::json::parse(pc.json());
  for (const char* k : {"heads", "head_size", "inner"}) cfg[k] = shaped[k];
  cfg["pruned"] = {{"sparsity", sparsity},          {"criterion", criterion},
                   {"from_heads", g.config().heads}, {"from_inner", g.config().ff()},
                   {"heads_kept", r.heads_kept},     {"finetune_steps", steps}};
  if (steps > 0) {
    TempFile start{out + ".pruned.tmp"}, tuned{out + ".tuned.tmp"};
    rt::save_model(start.path, cfg.dump(), r.model.params());
    gpt_training_defaults(vm, 0.001f, &c);  // fine-tuning starts from a trained model: a lower rate
    c.context = pc.context;
    c.vocab = pc.vocab;  // token files: every token checked against the model's vocabulary
    c.init_path = start.path;
    c.steps = steps;
    c.export_path = tuned.path;
    rt::validate(c);
    rt::train(c, train_log);
    r.model = rt::load_gpt(tuned.path);
  }
  rt::save_model(out, cfg.dump(), r.model.params());
  if (!eval.empty()) print_side_by_side(evaluate_gpt(in, eval), evaluate_gpt(out, eval), "pruned");
  std::printf("heads per block %d -> %d, MLP neurons %d -> %d\n", g.config().heads, pc.heads, g.config().ff(), pc.ff());
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int cmd_prune(int argc, char** argv) {
  std::string in, out, criterion;
  double sparsity = 0;
  int finetune = 0;
  TrainOpts t;
  t.c.lr = 0.01f;  // fine-tuning starts from a trained model
  po::options_description d("prune options");
  d.add_options()("input", po::value(&in), "the float model file")("output,o", po::value(&out), "the pruned model file")(
      "sparsity", po::value(&sparsity), "fraction of each hidden layer's neurons (a gpt: of each block's heads and MLP neurons) to remove, in (0, 1)")(
      "criterion", po::value(&criterion)->default_value("l1"), "l1 | l2: the norm that scores a neuron's weights")(
      "finetune-epochs", po::value(&finetune)->default_value(0), "mlp: epochs of fine-tuning after pruning (loom-train's loop)")(
      "finetune-steps", po::value<int64_t>()->default_value(0), "gpt: steps of fine-tuning after pruning, on --data text:FILE or tokens:PATTERN")(
      "eval-data", po::value<std::string>(), "gpt: text:FILE or tokens:PATTERN, held-out data both models are scored on");
  add_train_options(d, t);
  if (wants_help(argc, argv, "prune IN.h5", d)) return 0;
  const auto vm = parse(argc, argv, d, "input", 1);
  require(vm, "input", "prune");
  require(vm, "output", "prune");
  require(vm, "sparsity", "prune");
  if (!(sparsity > 0 && sparsity < 1)) throw Usage{"--sparsity must be in (0, 1), not " + std::to_string(sparsity)};
  if (const rt::ModelFile f = read_model(in); is_gpt(in, f)) return prune_gpt_file(in, out, f, sparsity, criterion, t, vm);
  if (finetune < 0) throw Usage{"--finetune-epochs must not be negative"};
  rt::TrainConfig c = train_config(t);
  const rt::ModelFile f = float_model(in, "prune");
  nlohmann::json cfg = nlohmann::json::parse(f.config_json);
  if (cfg.contains("pruned"))
    throw rt::Error(in + ": pruned already (sparsity " + cfg["pruned"].value("sparsity", nlohmann::json()).dump() +
                    "); prune the original model with the sparsity you want");
  const rt::Mlp original = rt::load_mlp(in, f);
  const ModelReport before = evaluate_model(in, c.data_dir);
  PruneResult r = prune_mlp(original, sparsity, criterion);
  cfg["layers"] = r.model.widths();
  cfg["pruned"] = {{"sparsity", sparsity}, {"criterion", criterion}, {"from", original.widths()}, {"finetune_epochs", finetune}};
  if (finetune > 0) {
    TempFile start{out + ".pruned.tmp"}, tuned{out + ".tuned.tmp"};
    rt::save_model(start.path, r.model.config_json(), r.model.params());
    c.layers = r.model.widths();
    c.init_path = start.path;
    c.epochs = finetune;
    c.export_path = tuned.path;
    rt::train(c, train_log);
    r.model = rt::load_mlp(tuned.path);
  }
  rt::save_model(out, cfg.dump(), r.model.params());
  print_side_by_side(before, evaluate_model(out, c.data_dir), "pruned");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

namespace {

// INT8 for a gpt: its linear layers' weights per output channel; each row of their inputs is
// quantized as it comes (no calibration), or kept float with --weights-only. --calibration
// text:FILE scores both files on that text.
int quantize_gpt(const std::string& in, const std::string& out, const rt::ModelFile& f, const po::variables_map& vm,
                 bool weights_only) {
  if (!vm["observer"].defaulted() || !vm["calib-samples"].defaulted() || !vm["weight-scales"].defaulted())
    throw Usage{"a gpt's activations are quantized per row as they come: --observer, --calib-samples and "
                "--weight-scales are for the MLP"};
  const bool scored = !vm["calibration"].defaulted();
  const std::string data = vm["calibration"].as<std::string>();
  if (scored) gpt_data(data, "--calibration");
  rt::Gpt gpt = float_gpt(in, f, "quantize");
  rt::save_quant_gpt(out, gpt, f.config_json, weights_only);
  if (scored) print_side_by_side(evaluate_gpt(in, data), evaluate_gpt(out, data), weights_only ? "int8 weights" : "int8");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  std::string in, out, calibration, observer, scales;
  int samples = 0;
  bool weights_only = false;
  po::options_description d("quantize options");
  d.add_options()("input", po::value(&in), "the float model file, or a Hugging Face folder")(
      "output,o", po::value(&out), "the INT8 model file (a folder: the INT8 folder, new)")(
      "calibration", po::value(&calibration)->default_value("fashion-mnist"),
      "fashion-mnist[:DIR]: training images (a gpt: text:FILE or tokens:PATTERN, on which both files are scored; a folder: tokens:PATTERN)")(
      "calib-samples", po::value(&samples)->default_value(2000), "calibration images (a seeded sample of the training set)")(
      "observer", po::value(&observer)->default_value("minmax"), "minmax | percentile | entropy")(
      "weights-only", po::bool_switch(&weights_only), "int8 weights, float activations (no calibration)")(
      "weight-scales", po::value(&scales)->default_value("per-channel"), "per-channel | per-tensor (one scale per layer)");
  if (wants_help(argc, argv, "quantize IN.h5", d)) return 0;
  const auto vm = parse(argc, argv, d, "input", 1);
  require(vm, "input", "quantize");
  require(vm, "output", "quantize");
  if (is_hf_folder(in)) return quantize_hf(in, out, vm);
  if (const rt::ModelFile f = read_model(in); is_gpt(in, f)) return quantize_gpt(in, out, f, vm, weights_only);
  if (samples <= 0) throw Usage{"--calib-samples must be positive"};
  if (observer != "minmax" && observer != "percentile" && observer != "entropy")
    throw Usage{"--observer must be minmax, percentile or entropy, not '" + observer + "'"};
  if (scales != "per-channel" && scales != "per-tensor")
    throw Usage{"--weight-scales must be per-channel or per-tensor, not '" + scales + "'"};
  const bool per_tensor = scales == "per-tensor";
  if (per_tensor && weights_only) throw Usage{"--weights-only files keep per-channel weight scales"};
  const std::string dir = data_dir(calibration);
  const rt::ModelFile f = float_model(in, "quantize");
  rt::Mlp m = rt::load_mlp(in, f);
  const ModelReport before = evaluate_model(in, dir);
  if (weights_only) {
    rt::save_weight_only_mlp(out, m, f.config_json);
  } else {
    const rt::Dataset train = rt::load_fashion_mnist(dir, "train");
    if (samples > train.size())
      throw Usage{"--calib-samples " + std::to_string(samples) + " is more than the " + std::to_string(train.size()) +
                  " training images"};
    rt::Tensor x;
    std::vector<int32_t> y;
    rt::gather_batch(train, rt::epoch_order(train.size(), 0, 0), 0, samples, &x, &y);
    const auto inputs = calibrate(m, x, observer);
    rt::save_quant_mlp(out, rt::QuantMlp::quantize(m, inputs, per_tensor), f.config_json, observer, per_tensor);
  }
  print_side_by_side(before, evaluate_model(out, dir), weights_only ? "int8 weights" : "int8");
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

namespace {

struct GptStudent {
  int layers = 0, embd = 0, heads = 0;
  int64_t steps = 0;
  std::string eval_data;
};

// A gpt student of another shape, taught on text:FILE by a gpt teacher; --compare trains the same
// student alone (same seed, same steps) and reports the share of the teacher's perplexity lead
// closed, and the student's accuracy against the teacher's.
int distill_gpt(rt::TrainConfig c, const GptStudent& s, const po::variables_map& vm, bool compare) {
  if (vm.count("student-layers") || !vm["epochs"].defaulted())
    throw Usage{"a gpt student takes --student-n-layer/--student-n-embd/--student-n-head and --steps, not --student-layers or "
                "--epochs"};
  if (s.layers <= 0 || s.embd <= 0 || s.heads <= 0)
    throw Usage{"a gpt student needs positive --student-n-layer, --student-n-embd and --student-n-head"};
  if (s.embd % s.heads) throw Usage{"--student-n-embd must be a multiple of --student-n-head"};
  if (s.steps <= 0) throw Usage{"--steps must be positive"};
  const rt::ModelFile tf = read_model(c.teacher_path);
  if (rt::model_precision(c.teacher_path, tf) != "fp32") throw rt::Error(c.teacher_path + ": the teacher must be a float gpt");
  const rt::GptConfig tg = rt::load_gpt(c.teacher_path, tf).config();
  c.context = tg.context;
  c.vocab = tg.vocab;
  c.gpt_layers = s.layers;
  c.embd = s.embd;
  c.heads = s.heads;
  c.steps = s.steps;
  gpt_training_defaults(vm, 0.003f, &c);
  // Mostly soft targets: on dpkg's changelog (doc/compress.md) alpha 0.9 at T 1 closed 25% of the
  // teacher's lead in 1,000 steps where alpha 0.5 at T 2 closed 4%.
  if (vm["alpha"].defaulted()) c.alpha = 0.9f;
  rt::validate(c);
  const std::string eval = s.eval_data;
  if (!eval.empty()) gpt_data(eval, "--eval-data");
  const rt::TrainResult distilled = rt::train(c, train_log);
  const std::string shape = "layers " + std::to_string(s.layers) + ", heads " + std::to_string(s.heads) + ", embd " + std::to_string(s.embd);
  auto report = [&](const char* who, const std::string& path, const char* how) {
    const GptReport r = evaluate_gpt(path, eval);
    std::printf("%-8s %-34s %9lld params  perplexity %8.4f  accuracy %.4f%s\n", who, r.shape.c_str(), static_cast<long long>(r.params),
                r.perplexity, r.accuracy, how);
    return r;
  };
  if (eval.empty()) {
    std::printf("student  %s: held-out accuracy %.4f (distilled, T=%g alpha=%g; --eval-data scores the files)\n",
                shape.c_str(), distilled.test_accuracy, c.temperature, c.alpha);
    if (compare) throw Usage{"--compare needs --eval-data text:FILE or tokens:PATTERN (the held-out data the three models are scored on)"};
  } else {
    const GptReport teacher = report("teacher", c.teacher_path, "");
    const GptReport student = report("student", c.export_path, " (distilled)");
    std::printf("teacher/student parameters: %.1fx\n", static_cast<double>(teacher.params) / static_cast<double>(student.params));
    if (compare) {
      rt::TrainConfig alone = c;
      alone.teacher_path.clear();
      TempFile tmp{c.export_path + ".alone.tmp.h5"};
      alone.export_path = tmp.path;
      rt::train(alone, train_log);
      const GptReport base = report("student", tmp.path, " (trained alone, same seed and steps)");
      const double gap = base.perplexity - teacher.perplexity;
      if (gap > 0)
        std::printf("gap closed: %.1f%% of the teacher's perplexity lead\n", 100.0 * (base.perplexity - student.perplexity) / gap);
      else
        std::printf("gap closed: n/a (the student alone is as good as the teacher)\n");
      std::printf("student accuracy / teacher accuracy: %.1f%%\n", 100.0 * student.accuracy / teacher.accuracy);
    }
  }
  std::printf("wrote %s\n", c.export_path.c_str());
  return 0;
}

}  // namespace

int cmd_distill(int argc, char** argv) {
  std::string teacher, student, out;
  // T 1 and alpha 0.5 by default: on Fashion-MNIST a 784-32-10 student gained from T 1 in every
  // seed tried and lost at T 2 and 4 (doc/compress.md).
  float temperature = 1, alpha = 0.5f;
  int epochs = 1;
  bool compare = false;
  GptStudent gs;
  TrainOpts t;
  po::options_description d("distill options");
  d.add_options()("teacher", po::value(&teacher), "the teacher's model file (mlp or gpt)")(
      "student-layers", po::value(&student), "mlp: the student's widths, input first (e.g. 784,32,10)")(
      "student-n-layer", po::value(&gs.layers), "gpt: the student's blocks")(
      "student-n-embd", po::value(&gs.embd), "gpt: the student's width")(
      "student-n-head", po::value(&gs.heads), "gpt: the student's attention heads")(
      "output,o", po::value(&out), "the student's model file")(
      "temperature", po::value(&temperature)->default_value(temperature), "softmax temperature T")(
      "alpha", po::value(&alpha)->default_value(alpha), "weight of the teacher's soft targets (1 - alpha: the labels; a gpt: 0.9 unless given)")(
      "epochs", po::value(&epochs)->default_value(epochs), "mlp: training epochs")(
      "steps", po::value(&gs.steps)->default_value(0), "gpt: training steps")(
      "eval-data", po::value(&gs.eval_data), "gpt: text:FILE or tokens:PATTERN, held-out data the teacher and students are scored on")(
      "compare", po::bool_switch(&compare), "also train the same student alone (same seed) and report the gap closed");
  add_train_options(d, t);
  if (wants_help(argc, argv, "distill", d)) return 0;
  const auto vm = parse(argc, argv, d, nullptr, 0);
  require(vm, "teacher", "distill");
  require(vm, "output", "distill");
  if (is_gpt(teacher, read_model(teacher))) {
    rt::TrainConfig c = train_config(t, "gpt");
    c.teacher_path = teacher;
    c.temperature = temperature;
    c.alpha = alpha;
    c.export_path = out;
    return distill_gpt(c, gs, vm, compare);
  }
  if (vm.count("student-n-layer") || vm.count("student-n-embd") || vm.count("student-n-head"))
    throw rt::Error(teacher + ": not a gpt (model.config type); --student-n-layer, --student-n-embd and --student-n-head "
                    "need a gpt teacher");
  require(vm, "student-layers", "distill");
  if (epochs <= 0) throw Usage{"--epochs must be positive"};
  rt::TrainConfig c = train_config(t);
  try {
    c.layers = rt::parse_widths(student);
  } catch (const rt::Error& e) {
    throw Usage{std::string(e.what()).replace(0, 8, "--student-layers")};
  }
  c.teacher_path = teacher;
  c.temperature = temperature;
  c.alpha = alpha;
  c.epochs = epochs;
  rt::validate(c);
  mlp_precision(teacher, read_model(teacher));
  const ModelReport tr = evaluate_model(teacher, c.data_dir);
  c.export_path = out;
  const rt::TrainResult distilled = rt::train(c, train_log);
  std::printf("teacher  %-18s test accuracy %.4f\n", tr.layers.c_str(), tr.test_accuracy);
  std::printf("student  %-18s test accuracy %.4f (distilled, T=%g alpha=%g)\n", student.c_str(), distilled.test_accuracy,
              temperature, alpha);
  if (compare) {
    rt::TrainConfig alone = c;
    alone.teacher_path.clear();
    alone.export_path.clear();
    const rt::TrainResult base = rt::train(alone, train_log);
    const double gap = tr.test_accuracy - base.test_accuracy;
    std::printf("student  %-18s test accuracy %.4f (trained alone, same seed)\n", student.c_str(), base.test_accuracy);
    if (gap > 0) std::printf("gap closed: %.1f%% of the teacher's lead\n", 100.0 * (distilled.test_accuracy - base.test_accuracy) / gap);
    else std::printf("gap closed: n/a (the student alone is as good as the teacher)\n");
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

int cmd_eval(int argc, char** argv) {
  std::string model, data, format;
  po::options_description d("eval options");
  d.add_options()("model", po::value(&model), "a Loom model file, or a Hugging Face folder")(
      "data", po::value(&data)->default_value("fashion-mnist"),
      "fashion-mnist[:DIR]; a gpt: text:FILE or tokens:PATTERN (held-out data); a folder: tokens:PATTERN")(
      "format", po::value(&format)->default_value("text"), "text | json")(
      "max-tokens", po::value<int64_t>()->default_value(0), "a gpt or a folder: score at most N tokens of the data (0: all)");
  if (wants_help(argc, argv, "eval MODEL", d)) return 0;
  const auto vm = parse(argc, argv, d, "model", 1);
  require(vm, "model", "eval");
  if (format != "text" && format != "json") throw Usage{"--format must be text or json, not '" + format + "'"};
  if (vm["max-tokens"].as<int64_t>() < 0) throw Usage{"--max-tokens must not be negative"};
  if (is_hf_folder(model)) {
    print_gpt(model, evaluate_hf(model, data, vm["max-tokens"].as<int64_t>()), format);
    return 0;
  }
  if (is_gpt(model, read_model(model))) {
    print_gpt(model, evaluate_gpt(model, data, vm["max-tokens"].as<int64_t>()), format);
    return 0;
  }
  const ModelReport r = evaluate_model(model, data_dir(data));
  if (format == "json") {
    nlohmann::json j{{"model", model},        {"test_accuracy", r.test_accuracy}, {"params", r.params},
                     {"file_bytes", r.file_bytes}, {"weights_dtype", r.weights_dtype}, {"precision", r.precision},
                     {"layers", r.layers}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf("%s: layers %s, %s, %lld params, %lld bytes, test accuracy %.4f\n", model.c_str(), r.layers.c_str(),
                r.precision.c_str(), static_cast<long long>(r.params), static_cast<long long>(r.file_bytes),
                r.test_accuracy);
  }
  return 0;
}

int cmd_convert(int argc, char** argv) {
  po::options_description d("convert options");
  std::string in, out;
  d.add_options()("input", po::value(&in), "IN (.h5 or .onnx)")("output", po::value(&out), "OUT (.onnx or .h5)");
  if (wants_help(argc, argv, "convert IN OUT", d)) return 0;
  po::positional_options_description pos;
  pos.add("input", 1).add("output", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(d).positional(pos).run(), vm);
  po::notify(vm);
  require(vm, "input", "convert");
  require(vm, "output", "convert");
  auto ext = [](const std::string& p) { return p.substr(p.find_last_of('.') == std::string::npos ? p.size() : p.find_last_of('.')); };
  const std::string a = ext(in), b = ext(out);
  if (a == ".onnx" && b == ".h5")
    throw rt::Error("convert: .onnx -> .h5 is not supported (loom-serve serves model.onnx itself); nothing written");
  if (!(a == ".h5" && b == ".onnx")) throw Usage{"convert goes .h5 -> .onnx (by extension), not " + a + " -> " + b};
  rt::export_onnx(in, out, "loom-compress");
  std::printf("%s: written from %s\n", out.c_str(), in.c_str());
  return 0;
}

}  // namespace loom::compress
