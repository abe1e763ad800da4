// python_peer.hpp — the benchmarks' PyTorch peers: a script run by /usr/bin/python3 (or
// $LOOM_PYTHON) with its arguments, its stdout read back as one number (the figure). The peer
// is run at its best of three thread set-ups (PyTorch's OpenMP threads and OpenBLAS's
// oversubscribe a small machine), and the set-up that won is reported.
#pragma once

#include <string>
#include <vector>

// -1 when the interpreter, torch or the script fails. `env` ("" or "NAME=VALUE") is set first.
double python_figure(const char* script, const std::vector<std::string>& args, const char* env);
// The best of "", OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1; *setup names the winner.
double python_best_figure(const char* script, const std::vector<std::string>& args, std::string* setup);
