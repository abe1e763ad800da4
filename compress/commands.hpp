// commands.hpp — loom-compress's subcommands, each parsing its own options (argv[0] is the
// subcommand's name). They return the exit status; bad usage throws Usage, failures rt::Error.
#pragma once

#include <string>

#include "loom/error.hpp"

namespace loom::compress {

using Usage = loom::UsageError;

int cmd_prune(int argc, char** argv);
int cmd_quantize(int argc, char** argv);
int cmd_distill(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_convert(int argc, char** argv);

}  // namespace loom::compress
