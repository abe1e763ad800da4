// model_config.hpp — what a model folder's Triton config.pbtxt says that loom-serve honors.
#pragma once

#include <string>

namespace loom::serve {

// The fields of Triton's ModelConfig (protobuf text format) that loom-serve reads; the others
// are skipped. max_batch_size: -1 when the file does not say, 0 = never join requests (Triton's
// "no batching"), K = at most K rows in one batch.
struct ModelConfig {
  int max_batch_size = -1;
};

// `folder`/config.pbtxt when there is one (at most 1 MiB), a default ModelConfig when there is
// none. Throws rt::Error naming the file, the line and what is wrong.
ModelConfig read_model_config(const std::string& folder);
// The text itself (for tests and fuzzing); `file` names it in errors.
ModelConfig parse_model_config(const std::string& text, const std::string& file);

}  // namespace loom::serve
