// config.hpp — the plugin's configuration, parsed strictly in one place: plugstack.conf
// arguments (topology=, default_bind=, strict=, export=, export_dir=) and the user's options
// (--loom-bind, --loom-verbose, --loom-nic). Pure C++, no Slurm: unit-tested directly.
#pragma once

#include <string>
#include <vector>

namespace loom::spank {

enum class Bind { kUnset, kNone, kRing, kGpu, kNuma };

struct PluginConfig {
  std::string topology;           // hwloc XML or nvidia-smi text; empty = live discovery
  Bind default_bind = Bind::kNone;
  bool strict = false;            // fail the task when binding fails
  bool export_files = true;       // write topology JSON and NCCL XML for the step
  std::string export_dir = "/tmp";
};

struct UserOptions {
  Bind bind = Bind::kUnset;
  bool verbose = false;
  std::string nic = "auto";       // auto | none | a NIC name
};

// Parses plugstack.conf arguments; returns "" on success, else a message naming the key,
// the value and what is allowed.
std::string parse_plugstack_args(const std::vector<std::string>& args, PluginConfig* out);

// Parses a --loom-bind value. "help" sets *help and returns "". Errors name the allowed values.
std::string parse_bind(const std::string& value, Bind* out, bool* help);
// Parses a --loom-nic value: auto, none, or a device name of [A-Za-z0-9_.:-]{1,32}.
std::string parse_nic(const std::string& value, std::string* out);

// The contract's environment default for --loom-bind (Slurm's own SPANK option variable,
// SLURM_SPANK__SLURM_SPANK_OPTION_loom_loom_bind, is honoured by Slurm itself).
constexpr const char* kBindEnv = "SLURM_SPANK__SLURM_SPANK_OPTION_loom_bind";

const char* bind_word(Bind b);
Bind effective_bind(const UserOptions& user, const PluginConfig& config);

extern const char* const kBindHelp;

}  // namespace loom::spank
