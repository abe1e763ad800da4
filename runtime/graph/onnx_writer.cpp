// onnx_writer.cpp — Loom's MLPs as ONNX ModelProtos through Debian's libonnx, checked by ONNX's
// own checker and shape inference before the file is renamed into place.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "loom/rt/graph/export.hpp"
#include "loom/rt/graph/graph.hpp"
#include "loom/rt/proc/process.hpp"

namespace loom::rt::graph {
namespace {

constexpr int64_t kOpset = 13;

class Builder {
 public:
  explicit Builder(onnx::GraphProto* g) : g_(g) {}
  std::string constant(const std::string& name, const Tensor& t) {
    auto* p = g_->add_initializer();
    p->set_name(name);
    p->set_data_type(onnx_dtype(t.dtype()));
    for (int64_t d : t.shape()) p->add_dims(d);
    p->set_raw_data(t.data<char>(), t.bytes());
    return name;
  }
  std::string scalar(const std::string& name, float v) {
    Tensor t = Tensor::empty({});
    t.f32()[0] = v;
    return constant(name, t);
  }
  std::string scalar_u8(const std::string& name, int v) {
    Tensor t = Tensor::empty({}, DType::kU8);
    t.data<uint8_t>()[0] = static_cast<uint8_t>(v);
    return constant(name, t);
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, const std::string& out) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(out);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  }
  static void attr(onnx::NodeProto* n, const char* name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }

 private:
  onnx::GraphProto* g_;
};

void value_info(onnx::ValueInfoProto* v, const std::string& name, int32_t elem, int64_t width) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  t->mutable_shape()->add_dim()->set_dim_value(width);
}

// Layer l from `x`: [Clip, QuantizeLinear, DequantizeLinear,] Gemm with the (dequantized)
// weight, Relu unless last. Returns the output's name.
std::string layer(Builder& b, const MlpLayer& L, size_t l, bool last, std::string x) {
  const std::string p = "fc" + std::to_string(l + 1);
  if (L.quant_input) {
    const float lo = (0 - L.in_zero) * L.in_scale, hi = static_cast<float>(L.in_max - L.in_zero) * L.in_scale;
    x = b.node("Clip", {x, b.scalar(p + ".input_min", lo), b.scalar(p + ".input_max", hi)}, p + ".input_clipped")->output(0);
    const std::string s = b.scalar(p + ".input_scale", L.in_scale), z = b.scalar_u8(p + ".input_zero_point", L.in_zero);
    x = b.node("QuantizeLinear", {x, s, z}, p + ".input_q")->output(0);
    x = b.node("DequantizeLinear", {x, s, z}, p + ".input_dq")->output(0);
  }
  std::string w = b.constant(p + ".weight", L.weight);
  if (!L.w_scale.empty()) {
    const int64_t out = L.weight.dim(0);
    Tensor s = Tensor::empty({out}), z = Tensor::zeros({out}, DType::kI8);
    std::memcpy(s.f32(), L.w_scale.data(), L.w_scale.size() * sizeof(float));
    auto* dq = b.node("DequantizeLinear", {w, b.constant(p + ".weight_scale", s), b.constant(p + ".weight_zero_point", z)},
                      p + ".weight_dq");
    Builder::attr(dq, "axis", 0);
    w = dq->output(0);
  }
  auto* gemm = b.node("Gemm", {x, w, b.constant(p + ".bias", L.bias)}, last ? "logits" : p + ".out");
  Builder::attr(gemm, "transB", 1);
  if (last) return gemm->output(0);
  return b.node("Relu", {gemm->output(0)}, p + ".relu")->output(0);
}

void check_layers(const MlpGraph& g) {
  if (g.layers.empty()) throw Error("ONNX export: the model has no layers");
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const MlpLayer& L = g.layers[l];
    const bool int8 = !L.w_scale.empty();
    if (L.weight.ndim() != 2 || L.weight.dtype() != (int8 ? DType::kI8 : DType::kF32) || L.bias.numel() != L.weight.dim(0) ||
        (int8 && static_cast<int64_t>(L.w_scale.size()) != L.weight.dim(0)))
      throw Error("ONNX export: layer " + std::to_string(l + 1) + " has inconsistent weights, scales or bias");
    if (l > 0 && L.weight.dim(1) != g.layers[l - 1].weight.dim(0))
      throw Error("ONNX export: layer " + std::to_string(l + 1) + " does not take layer " + std::to_string(l) + "'s output");
  }
}

}  // namespace

void write_mlp_onnx(const std::string& path, const MlpGraph& g) {
  check_layers(g);
  onnx::ModelProto m;
  m.set_ir_version(7);  // the IR of opset 13
  m.set_producer_name(g.producer);
  m.set_model_version(1);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(kOpset);
  auto* graph = m.mutable_graph();
  graph->set_name("loom_mlp");
  Builder b(graph);
  const int64_t in = g.layers.front().weight.dim(1), out = g.layers.back().weight.dim(0);
  value_info(graph->add_input(), "input", g.pixels ? onnx_dtype(DType::kU8) : onnx_dtype(DType::kF32), in);
  value_info(graph->add_output(), "logits", onnx_dtype(DType::kF32), out);
  std::string x = "input";
  if (g.pixels) {  // (v * scale - mean) / std = v * (scale / std) + (-mean / std)
    auto* cast = b.node("Cast", {x}, "pixels_float");
    Builder::attr(cast, "to", onnx_dtype(DType::kF32));
    x = b.node("Mul", {cast->output(0), b.scalar("pixel_gain", g.scale / g.std)}, "pixels_scaled")->output(0);
    x = b.node("Add", {x, b.scalar("pixel_offset", -g.mean / g.std)}, "preprocessed")->output(0);
  }
  for (size_t l = 0; l < g.layers.size(); ++l) x = layer(b, g.layers[l], l, l + 1 == g.layers.size(), x);
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(), onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    throw Error("ONNX export: ONNX's checker refuses the graph: " + std::string(e.what()));
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw Error(path + ": cannot serialize the ONNX model");
  write_file_atomic(path, bytes);
}

}  // namespace loom::rt::graph
