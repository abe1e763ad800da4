// graph.hpp — ONNX models in the runtime: a file read through Debian's ONNX library (the
// protobuf ModelProto, its checker and shape inference), checked against the operators this
// executor runs, folded and planned once at load, then run on host tensors with any batch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/rt/tensor/tensor.hpp"

namespace loom::rt::graph {

// A graph input or output as the model declares it: -1 for a dynamic dimension.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // ONNX's dim_param of each dimension ("" where none): open dimensions named alike are one size
  // (the inputs' "sequence"), which each run checks.
  std::vector<std::string> dim_names;
};

// ONNX's names for the datatypes ("FLOAT", "INT64", ...) and KServe's ("FP32", "INT64", ...).
const char* onnx_type_name(DType t);
const char* kserve_type_name(DType t);
// ONNX's TensorProto element types <-> the runtime's (false / 0 for one it does not have).
bool dtype_from_onnx(int32_t t, DType* out);
int32_t onnx_dtype(DType t);
// The ai.onnx operators this executor runs, sorted (a model with any other is refused at load).
std::vector<std::string> operators();

// One attribute of a node, of whichever ONNX kind it is.
struct Attr {
  enum Kind { kInt, kFloat, kString, kInts, kFloats, kTensor, kStrings } kind = kInt;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::string> strs;
  Tensor t;
  static Attr of(int64_t v) {
    Attr a;
    a.kind = kInt, a.i = v;
    return a;
  }
  static Attr of(float v) {
    Attr a;
    a.kind = kFloat, a.f = v;
    return a;
  }
  static Attr of(std::vector<int64_t> v) {
    Attr a;
    a.kind = kInts, a.ints = std::move(v);
    return a;
  }
  static Attr of(std::string v) {
    Attr a;
    a.kind = kString, a.s = std::move(v);
    return a;
  }
};

struct Node;
// An operator's kernel: inputs (null for an omitted optional one) to outputs.
using OpFn = void (*)(const Node& node, const std::vector<const Tensor*>& in, std::vector<Tensor>& out);

struct Node {
  std::string op, name;
  std::vector<int> in, out;  // value ids; -1 is an omitted optional input
  std::map<std::string, Attr> attrs;
  OpFn fn = nullptr;
  // The node's label in messages: "Conv 'conv1'".
  std::string label() const { return op + (name.empty() ? "" : " '" + name + "'"); }
};

// The kernel of an operator (a default-domain type, or "com.microsoft:<type>" for ONNX Runtime's
// own), null when this executor does not run it.
OpFn find_op(const std::string& op);

// A loaded model. run() may be called from several threads at once.
class Model {
 public:
  // Reads, checks and prepares `path` (external-data initializers beside it). Throws
  // rt::Error naming the file and the reason: not ONNX, an opset outside 13-20, an operator
  // outside the supported set (with its domain), a graph the checker or shape inference refuses.
  static Model load(const std::string& path);
  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  int64_t opset() const { return opset_; }
  size_t node_count() const { return nodes_.size(); }
  // How many nodes the load-time passes removed: folded constants and fused patterns.
  int folded() const { return folded_; }
  int fused() const { return fused_; }
  // Whether requests may be stacked along dimension 0 and run as one: a load-time pass proved
  // that row i of every output depends on row i of the inputs alone (rows.cpp). When it could
  // not, why_not_row_independent() names the node and the reason.
  bool row_independent() const { return not_row_independent_.empty(); }
  const std::string& why_not_row_independent() const { return not_row_independent_; }
  // Empty when a run on zeros at batch 1 passed at load; else what failed there, when the
  // graph leaves dimensions past the rows open and may need other sizes in them.
  const std::string& probe_note() const { return probe_note_; }
  // Inputs in inputs() order, each of its declared dtype and rank (a fixed dimension must
  // match); answers in outputs() order. Throws rt::Error naming the input or the failing node;
  // AllocationRefused (naming the node) when the tensors alive at once would pass the run's
  // memory budget: a shape computed from a request never takes more than that.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;
  // The bytes of tensors one run may hold at once (default kDefaultRunBudget; 0: no budget).
  void set_memory_budget(size_t bytes) { budget_ = bytes; }
  size_t memory_budget() const { return budget_; }
  static constexpr size_t kDefaultRunBudget = size_t{1} << 30;

 private:
  friend struct Loader;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<int> input_ids_, output_ids_;
  std::vector<std::string> names_;  // value id -> name
  std::vector<Tensor> constants_;   // value id -> tensor (undefined when not constant)
  std::vector<Node> nodes_;         // in execution order
  std::vector<std::vector<int>> release_;  // node -> values dead after it
  int64_t opset_ = 0;
  int folded_ = 0, fused_ = 0;
  std::string not_row_independent_, probe_note_;
  size_t budget_ = kDefaultRunBudget;
  void prepare();  // fold, fuse, plan
  void run_node(const Node& n, std::vector<Tensor>& vals) const;
};

}  // namespace loom::rt::graph
