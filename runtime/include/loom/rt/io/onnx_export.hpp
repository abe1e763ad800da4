// onnx_export.hpp — a Loom HDF5 model file written as ONNX (Contract 8): loom-compress convert
// and loom-train --export FILE.onnx share it.
#pragma once

#include <string>

namespace loom::rt {

// Whether this build writes ONNX (Debian's libonnx was found at configure time).
bool onnx_export_available();

// Reads the mlp model `h5_path` (fp32, INT8 or INT8 weights only; checksums verified) and writes
// it as ONNX to `onnx_path` (the file appears whole or not at all). Throws Error naming the
// reason: not an mlp, no ONNX in this build, a file that does not load.
void export_onnx(const std::string& h5_path, const std::string& onnx_path, const std::string& producer);

}  // namespace loom::rt
