// options.hpp — loom-train's option table, the one place each training option is named, typed,
// described and given its default (TrainConfig's own). loom-train reads all of it (command line
// and --config FILE); loom-compress's subcommands, which train with the same loop, take the
// options they need from it by name, so an option is written once for both tools.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/train/train_config.hpp"

namespace loom::rt {

// What is read as text and interpreted after (the data source, the widths, the seed).
struct TrainOptionText {
  std::string layers, data, config, seed, qat_scales;
};

// Every loom-train option, each bound to its field of `c` (its default `c`'s value at the call)
// or of `in`.
boost::program_options::options_description train_options(TrainConfig& c, TrainOptionText& in);

// The options of `names` (in that order) from the same table, under `caption`. A name the table
// lacks is a bug (LOOM_CHECK).
boost::program_options::options_description train_options(TrainConfig& c, TrainOptionText& in,
                                                          const std::vector<std::string>& names,
                                                          const std::string& caption);

// --seed: digits only, 0 to 2^64-1 (Boost would read "-5" as 2^64-5). Throws loom::UsageError.
uint64_t parse_seed(const std::string& text);

}  // namespace loom::rt
