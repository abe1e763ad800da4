// process.hpp — running other programs and handing files to them, as loom-sweep and the serving
// controller do with sbatch, squeue and scancel: argv only (never a shell), shell quoting for the
// scripts they write, and files that appear whole (written aside, then renamed into place).
#pragma once

#include <string>
#include <vector>

namespace loom::rt {

// Runs argv (no shell); returns its exit status (128 + N for signal N) and its stdout and
// stderr together in `out`; 127 if the program cannot be run.
int run_program(const std::vector<std::string>& argv, std::string& out);

// `s` as one bash word: unchanged when it is plain, else in single quotes.
std::string shell_quote(const std::string& s);

// Writes `text` to path.tmp, then renames it onto `path`: a reader sees the old file or the new
// one, never a part. Throws std::runtime_error.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace loom::rt
