// fuzz_onnx.cpp — libFuzzer target for the ONNX loader and executor (issue 33): the input builds
// a small graph (one to three nodes from the operators whose shapes come from data — Expand,
// ConstantOfShape, Range, Pad, Reshape, Slice, Gather, Squeeze, Unsqueeze, Concat,
// Split, Transpose, Softmax, the Reduce ops, Tile, GatherND, Resize, OneHot, TopK, NonZero,
// DepthToSpace, ConvTranspose, NonMaxSuppression, LSTM, Unique, GridSample, Gelu, CumSum,
// ONNX Runtime's Attention, MultiHeadAttention, EmbedLayerNormalization, SkipLayerNormalization,
// FastGelu and FusedMatMul, and element-wise ones — with fuzzed attributes — at opset 17 or 20,
// masks and ids from an INT32 input), or hands its bytes to the
// loader as a model file; the graph is loaded (ONNX's checker, shape inference, the load's run
// on zeros) and run once on fuzzed tensors: float data of any rank and
// small dimensions, and an INT64 vector of any values (shapes, indices, axes, pads, limits).
// Every model must load or be refused with an Error, and every run must answer or throw one:
// never a crash, a read out of bounds, or an allocation past the run's memory budget (64 MiB
// here; -malloc_limit_mb and -rss_limit_mb hold the process to it).
#include <fuzzer/FuzzedDataProvider.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "loom/rt/error.hpp"
#include "loom/rt/graph/graph.hpp"
#include "loom/rt/tensor/tensor.hpp"

namespace {

const char* kOps[] = {"Expand", "ConstantOfShape", "Range",     "Pad",        "Reshape",   "Slice",     "Gather",
                      "Squeeze", "Unsqueeze",      "Concat",    "Split",      "Transpose", "Softmax",   "ReduceSum",
                      "ReduceMean", "Add",         "Mul",       "Relu",       "Flatten",   "Shape",     "Cast",
                      "Where",   "MatMul",         "LayerNormalization", "Trilu", "Identity", "Tile", "GatherND",
                      "Resize",  "OneHot",         "TopK",      "NonZero",    "DepthToSpace", "ConvTranspose", "NonMaxSuppression", "LSTM", "Unique", "GridSample", "Gelu", "CumSum",
                      "ms:Attention", "ms:MultiHeadAttention", "ms:EmbedLayerNormalization", "ms:SkipLayerNormalization",
                      "ms:FastGelu", "ms:FusedMatMul", "q:MatMulInteger"};

void add_int_attr(onnx::NodeProto* n, const char* name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// quantize_dynamic's chain from x to y (the executor fuses it): DynamicQuantizeLinear, MatMulInteger
// by the constant int8 weight "q8" (its zero point "q8z"), Cast to float, Mul by the scales; the
// weight's shape, values and scales fuzzed.
void add_quantized_matmul(FuzzedDataProvider& p, onnx::GraphProto* g, const std::string& x, const std::string& y) {
  const int64_t k = p.ConsumeIntegralInRange<int64_t>(0, 6), cols = p.ConsumeIntegralInRange<int64_t>(0, 6);
  auto* w = g->add_initializer();
  w->set_name("q8" + y), w->set_data_type(p.ConsumeBool() ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8);
  w->add_dims(k), w->add_dims(cols);
  std::string bytes;
  for (int64_t i = 0; i < k * cols; ++i) bytes.push_back(static_cast<char>(p.ConsumeIntegral<uint8_t>()));
  w->set_raw_data(bytes);
  auto* z = g->add_initializer();
  z->set_name("q8z" + y), z->set_data_type(w->data_type()), z->set_raw_data(std::string(1, static_cast<char>(p.ConsumeIntegral<uint8_t>())));
  auto* s = g->add_initializer();
  s->set_name("q8s" + y), s->set_data_type(onnx::TensorProto::FLOAT);
  const bool per_column = p.ConsumeBool();
  if (per_column) s->add_dims(cols);
  for (int64_t i = 0; i < (per_column ? cols : 1); ++i) s->add_float_data(p.ConsumeFloatingPointInRange<float>(-1, 1));
  const auto node = [&](const char* op, std::vector<std::string> in, std::vector<std::string> out) {
    auto* n = g->add_node();
    n->set_op_type(op), n->set_name(std::string(op) + "_" + out[0]);
    for (const auto& i : in) n->add_input(i);
    for (const auto& o : out) n->add_output(o);
    return n;
  };
  node("DynamicQuantizeLinear", {x}, {y + "_q", y + "_s", y + "_z"});
  node("Mul", {y + "_s", "q8s" + y}, {y + "_scale"});
  node("MatMulInteger", {y + "_q", "q8" + y, y + "_z", "q8z" + y}, {y + "_acc"});
  add_int_attr(node("Cast", {y + "_acc"}, {y + "_f"}), "to", onnx::TensorProto::FLOAT);
  node("Mul", {y + "_f", y + "_scale"}, {y});
}

// One node: its data input is `x` (a float tensor so far), its integer input `b` where the op
// takes one; the output is named `y`. Returns the op.
std::string add_node(FuzzedDataProvider& p, onnx::GraphProto* g, const std::string& x, const std::string& y) {
  std::string op = kOps[p.ConsumeIntegralInRange<size_t>(0, sizeof kOps / sizeof kOps[0] - 1)];
  if (op == "q:MatMulInteger") {
    add_quantized_matmul(p, g, x, y);
    return "MatMul";
  }
  auto* n = g->add_node();
  if (op.rfind("ms:", 0) == 0) op = op.substr(3), n->set_domain("com.microsoft");
  n->set_op_type(op);
  n->set_name(op + "_" + y);
  n->add_output(y);
  if (n->domain() == "com.microsoft") {  // masks and ids from the int32 input m
    const std::map<std::string, std::vector<std::string>> operands = {
        {"Attention", {x, "a", "", "m"}}, {"MultiHeadAttention", {x, "a", "a", "", "m"}},
        {"EmbedLayerNormalization", {"m", "", "a", "a", "", "w", "w"}}, {"SkipLayerNormalization", {x, "a", "w"}},
        {"FastGelu", {x, "w"}}, {"FusedMatMul", {x, "a"}}};
    for (const auto& in : operands.at(op)) n->add_input(in);
    if (op == "Attention" || op == "MultiHeadAttention") {
      add_int_attr(n, "num_heads", p.ConsumeIntegralInRange<int64_t>(-1, 4));
      add_int_attr(n, "unidirectional", p.ConsumeIntegralInRange(0, 1));
    }
    if (op == "FusedMatMul") add_int_attr(n, "transA", p.ConsumeIntegralInRange(0, 1)), add_int_attr(n, "transB", p.ConsumeIntegralInRange(0, 1));
  } else if (op == "ConstantOfShape") {
    n->add_input("b");
  } else if (op == "Range") {
    for (int i = 0; i < 3; ++i) n->add_input("s" + std::to_string(i));
  } else if (op == "Split") {
    n->add_input(x);
    n->add_input("b");
    n->mutable_output()->Clear();
    n->add_output(y);
    n->add_output(y + "_rest");
  } else if (op == "Add" || op == "Mul" || op == "MatMul" || op == "Concat" || op == "ConvTranspose") {
    n->add_input(x);
    n->add_input("a");
  } else if (op == "NonMaxSuppression") {  // boxes, scores, max boxes from the ints
    for (const char* in : {x.c_str(), "a", "b"}) n->add_input(in);
  } else if (op == "LSTM") {  // X, W and R from the floats
    for (const char* in : {x.c_str(), "a", "a"}) n->add_input(in);
    add_int_attr(n, "hidden_size", p.ConsumeIntegralInRange<int64_t>(-1, 4));
  } else if (op == "Resize") {  // sizes from the ints
    for (const char* in : {x.c_str(), "", "", "b"}) n->add_input(in);
  } else if (op == "OneHot") {  // indices, depth, values [off, on]
    for (const char* in : {"b", "s0", "a"}) n->add_input(in);
    add_int_attr(n, "axis", p.ConsumeIntegralInRange<int64_t>(-3, 2));
  } else if (op == "TopK") {
    n->add_input(x);
    n->add_input("b");
    n->add_output(y + "_indices");
  } else if (op == "CumSum") {  // the axis from the ints
    n->add_input(x);
    n->add_input("b");
    add_int_attr(n, "exclusive", p.ConsumeIntegralInRange(0, 1));
    add_int_attr(n, "reverse", p.ConsumeIntegralInRange(0, 1));
  } else if (op == "GridSample") {
    n->add_input(x);
    n->add_input("a");
  } else if (op == "NonZero" || op == "DepthToSpace" || op == "Unique") {
    n->add_input(x);
    if (op == "DepthToSpace") add_int_attr(n, "blocksize", p.ConsumeIntegralInRange<int64_t>(-1, 3));
  } else if (op == "Where") {
    n->add_input("c");
    n->add_input(x);
    n->add_input("a");
  } else if (op == "Relu" || op == "Transpose" || op == "Softmax" || op == "Flatten" || op == "Identity" ||
             op == "LayerNormalization" || op == "Gelu") {
    n->add_input(x);
    if (op == "LayerNormalization") n->add_input("w");
    if (op == "Gelu" && p.ConsumeBool()) {
      auto* a = n->add_attribute();
      a->set_name("approximate"), a->set_type(onnx::AttributeProto::STRING), a->set_s(p.ConsumeBool() ? "tanh" : "none");
    }
  } else if (op == "Shape" || op == "Cast") {
    n->add_input(x);
    if (op == "Cast") add_int_attr(n, "to", onnx::TensorProto::FLOAT);
  } else if (op == "Slice") {  // starts and ends from the same ints
    n->add_input(x);
    n->add_input("b");
    n->add_input("b");
  } else if (op == "ReduceMean") {  // axes as an input only from opset 18
    n->add_input(x);
  } else {  // Expand, Pad, Reshape, Gather, Squeeze, Unsqueeze, ReduceSum, Trilu, Tile, GatherND: data, ints
    n->add_input(x);
    n->add_input("b");
  }
  if ((op == "Gather" || op == "Concat" || op == "Split" || op == "Softmax" || op == "Flatten" ||
       op == "LayerNormalization") && p.ConsumeBool())
    add_int_attr(n, "axis", p.ConsumeIntegralInRange<int64_t>(-5, 5));
  if (op == "ConvTranspose" && p.ConsumeBool()) {
    auto* a = n->add_attribute();
    a->set_name(p.ConsumeBool() ? "strides" : "output_shape");
    a->set_type(onnx::AttributeProto::INTS);
    const int k = p.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < k; ++i) a->add_ints(p.ConsumeIntegralInRange<int64_t>(-2, 9));
  }
  if (op == "ReduceSum" || op == "ReduceMean") add_int_attr(n, "keepdims", p.ConsumeIntegralInRange(0, 1));
  if (op == "Transpose" && p.ConsumeBool()) {
    auto* a = n->add_attribute();
    a->set_name("perm");
    a->set_type(onnx::AttributeProto::INTS);
    const int k = p.ConsumeIntegralInRange(0, 4);
    for (int i = 0; i < k; ++i) a->add_ints(p.ConsumeIntegralInRange<int64_t>(-4, 4));
  }
  return op;
}

void value_info(onnx::ValueInfoProto* v, const std::string& name, int type, int rank) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  auto* shape = t->mutable_shape();
  for (int i = 0; i < rank; ++i) shape->add_dim()->set_dim_param("d" + name + std::to_string(i));
}

std::string model_bytes(FuzzedDataProvider& p, int rank_a, int rank_x) {
  onnx::ModelProto m;
  m.set_ir_version(7);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);  // every operator above but Gelu is in opset 17; 20 (below) is written as 17 for ONNX's checker
  auto* g = m.mutable_graph();
  g->set_name("fuzz");
  value_info(g->add_input(), "x", onnx::TensorProto::FLOAT, rank_x);
  value_info(g->add_input(), "a", onnx::TensorProto::FLOAT, rank_a);
  value_info(g->add_input(), "b", onnx::TensorProto::INT64, 1);
  value_info(g->add_input(), "c", onnx::TensorProto::BOOL, rank_a);
  value_info(g->add_input(), "w", onnx::TensorProto::FLOAT, 1);
  for (int i = 0; i < 3; ++i) value_info(g->add_input(), "s" + std::to_string(i), onnx::TensorProto::INT64, 0);
  value_info(g->add_input(), "m", onnx::TensorProto::INT32, p.ConsumeIntegralInRange(0, 3));
  auto* ms = m.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  const int nodes = p.ConsumeIntegralInRange(1, 3);
  std::string x = "x", last;
  for (int i = 0; i < nodes; ++i) {
    const std::string y = "y" + std::to_string(i);
    last = add_node(p, g, x, y);
    x = y;
  }
  // The output's type must be declared; its rank is a guess (shape inference refuses a wrong
  // one, which is a refusal like any other).
  if (last == "Shape") value_info(g->add_output(), x, onnx::TensorProto::INT64, 1);
  else value_info(g->add_output(), x, onnx::TensorProto::FLOAT, p.ConsumeIntegralInRange(0, 4));
  if (p.ConsumeBool()) opset->set_version(20);
  return m.SerializeAsString();
}

loom::rt::Tensor floats(FuzzedDataProvider& p, int rank) {
  std::vector<int64_t> shape;
  for (int i = 0; i < rank; ++i) shape.push_back(p.ConsumeIntegralInRange<int64_t>(0, 6));
  loom::rt::Tensor t = loom::rt::Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = p.ConsumeFloatingPointInRange<float>(-4, 4);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return 0;
  FuzzedDataProvider p(data, size);
  const bool raw = p.ConsumeIntegralInRange(0, 7) == 0;  // one input in eight: the bytes as a model file
  const int rank_x = p.ConsumeIntegralInRange(0, 4), rank_a = p.ConsumeIntegralInRange(0, 4);
  const std::string bytes = raw ? p.ConsumeRemainingBytesAsString() : model_bytes(p, rank_a, rank_x);
  char path[] = "/dev/shm/loom-fuzz-onnx-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return 0;
  (void)!::write(fd, bytes.data(), bytes.size());
  ::close(fd);
  try {
    loom::rt::graph::Model m = loom::rt::graph::Model::load(path);
    ::unlink(path);
    m.set_memory_budget(size_t{64} << 20);
    std::vector<loom::rt::Tensor> in;
    for (const auto& info : m.inputs()) {
      if (info.dtype == loom::rt::DType::kI64) {
        std::vector<int64_t> shape;
        const int64_t k = info.shape.empty() ? 1 : p.ConsumeIntegralInRange<int64_t>(0, 6);
        if (!info.shape.empty()) shape.push_back(k);
        loom::rt::Tensor t = loom::rt::Tensor::empty(shape, loom::rt::DType::kI64);
        for (int64_t i = 0; i < t.numel(); ++i)
          t.data<int64_t>()[i] = p.ConsumeBool() ? p.ConsumeIntegralInRange<int64_t>(-8, 8) : p.ConsumeIntegral<int64_t>();
        in.push_back(t);
      } else if (info.dtype == loom::rt::DType::kI32) {  // masks, ids
        std::vector<int64_t> shape;
        for (size_t i = 0; i < info.shape.size(); ++i) shape.push_back(p.ConsumeIntegralInRange<int64_t>(0, 6));
        loom::rt::Tensor t = loom::rt::Tensor::empty(shape, loom::rt::DType::kI32);
        for (int64_t i = 0; i < t.numel(); ++i)
          t.data<int32_t>()[i] = p.ConsumeBool() ? p.ConsumeIntegralInRange<int32_t>(-2, 8) : p.ConsumeIntegral<int32_t>();
        in.push_back(t);
      } else if (info.dtype == loom::rt::DType::kBool) {
        std::vector<int64_t> shape;
        for (size_t i = 0; i < info.shape.size(); ++i) shape.push_back(p.ConsumeIntegralInRange<int64_t>(0, 6));
        loom::rt::Tensor t = loom::rt::Tensor::empty(shape, loom::rt::DType::kBool);
        for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = p.ConsumeBool();
        in.push_back(t);
      } else {
        in.push_back(floats(p, static_cast<int>(info.shape.size())));
      }
    }
    m.run(in);
  } catch (const loom::rt::Error& e) {
    // refused, by name: what the target wants
    static const bool debug = std::getenv("LOOM_FUZZ_DEBUG") != nullptr;  // =1: print each refusal
    if (debug) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  ::unlink(path);
  return 0;
}
