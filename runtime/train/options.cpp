// options.cpp — loom-train's option table (options.hpp), shared with loom-compress.
#include "loom/rt/train/options.hpp"

#include "loom/error.hpp"
#include "loom/rt/error.hpp"
#include "loom/rt/io/text.hpp"

namespace loom::rt {

namespace po = boost::program_options;

// Boost reads each choice through its ChoiceWords (found by argument-dependent lookup): a word
// not in the table is refused naming the option and the words.
template <class E, class = std::enable_if_t<is_choice<E>::value>>
void validate(boost::any& v, const std::vector<std::string>& values, E*, int) {
  po::validators::check_first_occurrence(v);
  v = parse_choice<E>(po::validators::get_single_string(values));
}

namespace {

std::string widths_text(const std::vector<int>& w) {
  std::string s;
  for (int x : w) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

// The option table: each default is TrainConfig's own, so an option's default lives in one place.
po::options_description train_options(TrainConfig& c, TrainOptionText& in) {
  po::options_description opts("loom-train options (also valid as key = value lines in --config FILE)");
  opts.add_options()
      ("help,h", "show this help")
      ("version", "print the version and exit")
      ("config", po::value(&in.config), "read options from FILE (command-line values win)")
      ("model", po::value(&c.model)->default_value(c.model, word_of(c.model)), "mlp | gpt")
      ("layers", po::value(&in.layers)->default_value(widths_text(c.layers)), "MLP widths, input first")
      ("data", po::value(&in.data), "fashion-mnist[:DIR] (mlp, the default) | text:FILE | tokens:FILE-OR-GLOB (gpt; llm.c's .bin)")
      ("vocab", po::value(&c.vocab)->default_value(c.vocab), "gpt on tokens: vocabulary size (every token must be below it)")
      ("augment", po::value(&c.augment), "mlp: shift:N,flip,noise:S (random, from --seed) | none")
      ("train-subset", po::value(&c.train_subset), "mlp: train on N images of a seeded subset")
      ("synthetic", po::value(&c.synthetic), "mlp: add N within-class mixup images to each epoch")
      ("context", po::value(&c.context)->default_value(c.context), "gpt: tokens per sequence")
      ("n-layer", po::value(&c.gpt_layers)->default_value(c.gpt_layers), "gpt: transformer blocks")
      ("n-head", po::value(&c.heads)->default_value(c.heads), "gpt: attention heads")
      ("n-embd", po::value(&c.embd)->default_value(c.embd), "gpt: embedding width")
      ("dropout", po::value(&c.dropout)->default_value(c.dropout, number_text(c.dropout)), "gpt: dropout probability")
      ("recompute", po::bool_switch(&c.recompute), "gpt: keep only each block's input, recompute the rest in backward (less memory)")
      ("attention", po::value(&c.attention)->default_value(c.attention, word_of(c.attention)),
       "gpt: auto | full (keep each head's T x T softmax) | flash (no T x T matrix; auto from context 256)")
      ("epochs", po::value(&c.epochs)->default_value(c.epochs), "epochs over the training set")
      ("steps", po::value(&c.steps), "stop after this many steps (default: --epochs over the data)")
      ("global-batch", po::value(&c.global_batch)->default_value(c.global_batch), "samples per step")
      ("lr", po::value(&c.lr)->default_value(c.lr, number_text(c.lr)), "learning rate")
      ("optimizer", po::value(&c.optim.kind)->default_value(c.optim.kind, word_of(c.optim.kind)), "sgd | adamw")
      ("momentum", po::value(&c.optim.momentum)->default_value(c.optim.momentum, number_text(c.optim.momentum)), "SGD momentum")
      ("nesterov", po::bool_switch(&c.optim.nesterov), "Nesterov momentum")
      ("weight-decay", po::value(&c.optim.weight_decay)->default_value(c.optim.weight_decay, number_text(c.optim.weight_decay)), "weight decay (decoupled for adamw)")
      ("lr-schedule", po::value(&c.schedule)->default_value(c.schedule, word_of(c.schedule)), "constant | cosine")
      ("warmup-steps", po::value(&c.warmup)->default_value(c.warmup), "linear warmup steps")
      ("lr-replan", po::bool_switch(&c.lr_replan),
       "resuming with another --steps/--epochs: re-plan the cosine schedule over the new total")
      ("clip-grad-norm", po::value(&c.clip)->default_value(c.clip, number_text(c.clip)), "clip gradients to this global norm (0: off)")
      ("seed", po::value(&in.seed)->default_value(std::to_string(c.seed)), "seed of weights and shuffling (0 to 2^64-1)")
      ("device", po::value(&c.device)->default_value(c.device, word_of(c.device)), "auto | cpu | cuda")
      ("threads", po::value(&c.threads)->default_value(c.threads), "CPU threads")
      ("gemm", po::value(&c.gemm)->default_value(c.gemm, word_of(c.gemm)), "auto | openblas | onednn (CPU GEMM library)")
      ("precision", po::value(&c.precision)->default_value(c.precision, word_of(c.precision)), "fp32 | fp16 | bf16 (fp32 master weights)")
      ("export", po::value(&c.export_path), "write the trained model to FILE (HDF5; FILE.onnx: ONNX, mlp only)")
      ("init", po::value(&c.init_path), "start from this model FILE's weights (mlp: its layers unless --layers is given; gpt: its shape)")
      ("qat", po::bool_switch(&c.qat), "mlp: quantization-aware training (CPU); --export writes the INT8 model")
      ("qat-weight-scales", po::value(&in.qat_scales)->default_value(c.qat_per_tensor ? "per-tensor" : "per-channel"), "--qat: per-channel | per-tensor weight scales")
      ("log-format", po::value(&c.log_format)->default_value(c.log_format, word_of(c.log_format)), "text | json")
      ("log-every", po::value(&c.log_every)->default_value(c.log_every), "steps between progress lines")
      ("eval-every", po::value(&c.eval_every), "steps between test-set evaluations, at the end of a pass (default: mlp every pass, gpt every --log-every steps)")
      ("metrics-file", po::value(&c.metrics_file), "JSON lines: steps, evaluations, summary")
      ("tensorboard", po::value(&c.tensorboard_dir), "DIR: TensorBoard event files (loss, rates, shares, times, evaluations)")
      ("metrics-port", po::value(&c.metrics_port), "rank 0 serves Prometheus /metrics on this port (0: any, logged)")
      ("metrics-bind", po::value(&c.metrics_bind)->default_value(c.metrics_bind), "address of --metrics-port (0.0.0.0: every interface)")
      ("mllog", po::value(&c.mllog_path), "append MLPerf-style :::MLLOG lines to FILE (rank 0)")
      ("balance", po::value(&c.balance)->default_value(c.balance, word_of(c.balance)), "off | static | dynamic (shares of the global batch)")
      ("replan-every", po::value(&c.replan_every)->default_value(c.replan_every), "dynamic balance: steps between re-plans")
      ("grad-compress", po::value(&c.grad_compress)->default_value(c.grad_compress), "none | fp16 | powersgd[:rank=R,start=S]")
      ("zero", po::value(&c.zero)->default_value(c.zero), "0 | 1 | 3: ZeRO-1 shards the optimizer state over the ranks; ZeRO-3 the parameters and gradients too, each layer gathered as it is used")
      ("shard-by", po::value(&c.shard_by)->default_value(c.shard_by),
       "even | memory: --zero 3's part of the state on each rank, even or in proportion to its LOOM_DEVICE_MEMORY")
      ("offload", po::value(&c.offload)->default_value(c.offload, word_of(c.offload)),
       "none | optimizer: with --zero 1 or 3 on GPUs, the optimizer state and its step in host memory (ZeRO-Offload)")
      ("gpu-backend", po::value(&c.gpu_backend)->default_value(c.gpu_backend, word_of(c.gpu_backend)),
       "several CUDA ranks: nccl (gradients summed on the GPUs) | host (staged over MPI) | auto")
      ("bucket-mb", po::value(&c.bucket_mb)->default_value(c.bucket_mb, number_text(c.bucket_mb)), "gradient bucket size, overlapped with backward (0: after it)")
      ("comm-timeout", po::value(&c.comm_timeout)->default_value(c.comm_timeout, number_text(c.comm_timeout)), "seconds a collective waits for a peer before failing")
      ("ckpt-dir", po::value(&c.ckpt_dir), "write checkpoints to DIR/ckpt-<step>.h5 (and resume from there)")
      ("ckpt-every", po::value(&c.ckpt_every), "checkpoint every N steps")
      ("ckpt-every-min", po::value(&c.ckpt_every_min)->default_value(c.ckpt_every_min, number_text(c.ckpt_every_min)), "checkpoint every M minutes")
      ("ckpt-keep", po::value(&c.ckpt_keep)->default_value(c.ckpt_keep), "keep the newest K checkpoints")
      ("ckpt-async", po::bool_switch(&c.ckpt_async), "write checkpoints in the background")
      ("resume", po::value(&c.resume)->default_value(c.resume), "auto (newest good checkpoint in --ckpt-dir) | never | FILE")
      ("inspect", po::value<std::string>(), "print what a checkpoint or model FILE holds, verify it, and exit");
  return opts;
}

po::options_description train_options(TrainConfig& c, TrainOptionText& in, const std::vector<std::string>& names,
                                      const std::string& caption) {
  const po::options_description all = train_options(c, in);
  po::options_description some(caption);
  for (const std::string& name : names) {
    const po::option_description* o = all.find_nothrow(name, false);
    LOOM_CHECK(o != nullptr, "loom-train has no option --" + name);
    for (const auto& shared : all.options())
      if (shared.get() == o) some.add(shared);
  }
  return some;
}

uint64_t parse_seed(const std::string& text) {
  const std::string why = "--seed must be a whole number from 0 to 2^64-1, not '" + text.substr(0, 40) + "'";
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) throw UsageError(why);
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    throw UsageError(why);
  }
}

}  // namespace loom::rt
