// checkpoint_io.cpp — checkpoint files: one file, or an index beside one shard per rank (each
// rank's slice of the flat state), written atomically and read back into whole tensors
// whatever the world size was (HDF5 plumbing: h5.hpp).
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "loom/rt/io/json.hpp"
#include "loom/rt/io/text.hpp"
#include "h5.hpp"
#include "loom/rt/io/model_io.hpp"

namespace loom::rt {

using namespace h5;

namespace {

void write_checkpoint(const std::string& path, const Checkpoint& c, bool with_tensors, const std::string& layout_json) {
  std::vector<Blob> blobs;
  auto add = [&](const std::string& group, const std::vector<std::pair<std::string, Tensor>>& ts) {
    for (const auto& t : ts) blobs.push_back({group + t.first, t.second.shape(), t.second.f32(), false});
  };
  if (with_tensors) {
    add("params/", c.params);
    add("optimizer/m/", c.opt_m);
    add("optimizer/v/", c.opt_v);
  }
  blobs.push_back({"state/json", {static_cast<int64_t>(c.state_json.size())}, c.state_json.data(), true});
  if (!c.rng.empty()) blobs.push_back({"state/rng", {static_cast<int64_t>(c.rng.size())}, c.rng.data(), true});
  if (!layout_json.empty())
    blobs.push_back({"state/shards", {static_cast<int64_t>(layout_json.size())}, layout_json.data(), true});
  write_h5_atomic(path,
               {{"loom.format", "checkpoint"}, {"loom.magic", kCheckpointMagic}, {"model.config", c.model_config},
                {"train.config", c.train_config}},
               blobs);
}

// Reads the shards an index names and cuts the flat state back into tensors.
void load_shards(const std::string& path, const std::string& layout_text, Checkpoint& c) {
  nlohmann::json layout;
  int64_t total = 0, world64 = 0;
  try {
    layout = parse_json_text(layout_text, path + ": /state/shards");
    total = layout.at("total").get<int64_t>();
    world64 = layout.at("world").get<int64_t>();  // whole: 2^32 + 1 is not 1
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": /state/shards is not a valid shard layout: " + e.what());
  }
  if (world64 < 1 || world64 > 65536 || total < 0 || total > (int64_t{1} << 40))
    throw Error(path + ": /state/shards has an unreasonable world size or total");
  const int world = static_cast<int>(world64);
  int64_t step = -1;
  try {
    step = parse_json_text(c.state_json, path + ": /state/json").at("step").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": /state/json has no valid step: " + e.what());
  }
  // Each shard is read and checked before anything the index claims is allocated: a crafted
  // total (2^40) meets the first missing or short shard, not an allocation of that size.
  std::vector<Tensor> parts(static_cast<size_t>(world));
  c.shards = world;
  c.rank_state.assign(static_cast<size_t>(world), {});
  for (int r = 0; r < world; ++r) {
    // The shard's name is derived, not read from the file: an index never points elsewhere.
    const std::string sp = shard_path(path, r, world);
    std::string format;
    H5Handle file(open_loom_file(sp, &format), H5Fclose);
    if (format != kShardFormat) throw Error(sp + ": a Loom " + format + " file, not a checkpoint shard");
    nlohmann::json meta;
    try {
      meta = parse_json_text(read_string_attr(file, "shard.json", sp), sp + ": shard.json");
    } catch (const nlohmann::json::exception& e) {
      throw Error(sp + ": shard.json is not valid: " + e.what());
    }
    const auto want = shard_slice(total, r, world);
    if (!meta.is_object() || meta.value("rank", -1) != r || meta.value("world", -1) != world || meta.value("offset", int64_t{-1}) != want.first ||
        meta.value("count", int64_t{-1}) != want.second || meta.value("total", int64_t{-1}) != total ||
        meta.value("step", int64_t{-1}) != step)
      throw Error(sp + ": the shard does not match its index " + path + " (another checkpoint's shard?)");
    if (want.second > 0) {
      auto data = read_group(file, "shard", sp, true);
      if (data.size() != 1 || data[0].first != "data" || data[0].second.numel() != want.second)
        throw Error(sp + ": /shard/data is missing or of the wrong size");
      parts[static_cast<size_t>(r)] = std::move(data[0].second);
    }
    c.rank_state[static_cast<size_t>(r)] = read_group(file, "rank", sp, false);
  }
  // n values of the flat state from `at`, across the shards that hold them.
  auto copy_flat = [&](float* dst, int64_t at, int64_t n) {
    for (int r = 0; r < world && n > 0; ++r) {
      const auto sl = shard_slice(total, r, world);
      if (sl.second == 0 || at >= sl.first + sl.second) continue;
      const int64_t off = at - sl.first, k = std::min(n, sl.second - off);
      std::memcpy(dst, parts[static_cast<size_t>(r)].f32() + off, static_cast<size_t>(k) * sizeof(float));
      dst += k, at += k, n -= k;
    }
  };
  int64_t at = 0;
  try {
    for (const auto& t : layout.at("tensors")) {
      const std::string group = t.at(0).get<std::string>(), name = t.at(1).get<std::string>();
      std::vector<int64_t> shape = t.at(2).get<std::vector<int64_t>>();
      int64_t n = 1;
      for (int64_t d : shape) {
        if (d <= 0 || d > total) throw Error(path + ": /state/shards: tensor " + visible_text(name) + " has a bad shape");
        if (n > total / d) throw Error(path + ": /state/shards: the tensors add up to more than the shards hold");
        n *= d;
      }
      if (n > total - at) throw Error(path + ": /state/shards: the tensors add up to more than the shards hold");
      Tensor x = Tensor::empty(shape);
      copy_flat(x.f32(), at, n);
      at += n;
      if (group == "params") c.params.emplace_back(name, x);
      else if (group == "optimizer/m") c.opt_m.emplace_back(name, x);
      else if (group == "optimizer/v") c.opt_v.emplace_back(name, x);
      else throw Error(path + ": /state/shards: unknown group " + group);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": /state/shards is not a valid shard layout: " + e.what());
  }
  if (at != total) throw Error(path + ": /state/shards: the tensors do not cover the shards");
  if (c.params.empty()) throw Error(path + ": no parameters in the shards");
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) { write_checkpoint(path, c, true, ""); }

void save_checkpoint_index(const std::string& path, const Checkpoint& c, const std::string& layout_json) {
  write_checkpoint(path, c, false, layout_json);
}

std::pair<int64_t, int64_t> shard_slice(int64_t total, int rank, int world) {
  const int64_t begin = total * rank / world, end = total * (rank + 1) / world;
  return {begin, end - begin};
}

std::string shard_path(const std::string& index_path, int rank, int world) {
  std::string stem = index_path;
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".h5") == 0) stem.resize(stem.size() - 3);
  return stem + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".h5";
}

void save_checkpoint_shard(const std::string& path, const CheckpointShard& s) {
  nlohmann::json meta = {{"step", s.step}, {"rank", s.rank}, {"world", s.world}, {"offset", s.offset},
                         {"count", s.data.defined() ? s.data.numel() : 0}, {"total", s.total}};
  std::vector<Blob> blobs;
  if (s.data.defined() && s.data.numel() > 0) blobs.push_back({"shard/data", s.data.shape(), s.data.f32(), false});
  for (const auto& t : s.rank_state) blobs.push_back({"rank/" + t.first, t.second.shape(), t.second.f32(), false});
  write_h5_atomic(path, {{"loom.format", kShardFormat}, {"loom.magic", kCheckpointMagic}, {"shard.json", meta.dump()}}, blobs);
}

Checkpoint load_checkpoint(const std::string& path) {
  std::string format;
  H5Handle file(open_loom_file(path, &format), H5Fclose);
  if (format == kShardFormat)
    throw Error(path + ": a shard of a checkpoint; load its index (the file without .shard-R-of-N)");
  if (format != "checkpoint") throw Error(path + ": a Loom " + format + " file, not a checkpoint");
  if (H5Aexists(file, "loom.magic") <= 0 || read_string_attr(file, "loom.magic", path) != kCheckpointMagic)
    throw Error(path + ": not a Loom checkpoint (loom.magic missing or wrong)");
  Checkpoint c;
  c.model_config = read_string_attr(file, "model.config", path);
  c.train_config = read_string_attr(file, "train.config", path);
  c.state_json = read_bytes(file, "state/json", path, true, &c.unchecked);
  c.rng = read_bytes(file, "state/rng", path, false, &c.unchecked);
  const std::string layout = read_bytes(file, "state/shards", path, false, &c.unchecked);
  if (!layout.empty()) {
    load_shards(path, layout, c);
    return c;
  }
  c.params = read_group(file, "params", path, true, &c.unchecked);
  c.opt_m = read_group(file, "optimizer/m", path, false, &c.unchecked);
  c.opt_v = read_group(file, "optimizer/v", path, false, &c.unchecked);
  return c;
}

}  // namespace loom::rt
