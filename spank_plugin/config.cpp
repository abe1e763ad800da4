// config.cpp — strict parsing of plugstack.conf arguments and of the user's options.
#include "config.hpp"

#include <cctype>

namespace loom::spank {

const char* const kBindHelp =
    "spank_loom: --loom-bind=MODE places each task on a GPU, CPU cores and a NIC from the node's topology:\n"
    "  ring  GPUs chosen and ranks ordered along the fastest GPU ring (NVLink first); CPUs and NIC near each GPU\n"
    "  gpu   one GPU per task in index order; CPUs and NIC near the GPU\n"
    "  numa  tasks spread over NUMA nodes, each bound to a whole node's CPUs and its GPUs\n"
    "  none  leave placement to Slurm\n"
    "  help  this text\n"
    "--loom-nic=auto|none|NAME chooses the NIC; --loom-verbose prints each task's placement.\n";

const char* bind_word(Bind b) {
  switch (b) {
    case Bind::kUnset: return "unset";
    case Bind::kNone: return "none";
    case Bind::kRing: return "ring";
    case Bind::kGpu: return "gpu";
    case Bind::kNuma: return "numa";
  }
  return "none";
}

std::string parse_bind(const std::string& v, Bind* out, bool* help) {
  if (help) *help = false;
  if (v == "ring") *out = Bind::kRing;
  else if (v == "gpu") *out = Bind::kGpu;
  else if (v == "numa") *out = Bind::kNuma;
  else if (v == "none") *out = Bind::kNone;
  else if (v == "help" && help) *help = true;
  else return "--loom-bind: unknown value '" + v + "' (allowed: ring, gpu, numa, none, help)";
  return "";
}

std::string parse_nic(const std::string& v, std::string* out) {
  bool ok = !v.empty() && v.size() <= 32;
  for (unsigned char c : v) ok = ok && (std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-');
  if (!ok) return "--loom-nic: invalid value '" + v + "' (allowed: auto, none, or a device name such as mlx5_0)";
  *out = v;
  return "";
}

namespace {

std::string parse_flag(const std::string& key, const std::string& v, bool* out) {
  if (v == "0") *out = false;
  else if (v == "1") *out = true;
  else return "plugstack.conf: " + key + "=" + v + ": expected 0 or 1";
  return "";
}

std::string parse_abs_path(const std::string& key, const std::string& v, std::string* out) {
  if (v.empty() || v[0] != '/' || v.size() > 1024 || v.find("/../") != std::string::npos ||
      v.find('\n') != std::string::npos)
    return "plugstack.conf: " + key + "=" + v + ": expected an absolute path";
  *out = v;
  return "";
}

}  // namespace

std::string parse_plugstack_args(const std::vector<std::string>& args, PluginConfig* out) {
  PluginConfig c;
  for (const auto& a : args) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      return "plugstack.conf: argument '" + a + "' is not key=value (keys: topology, default_bind, strict, export, export_dir)";
    std::string key = a.substr(0, eq), v = a.substr(eq + 1), err;
    if (key == "topology") {
      err = parse_abs_path(key, v, &c.topology);
    } else if (key == "default_bind") {
      Bind b;
      if (!parse_bind(v, &b, nullptr).empty()) err = "plugstack.conf: default_bind=" + v + ": expected ring, gpu, numa or none";
      else c.default_bind = b;
    } else if (key == "strict") {
      err = parse_flag(key, v, &c.strict);
    } else if (key == "export") {
      err = parse_flag(key, v, &c.export_files);
    } else if (key == "export_dir") {
      err = parse_abs_path(key, v, &c.export_dir);
    } else {
      err = "plugstack.conf: unknown key '" + key + "' (keys: topology, default_bind, strict, export, export_dir)";
    }
    if (!err.empty()) return err;
  }
  *out = c;
  return "";
}

Bind effective_bind(const UserOptions& user, const PluginConfig& config) {
  return user.bind != Bind::kUnset ? user.bind : config.default_bind;
}

}  // namespace loom::spank
