// contrib_schemas.cpp — the operators of ONNX Runtime's own domain (com.microsoft) that its
// transformer optimizer writes into the models people ship (EmbedLayerNormalization, Attention,
// SkipLayerNormalization, BiasGelu, FastGelu, ...) and its quantizer's QOperator format (QLinearAdd,
// QGemm, ...), described to Debian's libonnx as ONNX Runtime
// defines them: their inputs, outputs, attributes and types, so that ONNX's checker verifies such
// a node (input counts, attribute kinds) and its shape inference carries types past it, as it
// does for the default domain. Registered once per process, before the first model is checked.
#include <onnx/defs/schema.h>
#include <onnx/defs/shape_inference.h>

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ops.hpp"

namespace loom::rt::graph {

namespace {

using onnx::AttributeProto;
using onnx::OpSchema;

const std::vector<std::string> kFloats = {"tensor(float)", "tensor(float16)", "tensor(bfloat16)"};

struct Param {
  const char* name;
  const char* type;
  bool optional;
  bool variadic = false;  // any number, of mixed types (QLinearConcat's triples)
};

struct AttrSpec {
  const char* name;
  AttributeProto::AttributeType type;
  bool required;
};

struct Contrib {
  const char* name;
  std::vector<Param> in, out;
  std::vector<AttrSpec> attrs;
  std::vector<std::pair<std::string, std::vector<std::string>>> types;
  onnx::InferenceFunction infer;
};

// Output `out` of element type `from`'s, and (where its rank is known) the shape of `dims`, each
// entry a dimension of input `dims[k].first` (its dims[k].second), or a fixed size (first < 0).
void shape_from(onnx::InferenceContext& ctx, size_t out, size_t from, const std::vector<std::pair<int, int64_t>>& dims) {
  if (ctx.getNumOutputs() <= out) return;
  onnx::propagateElemTypeFromInputToOutput(ctx, from, out);
  onnx::TensorShapeProto shape;
  for (const auto& [input, d] : dims) {
    if (input < 0) {
      shape.add_dim()->set_dim_value(d);
      continue;
    }
    if (!onnx::hasInputShape(ctx, static_cast<size_t>(input))) return;
    const auto& s = ctx.getInputType(static_cast<size_t>(input))->tensor_type().shape();
    if (d >= s.dim_size()) return;
    *shape.add_dim() = s.dim(static_cast<int>(d));
  }
  onnx::updateOutputShape(ctx, out, shape);
}

void same_as_first(onnx::InferenceContext& ctx) { onnx::propagateShapeAndTypeFromFirstInput(ctx); }

void skip_norm(onnx::InferenceContext& ctx) {
  onnx::propagateShapeAndTypeFromFirstInput(ctx);
  for (size_t k = 1; k < 3 && k < ctx.getNumOutputs(); ++k) onnx::updateOutputElemType(ctx, k, onnx::TensorProto::FLOAT);
  if (ctx.getNumOutputs() > 3) {
    onnx::propagateElemTypeFromInputToOutput(ctx, 0, 3);
    if (onnx::hasInputShape(ctx, 0)) onnx::propagateShapeFromInputToOutput(ctx, 0, 3);
  }
}

void embed_norm(onnx::InferenceContext& ctx) {
  shape_from(ctx, 0, 2, {{0, 0}, {0, 1}, {2, 1}});
  if (ctx.getNumOutputs() > 1) {
    onnx::updateOutputElemType(ctx, 1, onnx::TensorProto::INT32);
    shape_from(ctx, 1, 0, {{0, 0}});
  }
  shape_from(ctx, 2, 2, {{0, 0}, {0, 1}, {2, 1}});
}

// Attention's output: [batch, sequence, v hidden], v hidden from qkv_hidden_sizes or a third of
// the weight's columns.
void attention(onnx::InferenceContext& ctx) {
  onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0);
  if (ctx.getNumOutputs() > 1) onnx::propagateElemTypeFromInputToOutput(ctx, 0, 1);
  if (!onnx::hasInputShape(ctx, 0) || !onnx::hasInputShape(ctx, 1)) return;
  const auto& x = ctx.getInputType(0)->tensor_type().shape();
  const auto& w = ctx.getInputType(1)->tensor_type().shape();
  if (x.dim_size() != 3 || w.dim_size() != 2) fail_shape_inference("Attention takes input [batch, sequence, hidden] and weights [hidden, 3 x hidden]");
  onnx::TensorShapeProto y;
  *y.add_dim() = x.dim(0), *y.add_dim() = x.dim(1);
  std::vector<int64_t> sizes;
  if (const auto* a = ctx.getAttribute("qkv_hidden_sizes")) sizes.assign(a->ints().begin(), a->ints().end());
  if (sizes.size() == 3) y.add_dim()->set_dim_value(sizes[2]);
  else if (w.dim(1).has_dim_value()) y.add_dim()->set_dim_value(w.dim(1).dim_value() / 3);
  else y.add_dim();
  onnx::updateOutputShape(ctx, 0, y);
}

void multi_head(onnx::InferenceContext& ctx) {
  for (size_t k = 0; k < ctx.getNumOutputs(); ++k) onnx::propagateElemTypeFromInputToOutput(ctx, 0, k);
  const bool v3 = ctx.getNumInputs() > 2 && onnx::hasInputShape(ctx, 2) && ctx.getInputType(2)->tensor_type().shape().dim_size() == 3;
  if (onnx::hasInputShape(ctx, 0) && ctx.getInputType(0)->tensor_type().shape().dim_size() == 3)
    shape_from(ctx, 0, 0, {{0, 0}, {0, 1}, {v3 ? 2 : 0, 2}});
}

void first_type(onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 0, 0); }

// QGemm: float without y_scale, else y_zero_point's type (uint8 without one).
void qgemm_type(onnx::InferenceContext& ctx) {
  const auto present = [&](size_t i) { return ctx.getNumInputs() > i && ctx.getInputType(i) != nullptr; };
  if (!present(7)) onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::FLOAT);
  else if (present(8)) onnx::propagateElemTypeFromInputToOutput(ctx, 8, 0);
  else onnx::updateOutputElemType(ctx, 0, onnx::TensorProto::UINT8);
}

void zero_point_type(onnx::InferenceContext& ctx) { onnx::propagateElemTypeFromInputToOutput(ctx, 1, 0); }

// The QOperator format's one-input operators: X, X_scale, X_zero_point, Y_scale, Y_zero_point.
Contrib qlinear_unary(const char* name, std::vector<AttrSpec> attrs, bool zero_points_optional = true) {
  return {name,
          {{"X", "T", false}, {"X_scale", "tensor(float)", false}, {"X_zero_point", "T", zero_points_optional},
           {"Y_scale", "tensor(float)", false}, {"Y_zero_point", "T", zero_points_optional}},
          {{"Y", "T", false}}, std::move(attrs), {{"T", {"tensor(uint8)", "tensor(int8)"}}}, first_type};
}

Contrib qlinear_binary(const char* name) {
  return {name,
          {{"A", "T", false}, {"A_scale", "tensor(float)", false}, {"A_zero_point", "T", true}, {"B", "T", false},
           {"B_scale", "tensor(float)", false}, {"B_zero_point", "T", true}, {"C_scale", "tensor(float)", false},
           {"C_zero_point", "T", true}},
          {{"C", "T", false}}, {}, {{"T", {"tensor(uint8)", "tensor(int8)"}}}, first_type};
}

const std::vector<Contrib>& contribs() {
  using A = AttributeProto;
  const std::vector<std::pair<std::string, std::vector<std::string>>> t = {{"T", kFloats}};
  const std::vector<std::pair<std::string, std::vector<std::string>>> tu = {{"T", kFloats}, {"U", {"tensor(float)"}}};
  const std::vector<std::pair<std::string, std::vector<std::string>>> tm = {{"T", kFloats}, {"M", {"tensor(int32)"}}};
  static const std::vector<Contrib> all = {
      {"Gelu", {{"X", "T", false}}, {{"Y", "T", false}}, {}, t, same_as_first},
      {"BiasGelu", {{"A", "T", false}, {"B", "T", false}}, {{"C", "T", false}}, {}, t, same_as_first},
      {"FastGelu", {{"X", "T", false}, {"bias", "T", true}}, {{"Y", "T", false}}, {}, t, same_as_first},
      {"QuickGelu", {{"X", "T", false}}, {{"Y", "T", false}}, {{"alpha", A::FLOAT, false}}, t, same_as_first},
      {"SkipLayerNormalization",
       {{"input", "T", false}, {"skip", "T", false}, {"gamma", "T", false}, {"beta", "T", true}, {"bias", "T", true}},
       {{"output", "T", false}, {"mean", "U", true}, {"inv_std_var", "U", true}, {"input_skip_bias_sum", "T", true}},
       {{"epsilon", A::FLOAT, false}}, tu, skip_norm},
      {"SkipSimplifiedLayerNormalization",
       {{"input", "T", false}, {"skip", "T", false}, {"gamma", "T", false}, {"bias", "T", true}},
       {{"output", "T", false}, {"mean", "U", true}, {"inv_std_var", "U", true}, {"input_skip_bias_sum", "T", true}},
       {{"epsilon", A::FLOAT, false}}, tu, skip_norm},
      {"EmbedLayerNormalization",
       {{"input_ids", "T1", false}, {"segment_ids", "T1", true}, {"word_embedding", "T", false},
        {"position_embedding", "T", false}, {"segment_embedding", "T", true}, {"gamma", "T", false}, {"beta", "T", false},
        {"mask", "T1", true}, {"position_ids", "T1", true}},
       {{"output", "T", false}, {"mask_index", "T1", true}, {"embedding_sum", "T", true}},
       {{"epsilon", A::FLOAT, false}, {"mask_index_type", A::INT, false}},
       {{"T1", {"tensor(int32)"}}, {"T", {"tensor(float)", "tensor(float16)"}}}, embed_norm},
      {"Attention",
       {{"input", "T", false}, {"weights", "T", false}, {"bias", "T", true}, {"mask_index", "M", true}, {"past", "T", true},
        {"attention_bias", "T", true}, {"past_sequence_length", "M", true}},
       {{"output", "T", false}, {"present", "T", true}},
       {{"num_heads", A::INT, true}, {"unidirectional", A::INT, false}, {"qkv_hidden_sizes", A::INTS, false},
        {"scale", A::FLOAT, false}, {"mask_filter_value", A::FLOAT, false}, {"do_rotary", A::INT, false},
        {"rotary_embedding_dim", A::INT, false}, {"past_present_share_buffer", A::INT, false}},
       tm, attention},
      {"MultiHeadAttention",
       {{"query", "T", false}, {"key", "T", true}, {"value", "T", true}, {"bias", "T", true}, {"key_padding_mask", "M", true},
        {"attention_bias", "T", true}, {"past_key", "T", true}, {"past_value", "T", true},
        {"past_sequence_length", "M", true}, {"cache_indirection", "M", true}},
       {{"output", "T", false}, {"present_key", "T", true}, {"present_value", "T", true}, {"qk", "T", true}},
       {{"num_heads", A::INT, true}, {"unidirectional", A::INT, false}, {"scale", A::FLOAT, false},
        {"mask_filter_value", A::FLOAT, false}},
       tm, multi_head},
      {"FusedMatMul", {{"A", "T", false}, {"B", "T", false}}, {{"Y", "T", false}},
       {{"alpha", A::FLOAT, false}, {"transA", A::INT, false}, {"transB", A::INT, false}, {"transBatchA", A::INT, false},
        {"transBatchB", A::INT, false}},
       t, first_type},
      qlinear_binary("QLinearAdd"), qlinear_binary("QLinearMul"),
      qlinear_unary("QLinearAveragePool",
                    {{"kernel_shape", A::INTS, true}, {"strides", A::INTS, false}, {"pads", A::INTS, false},
                     {"auto_pad", A::STRING, false}, {"ceil_mode", A::INT, false}, {"count_include_pad", A::INT, false},
                     {"channels_last", A::INT, false}}),
      qlinear_unary("QLinearGlobalAveragePool", {{"channels_last", A::INT, false}}, false),
      qlinear_unary("QLinearSoftmax", {{"axis", A::INT, false}, {"opset", A::INT, true}}),
      qlinear_unary("QLinearSigmoid", {}), qlinear_unary("QLinearLeakyRelu", {{"alpha", A::FLOAT, false}}),
      {"QLinearConcat", {{"Y_scale", "TF", false}, {"Y_zero_point", "T8", false}, {"inputs", "TV", false, true}},
       {{"Y", "T8", false}}, {{"axis", A::INT, true}},
       {{"T8", {"tensor(uint8)", "tensor(int8)"}}, {"TF", {"tensor(float)"}}, {"TV", {"tensor(uint8)", "tensor(int8)", "tensor(float)"}}},
       zero_point_type},
      {"QGemm",
       {{"A", "TA", false}, {"a_scale", "T", false}, {"a_zero_point", "TA", false}, {"B", "TB", false},
        {"b_scale", "T", false}, {"b_zero_point", "TB", false}, {"C", "TC", true}, {"y_scale", "T", true},
        {"y_zero_point", "TYZ", true}},
       {{"Y", "TY", false}}, {{"alpha", A::FLOAT, false}, {"transA", A::INT, false}, {"transB", A::INT, false}},
       {{"T", {"tensor(float)"}}, {"TA", {"tensor(uint8)", "tensor(int8)"}}, {"TB", {"tensor(uint8)", "tensor(int8)"}},
        {"TC", {"tensor(int32)"}}, {"TYZ", {"tensor(uint8)", "tensor(int8)"}}, {"TY", {"tensor(float)", "tensor(uint8)", "tensor(int8)"}}},
       qgemm_type},
  };
  return all;
}

}  // namespace

const char* const kContribDomain = "com.microsoft";

void register_contrib_schemas() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance();
    if (!ranges.Map().count(kContribDomain)) ranges.AddDomainToVersion(kContribDomain, 1, 1);
    for (const auto& c : contribs()) {
      if (onnx::OpSchemaRegistry::Schema(c.name, 1, kContribDomain)) continue;
      OpSchema s;
      s.SetName(c.name).SetDomain(kContribDomain).SinceVersion(1);
      for (size_t i = 0; i < c.in.size(); ++i)
        s.Input(static_cast<int>(i), c.in[i].name, "", c.in[i].type,
                c.in[i].variadic ? OpSchema::Variadic : c.in[i].optional ? OpSchema::Optional : OpSchema::Single, !c.in[i].variadic);
      for (size_t i = 0; i < c.out.size(); ++i)
        s.Output(static_cast<int>(i), c.out[i].name, "", c.out[i].type, c.out[i].optional ? OpSchema::Optional : OpSchema::Single);
      for (const auto& a : c.attrs) s.Attr(a.name, "", a.type, a.required);
      for (const auto& [param, allowed] : c.types) s.TypeConstraint(param, allowed, "");
      s.TypeAndShapeInferenceFunction(c.infer);
      onnx::RegisterSchema(std::move(s));
    }
  });
}

}  // namespace loom::rt::graph
