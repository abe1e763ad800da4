// process.hpp — running other programs and handing files to them, as loom-sweep and the serving
// controller do with sbatch, squeue and scancel: argv only (never a shell), shell quoting for the
// scripts they write, and files that appear whole (written aside, then renamed into place).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace loom::rt {

// Runs argv (no shell) in a process group of its own; returns its exit status (128 + N for
// signal N) and its stdout and stderr together in `out`; 127 if the program cannot be run; 124
// when it has not exited within `timeout_ms` (its group is then killed, and `out` says so).
// Reading stops when the program exits, even if a background child it left holds the output.
int run_program(const std::vector<std::string>& argv, std::string& out, int timeout_ms = 60000);

// `s` as one bash word: unchanged when it is plain, else in single quotes.
std::string shell_quote(const std::string& s);
// `s` for a script's comment or any one line of text: every control character (a newline would
// end the comment and run the rest) becomes '?'.
std::string comment_text(std::string s);

// Writes `text` to a new temporary file beside `path` (mkstemp: created exclusively, so a planted
// file or symlink is never followed), syncs it, gives it `mode`, renames it onto `path` and syncs
// the folder: a reader sees the old file or the new one, never a part, and a crash leaves one of
// the two. Throws rt::Error naming the file and the system's reason. The one atomic write.
void write_file_atomic(const std::string& path, const std::string& text, mode_t mode = 0644);
// The last half of that, for a writer that made `tmp` itself beside `path` (HDF5 wants a file
// name): syncs it, renames it onto `path` (removing it when anything fails) and syncs the folder.
void commit_file(const std::string& tmp, const std::string& path);

}  // namespace loom::rt
