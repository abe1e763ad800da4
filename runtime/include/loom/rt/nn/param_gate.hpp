// param_gate.hpp — where a model tells fully sharded training (ZeRO-3, train/zero3.hpp) which of
// its parameters it is about to use, so that only those are whole at a time (PyTorch FSDP's
// pre-forward and post-backward hooks, DeepSpeed's parameter coordinator). A model's parameters
// fall into groups of consecutive indices of its params() — its layers —, which forward uses in
// order and backward in reverse.
#pragma once

#include <cstddef>
#include <exception>
#include <vector>

namespace loom::rt {

struct ParamGroup {
  size_t first = 0, end = 0;  // params()[first, end)
};

class ParamGate {
 public:
  virtual ~ParamGate() = default;
  // Before the group's forward (backward false) or backward: its values are whole on return, and
  // in backward its gradients are allocated (the model overwrites them).
  virtual void enter(size_t group, bool backward) = 0;
  // After it: in forward its values may go; in backward its gradients are final and go, with the
  // values, to be reduce-scattered.
  virtual void leave(size_t group, bool backward) = 0;
};

// Calls gate->enter(group, backward) now and leave(group, backward) at the end of the scope; no
// gate (every parameter whole, as without --zero 3): nothing.
class GateScope {
 public:
  GateScope(ParamGate* gate, size_t group, bool backward) : gate_(gate), group_(group), backward_(backward) {
    if (gate_) gate_->enter(group_, backward_);
  }
  ~GateScope() noexcept(false) {
    if (gate_ && !std::uncaught_exceptions()) gate_->leave(group_, backward_);
  }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;

 private:
  ParamGate* gate_;
  size_t group_;
  bool backward_;
};

}  // namespace loom::rt
