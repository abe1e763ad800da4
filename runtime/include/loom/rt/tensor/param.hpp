// param.hpp — a named trainable tensor and its gradient: what models expose and what the
// optimizers, mixed precision, gradient exchange and checkpoints work on.
#pragma once

#include <string>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt {

struct Param {
  std::string name;  // as PyTorch's state_dict names it ("fc1.weight")
  Tensor value;
  Tensor grad;
};

}  // namespace loom::rt
