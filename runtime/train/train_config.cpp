// train_config.cpp — the one strict check of a TrainConfig: every count positive, every
// choice one of its words, every rate in range; the error names the option and the value.
#include "loom/rt/train/train_config.hpp"

#include <arpa/inet.h>

#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <vector>

#include "loom/rt/io/onnx_export.hpp"

#include "loom/rt/error.hpp"
#include "loom/rt/io/augment.hpp"

namespace loom::rt {

std::string num(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

namespace {

void positive(const char* option, int64_t v) {
  if (v <= 0) throw Error(std::string(option) + " must be positive, not " + std::to_string(v));
}

void not_negative(const char* option, double v) {
  if (!(v >= 0) || !std::isfinite(v)) throw Error(std::string(option) + " must not be negative, not " + num(v));
}
}  // namespace

void validate(const TrainConfig& c) {
  positive("--global-batch", c.global_batch);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) throw Error("--lr must be positive, not " + num(c.lr));
  positive("--epochs", c.epochs);
  if (c.steps < 0) throw Error("--steps must be positive, not " + std::to_string(c.steps));
  not_negative("--warmup-steps", static_cast<double>(c.warmup));
  not_negative("--clip-grad-norm", c.clip);
  positive("--threads", c.threads);
  if (c.threads > 1024) throw Error("--threads must be at most 1024, not " + std::to_string(c.threads));
  positive("--log-every", c.log_every);
  not_negative("--eval-every", static_cast<double>(c.eval_every));
  positive("--replan-every", c.replan_every);
  positive("--context", c.context);
  positive("--n-layer", c.gpt_layers);
  positive("--n-head", c.heads);
  positive("--n-embd", c.embd);
  if (c.vocab < 2 || c.vocab > (1 << 24))  // GPT-2's 50257 and Llama 3's 128256, with room
    throw Error("--vocab must be from 2 to 16777216, not " + std::to_string(c.vocab));
  if (!(c.dropout >= 0 && c.dropout < 1)) throw Error("--dropout must be in [0, 1), not " + num(c.dropout));
  if (c.attention != Attention::kAuto && c.model != ModelKind::kGpt) throw Error("--attention is for --model gpt");
  if (c.recompute && c.model != ModelKind::kGpt) throw Error("--recompute is for --model gpt (the mlp keeps no activations worth recomputing)");
  if (c.zero != 0 && c.zero != 1 && c.zero != 3)
    throw Error("--zero must be 0, 1 (the optimizer state sharded) or 3 (parameters, gradients and optimizer state "
                "sharded), not " + std::to_string(c.zero));
  if (c.zero == 1 && c.grad_compress != "none")
    throw Error("--zero 1 reduce-scatters fp32 gradients: it does not combine with --grad-compress " + c.grad_compress);
  if (c.zero == 3 && c.grad_compress != "none" && c.grad_compress != "fp16")
    throw Error("--zero 3 reduce-scatters each layer's gradients (fp32, or fp16 with --grad-compress fp16): it does not "
                "combine with --grad-compress " + c.grad_compress);
  if (c.shard_by != "even" && c.shard_by != "memory") throw Error("--shard-by must be even or memory, not '" + c.shard_by + "'");
  if (c.shard_by == "memory" && c.zero != 3) throw Error("--shard-by memory cuts ZeRO-3's parts: it needs --zero 3");
  if (c.shard_by == "memory" && c.grad_compress != "none")
    throw Error("--shard-by memory reduce-scatters fp32 gradients in parts of uneven size: it does not combine with "
                "--grad-compress " + c.grad_compress);
  if (c.zero == 3 && c.qat) throw Error("--zero 3 does not combine with --qat (its observers see whole weights)");
  if (c.offload == Offload::kOptimizer && c.zero == 0)
    throw Error("--offload optimizer moves the sharded optimizer state to host memory: it needs --zero 1 or 3");
  if (c.offload == Offload::kOptimizer && c.gpu_backend == GpuBackend::kNccl && c.zero == 1)
    throw Error("--gpu-backend nccl keeps ZeRO-1's optimizer shards beside the gradients on the GPUs: it does not combine "
                "with --offload optimizer");
  if (!(c.bucket_mb >= 0 && c.bucket_mb <= 4096)) throw Error("--bucket-mb must be between 0 and 4096, not " + num(c.bucket_mb));
  if (!(c.comm_timeout > 0 && c.comm_timeout <= 86400))
    throw Error("--comm-timeout must be between 0 and 86400 seconds, not " + num(c.comm_timeout));
  for (int w : c.layers) positive("--layers (each width)", w);
  const std::string& e = c.export_path;
  if (e.size() > 5 && e.compare(e.size() - 5, 5, ".onnx") == 0) {
    if (c.model != ModelKind::kMlp) throw Error("--export " + e + ": only mlp models export to ONNX (export a gpt as .h5)");
    if (!onnx_export_available()) throw Error("--export " + e + ": this build writes no ONNX (configure found no libonnx-dev)");
  }
  not_negative("--ckpt-every", static_cast<double>(c.ckpt_every));
  not_negative("--ckpt-every-min", c.ckpt_every_min);
  positive("--ckpt-keep", c.ckpt_keep);
  if (c.resume.empty()) throw Error("--resume must be auto, never or a checkpoint FILE");
  if ((c.ckpt_every > 0 || c.ckpt_every_min > 0 || c.ckpt_async) && c.ckpt_dir.empty())
    throw Error("--ckpt-every, --ckpt-every-min and --ckpt-async need --ckpt-dir");
  if (!(c.temperature > 0) || !std::isfinite(c.temperature)) throw Error("--temperature must be positive, not " + num(c.temperature));
  if (!(c.alpha >= 0 && c.alpha <= 1)) throw Error("--alpha must be in [0, 1], not " + num(c.alpha));
  if (c.qat && c.model != ModelKind::kMlp) throw Error("--qat is for --model mlp");
  parse_augment(c.augment);
  not_negative("--train-subset", static_cast<double>(c.train_subset));
  not_negative("--synthetic", static_cast<double>(c.synthetic));
  if (c.metrics_port < -1 || c.metrics_port > 65535)
    throw Error("--metrics-port must be 0..65535, not " + std::to_string(c.metrics_port));
  in_addr addr{};
  if (::inet_pton(AF_INET, c.metrics_bind.c_str(), &addr) != 1)
    throw Error("--metrics-bind: '" + c.metrics_bind + "' is not an IPv4 address");
  if ((!c.augment.empty() || c.train_subset > 0 || c.synthetic > 0) && c.model != ModelKind::kMlp)
    throw Error("--augment, --train-subset and --synthetic are for image data (--model mlp)");
  if (!(c.emulate_speed > 0 && c.emulate_speed <= 1))
    throw Error("LOOM_EMULATE_SPEED must be in (0, 1], not " + num(c.emulate_speed));
}

}  // namespace loom::rt
