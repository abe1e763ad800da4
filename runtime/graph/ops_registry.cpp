// ops_registry.cpp — the operators this executor runs, and the helpers every kernel shares.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "ops.hpp"

namespace loom::rt::graph {

namespace {

const std::unordered_map<std::string, OpFn>& registry() {
  static const std::unordered_map<std::string, OpFn> ops = {
      {"Add", op_add}, {"Sub", op_sub}, {"Mul", op_mul}, {"Div", op_div}, {"Pow", op_pow},
      {"Equal", op_equal}, {"Less", op_less}, {"Greater", op_greater}, {"Where", op_where}, {"Not", op_not},
      {"GreaterOrEqual", op_greater_equal}, {"LessOrEqual", op_less_equal}, {"And", op_logic}, {"Or", op_logic},
      {"Xor", op_logic}, {"Max", op_variadic}, {"Min", op_variadic}, {"Sum", op_variadic}, {"Mean", op_variadic},
      {"PRelu", op_prelu}, {"Mod", op_mod}, {"Gelu", op_gelu}, {"CumSum", op_cumsum},
      {"Cast", op_cast}, {"Relu", op_unary}, {"Sqrt", op_unary}, {"Erf", op_unary}, {"Tanh", op_unary},
      {"Sigmoid", op_unary}, {"Neg", op_unary}, {"Exp", op_unary}, {"Log", op_unary}, {"Reciprocal", op_unary},
      {"Abs", op_unary}, {"Sin", op_unary}, {"Cos", op_unary}, {"Tan", op_unary}, {"Asin", op_unary},
      {"Acos", op_unary}, {"Atan", op_unary}, {"Sinh", op_unary}, {"Cosh", op_unary}, {"Asinh", op_unary},
      {"Acosh", op_unary}, {"Atanh", op_unary}, {"Floor", op_unary}, {"Ceil", op_unary}, {"Round", op_unary},
      {"Sign", op_unary}, {"Softplus", op_unary}, {"Softsign", op_unary}, {"LeakyRelu", op_unary}, {"Elu", op_unary},
      {"Celu", op_unary}, {"Selu", op_unary}, {"ThresholdedRelu", op_unary}, {"HardSigmoid", op_unary},
      {"HardSwish", op_unary},
      {"Identity", op_identity}, {"Dropout", op_identity}, {"Constant", op_constant}, {"Shape", op_shape},
      {"Size", op_size}, {"Reshape", op_reshape}, {"Flatten", op_flatten}, {"Squeeze", op_squeeze},
      {"Unsqueeze", op_unsqueeze}, {"Transpose", op_transpose}, {"Concat", op_concat}, {"Split", op_split},
      {"Slice", op_slice}, {"Gather", op_gather}, {"Expand", op_expand}, {"Range", op_range},
      {"ConstantOfShape", op_constant_of_shape}, {"Trilu", op_trilu}, {"Pad", op_pad},
      {"MatMul", op_matmul}, {"Gemm", op_gemm}, {"Softmax", op_softmax}, {"LogSoftmax", op_softmax},
      {"ReduceMean", op_reduce}, {"ReduceSum", op_reduce}, {"ReduceMax", op_reduce}, {"ReduceMin", op_reduce},
      {"ReduceProd", op_reduce}, {"ReduceL1", op_reduce}, {"ReduceL2", op_reduce}, {"ReduceSumSquare", op_reduce},
      {"ReduceLogSum", op_reduce}, {"ReduceLogSumExp", op_reduce}, {"ArgMax", op_arg}, {"ArgMin", op_arg},
      {"Hardmax", op_hardmax}, {"GatherElements", op_gather_elements},
      {"NegativeLogLikelihoodLoss", op_nll_loss}, {"SoftmaxCrossEntropyLoss", op_softmax_xent_loss},
      {"LayerNormalization", op_layer_norm},
      {"Conv", op_conv}, {"BatchNormalization", op_batch_norm}, {"MaxPool", op_pool}, {"AveragePool", op_pool},
      {"GlobalAveragePool", op_global_avg_pool},
      {"QuantizeLinear", op_quantize_linear}, {"DequantizeLinear", op_dequantize_linear}, {"Clip", op_clip},
      {"ConvTranspose", op_conv_transpose}, {"GlobalMaxPool", op_global_avg_pool}, {"InstanceNormalization", op_instance_norm},
      {"MeanVarianceNormalization", op_mvn}, {"LRN", op_lrn}, {"Resize", op_resize}, {"CastLike", op_cast},
      {"IsNaN", op_is_special}, {"IsInf", op_is_special}, {"Shrink", op_unary},
      {"GatherND", op_gather_nd}, {"ScatterND", op_scatter_nd}, {"ScatterElements", op_scatter_elements},
      {"TopK", op_top_k}, {"NonZero", op_non_zero}, {"Compress", op_compress}, {"OneHot", op_one_hot},
      {"EyeLike", op_eye_like}, {"Tile", op_tile}, {"DepthToSpace", op_depth_space}, {"SpaceToDepth", op_depth_space},
      {"ReverseSequence", op_reverse_sequence}, {"HannWindow", op_window}, {"HammingWindow", op_window},
      {"BlackmanWindow", op_window}, {"RNN", op_rnn}, {"GRU", op_rnn}, {"LSTM", op_rnn},
      {"NonMaxSuppression", op_nms}, {"GridSample", op_grid_sample}, {"Unique", op_unique},
      {"DynamicQuantizeLinear", op_dynamic_quantize_linear}, {"MatMulInteger", op_matmul_integer}, {"QLinearMatMul", op_qlinear_matmul},
      {"com.microsoft:Attention", op_ms_attention}, {"com.microsoft:MultiHeadAttention", op_multi_head_attention},
      {"com.microsoft:EmbedLayerNormalization", op_embed_layer_norm},
      {"com.microsoft:SkipLayerNormalization", op_skip_layer_norm},
      {"com.microsoft:SkipSimplifiedLayerNormalization", op_skip_layer_norm}, {"com.microsoft:Gelu", op_gelu},
      {"com.microsoft:BiasGelu", op_bias_gelu}, {"com.microsoft:FastGelu", op_bias_gelu},
      {"com.microsoft:QuickGelu", op_bias_gelu},
      {"com.microsoft:FusedMatMul", op_fused_matmul}, {"QLinearConv", op_qlinear_conv}, {"ConvInteger", op_conv_integer},
      {"com.microsoft:QLinearAdd", op_qlinear_binary}, {"com.microsoft:QLinearMul", op_qlinear_binary},
      {"com.microsoft:QLinearAveragePool", op_qlinear_unary}, {"com.microsoft:QLinearGlobalAveragePool", op_qlinear_unary},
      {"com.microsoft:QLinearSoftmax", op_qlinear_unary}, {"com.microsoft:QLinearSigmoid", op_qlinear_unary},
      {"com.microsoft:QLinearLeakyRelu", op_qlinear_unary}, {"com.microsoft:QLinearConcat", op_qlinear_concat},
      {"com.microsoft:QGemm", op_qgemm},
  };
  return ops;
}

}  // namespace

OpFn find_op(const std::string& op) {
  auto it = registry().find(op);
  return it == registry().end() ? nullptr : it->second;
}

std::vector<std::string> operators() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : registry()) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

bool dtype_from_onnx(int32_t t, DType* out) {
  switch (t) {  // onnx::TensorProto_DataType
    case 1: *out = DType::kF32; return true;
    case 2: *out = DType::kU8; return true;
    case 3: *out = DType::kI8; return true;
    case 6: *out = DType::kI32; return true;
    case 7: *out = DType::kI64; return true;
    case 9: *out = DType::kBool; return true;
    case 10: *out = DType::kF16; return true;
    case 16: *out = DType::kBF16; return true;
    default: return false;
  }
}

int32_t onnx_dtype(DType t) {
  switch (t) {
    case DType::kF32: return 1;
    case DType::kU8: return 2;
    case DType::kI8: return 3;
    case DType::kI32: return 6;
    case DType::kI64: return 7;
    case DType::kBool: return 9;
    case DType::kF16: return 10;
    case DType::kBF16: return 16;
  }
  return 0;
}

const char* onnx_type_name(DType t) {
  switch (t) {
    case DType::kF32: return "FLOAT";
    case DType::kU8: return "UINT8";
    case DType::kI8: return "INT8";
    case DType::kI32: return "INT32";
    case DType::kI64: return "INT64";
    case DType::kBool: return "BOOL";
    case DType::kF16: return "FLOAT16";
    case DType::kBF16: return "BFLOAT16";
  }
  return "?";
}

const char* kserve_type_name(DType t) {
  switch (t) {
    case DType::kF32: return "FP32";
    case DType::kU8: return "UINT8";
    case DType::kI8: return "INT8";
    case DType::kI32: return "INT32";
    case DType::kI64: return "INT64";
    case DType::kBool: return "BOOL";
    case DType::kF16: return "FP16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

// What an operator refuses comes from the data it was given: the request's (the graph itself was
// run once on zeros at load).
void op_error(const Node& n, const std::string& why) { throw InvalidInput(n.label() + ": " + why); }

static const Attr* find_attr(const Node& n, const char* name) {
  auto it = n.attrs.find(name);
  return it == n.attrs.end() ? nullptr : &it->second;
}

bool has_attr(const Node& n, const char* name) { return find_attr(n, name) != nullptr; }

int64_t attr_i(const Node& n, const char* name, int64_t def) {
  const Attr* a = find_attr(n, name);
  if (!a) return def;
  if (a->kind != Attr::kInt) op_error(n, std::string("attribute ") + name + " is not an int");
  return a->i;
}

float attr_f(const Node& n, const char* name, float def) {
  const Attr* a = find_attr(n, name);
  if (!a) return def;
  if (a->kind != Attr::kFloat) op_error(n, std::string("attribute ") + name + " is not a float");
  return a->f;
}

std::string attr_s(const Node& n, const char* name, const std::string& def) {
  const Attr* a = find_attr(n, name);
  if (!a) return def;
  if (a->kind != Attr::kString) op_error(n, std::string("attribute ") + name + " is not a string");
  return a->s;
}

std::vector<int64_t> attr_ints(const Node& n, const char* name, std::vector<int64_t> def) {
  const Attr* a = find_attr(n, name);
  if (!a) return def;
  if (a->kind != Attr::kInts) op_error(n, std::string("attribute ") + name + " is not a list of ints");
  return a->ints;
}

const Tensor& need(const Node& n, const std::vector<const Tensor*>& in, size_t i) {
  if (i >= in.size() || !in[i]) op_error(n, "input " + std::to_string(i) + " is missing");
  return *in[i];
}

std::vector<int64_t> ints_of(const Node& n, const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kI64) {
    if (!v.empty()) std::memcpy(v.data(), t.data<int64_t>(), v.size() * sizeof(int64_t));  // memcpy of null: UB
  } else if (t.dtype() == DType::kI32) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = t.data<int32_t>()[i];
  } else {
    op_error(n, std::string("expected an int64 tensor, got ") + dtype_name(t.dtype()));
  }
  return v;
}

int norm_axis(const Node& n, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank)  // a scalar (rank 0) has no axis at all
    op_error(n, "axis " + std::to_string(axis) + " is outside a tensor of rank " + std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

int64_t numel_of(const Shape& s) { return checked_numel(s); }

static std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

Shape broadcast_shape(const Node& n, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) op_error(n, "shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    // Only a tensor of no elements has dimensions whose product overflows (a tensor's size is
    // bounded when it is allocated): its strides never address anything, so they saturate.
    if (__builtin_mul_overflow(acc, s[i], &acc)) acc = INT64_MAX;
  }
  return st;
}

std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  const std::vector<int64_t> own = strides_of(s);
  const size_t lead = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) st[lead + i] = s[i] == 1 ? 0 : own[i];
  return st;
}

Tensor view_as(const Tensor& src, const Shape& shape) { return src.reshape(shape); }

Tensor make_i64(const std::vector<int64_t>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kI64);
  if (!v.empty()) std::memcpy(t.data<int64_t>(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

}  // namespace loom::rt::graph
