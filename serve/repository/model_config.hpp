// model_config.hpp — a model's configuration as Triton writes it (inference::ModelConfig): read
// from a model folder's config.pbtxt by protobuf's own text format parser, checked against the
// loaded model, completed from it, and what loom-serve runs with and reports (the
// model_configuration extension).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/options.hpp"
#include "core/tensor_in.hpp"
#include "model_config.pb.h"

namespace google::protobuf {
class Message;
}

namespace loom::serve {

class ServedModel;

using ConfigWarn = std::function<void(const std::string&)>;

// `folder`/config.pbtxt (at most 1 MiB) into `*c`; false when there is none. Throws rt::Error
// "FILE:LINE:COLUMN: what" for text that does not parse. Fields that are not in the messages
// loom-serve knows (Triton's optimization, sequence_batching, ...) are skipped and named in one
// warning through `warn`.
bool read_model_config(const std::string& folder, inference::ModelConfig* c, const ConfigWarn& warn);
// The text itself (for tests and fuzzing); `file` names it in errors.
inference::ModelConfig parse_model_config(const std::string& text, const std::string& file, const ConfigWarn& warn);

// The version folders (numbers) the config's version_policy serves among those `found`: latest
// (Triton's default, 1), all, or specific. Folders that are not numbers are not versions Triton
// would serve; with no config file every folder found is served.
std::vector<std::string> policy_versions(const inference::ModelConfig& c, const std::vector<std::string>& found);

// The configuration a loaded model version runs with. With `file` (the model folder's
// config.pbtxt), every name, datatype and dim it gives is checked against the model (rt::Error
// naming the model, the tensor and both values), what it leaves out is completed from the model,
// and its batching is applied to the model and to `*o` (max_batch_size, dynamic_batching's delay
// and preferred sizes, instance_group's count); without, the configuration is derived from the
// model and the server's options. `folder` is the model's name in the repository.
inference::ModelConfig settle_config(const inference::ModelConfig* file, const std::string& folder, ServedModel& m, Options* o);

// The configuration of what is described by its tensors alone (a pipeline): no batch dimension.
inference::ModelConfig described_config(const std::string& name, const std::string& platform, const std::vector<TensorDesc>& inputs,
                                        const std::vector<TensorDesc>& outputs);

// A message as Triton's HTTP API writes it: protobuf's JSON with the proto's field names, every
// field present, and 64-bit integers as numbers (protobuf's JSON makes them strings).
nlohmann::json proto_json(const google::protobuf::Message& m);

}  // namespace loom::serve
