// model_io.hpp — the HDF5 model file of Contract 4: root attributes loom.format, loom.version
// and model.config (JSON), /params/<name> float32 datasets with Fletcher32 checksums, written
// under a temporary name, fsync'd (file and folder) and renamed.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/rt/nn/gpt.hpp"
#include "loom/rt/nn/mlp.hpp"

namespace loom::rt {

constexpr int kFormatVersion = 1;

void save_model(const std::string& path, const std::string& config_json, const std::vector<Param>& params);
// An int8 weight of Contract 7: integers q [out, ...], one scale per output channel, a zero point.
struct QuantizedTensor {
  std::string name;
  Tensor q;
  std::vector<float> scale;
  int zero_point = 0;
};
// A model with int8 weights (`quantized`, each with attributes scale and zero_point) beside
// float32 tensors (`params`: biases).
void save_model(const std::string& path, const std::string& config_json, const std::vector<Param>& params,
                const std::vector<QuantizedTensor>& quantized);

struct ModelFile {
  std::string format;       // "model" or "checkpoint"
  int version = 0;
  std::string config_json;
  std::vector<std::pair<std::string, Tensor>> params;
  std::vector<std::string> unchecked;  // datasets that carry no Fletcher32 checksum (not verified)
  // For every int8 tensor of /params (dtype kI8 in `params`): its scales and zero point.
  std::map<std::string, std::vector<float>> scales;
  std::map<std::string, int> zero_points;
};
// An int8 tensor of `f` as float32: (q - zero_point) * scale[channel].
Tensor dequantize(const ModelFile& f, const std::string& name, const Tensor& q);
// Throws Error for a missing, truncated or corrupt file (checksums verified), or a wrong version.
ModelFile load_model(const std::string& path);

// An MLP built from a model file: widths from model.config, weights by state_dict name.
// Throws Error when the file is not an MLP or a tensor is missing or of the wrong shape.
Mlp load_mlp(const std::string& path);
// The same from a file already read by load_model (`path` names it in errors).
Mlp load_mlp(const std::string& path, const ModelFile& f);
// A GPT built from a model file (type "gpt"); the same checks as load_mlp.
Gpt load_gpt(const std::string& path);
Gpt load_gpt(const std::string& path, const ModelFile& f);

// A training checkpoint (loom.format "checkpoint"): the model's parameters as in a model file,
// plus /optimizer/m/<name>, /optimizer/v/<name> (the optimizer's moments, when it has them),
// /state/json (step, epoch, data cursor, loss scaler, balancer, optimizer step count) and
// /state/rng (the model's random-number state), every dataset with a Fletcher32 checksum, and
// the root attributes loom.magic ("loom-checkpoint") and train.config (the options a resume must
// share with the run that wrote it).
constexpr const char* kCheckpointMagic = "loom-checkpoint";
struct Checkpoint {
  std::string model_config, train_config, state_json, rng;
  std::vector<std::pair<std::string, Tensor>> params, opt_m, opt_v;
  // Sharded checkpoints only: how many shards, and each rank's own state (PowerSGD's error
  // feedback), by rank.
  int shards = 0;
  std::vector<std::vector<std::pair<std::string, Tensor>>> rank_state;
  std::vector<std::string> unchecked;  // datasets of the index that carry no Fletcher32 checksum
};
void save_checkpoint(const std::string& path, const Checkpoint& c);
// Reads every dataset (so every checksum is verified); throws Error naming the file and what is
// wrong: missing, truncated, not HDF5, not a checkpoint, wrong version, a failed checksum, a
// missing or mismatched shard. Reads single-file and sharded checkpoints alike.
Checkpoint load_checkpoint(const std::string& path);

// Sharded checkpoints (several ranks write in parallel). The flat state is every /params
// tensor, then every /optimizer/m, then every /optimizer/v tensor, in order; rank r of N holds
// the contiguous slice shard_slice(total, r, N) and writes it, with its own state, to
// shard_path(index, r, N) (loom.format "checkpoint-shard": /shard/data float32 and /rank/<name>).
// Rank 0 writes the index last, once every shard is down: the single-file layout without the
// tensors, plus /state/shards (JSON: the tensors' groups, names and shapes, and the shards'
// files and slices). A reader sees a checkpoint only when its index exists, and verifies every
// shard it names.
constexpr const char* kShardFormat = "checkpoint-shard";
std::pair<int64_t, int64_t> shard_slice(int64_t total, int rank, int world);  // (offset, count)
std::string shard_path(const std::string& index_path, int rank, int world);
struct CheckpointShard {
  int64_t step = 0, offset = 0, total = 0;
  int rank = 0, world = 1;
  Tensor data;  // 1-D, host, its slice of the flat state (undefined when the slice is empty)
  std::vector<std::pair<std::string, Tensor>> rank_state;
};
void save_checkpoint_shard(const std::string& path, const CheckpointShard& s);
// `c`'s tensors are not written (they are in the shards); `layout_json` goes to /state/shards.
void save_checkpoint_index(const std::string& path, const Checkpoint& c, const std::string& layout_json);

}  // namespace loom::rt
