// ops.hpp — what the operator kernels share: attributes with their ONNX defaults, shapes and
// broadcasting, int64 lists read from tensors, and the error that names the node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/rt/graph/graph.hpp"

namespace loom::rt::graph {

using Shape = std::vector<int64_t>;

[[noreturn]] void op_error(const Node& n, const std::string& why);

int64_t attr_i(const Node& n, const char* name, int64_t def);
float attr_f(const Node& n, const char* name, float def);
std::string attr_s(const Node& n, const char* name, const std::string& def);
// The ints of `name`, or `def` when the node does not have it.
std::vector<int64_t> attr_ints(const Node& n, const char* name, std::vector<int64_t> def = {});
bool has_attr(const Node& n, const char* name);

// Input i, which the node must have (throws naming the node otherwise).
const Tensor& need(const Node& n, const std::vector<const Tensor*>& in, size_t i);
// Optional input i, null when the node omits it.
inline const Tensor* optional_input(const std::vector<const Tensor*>& in, size_t i) { return i < in.size() ? in[i] : nullptr; }
// An int64 or int32 tensor's values (shapes, axes, pads, indices).
std::vector<int64_t> ints_of(const Node& n, const Tensor& t);
// Pad's pads for every dimension, from pads for `axes` (opset 18's input 3; empty: all of them).
std::vector<int64_t> pads_of(const Node& n, const std::vector<int64_t>& pads, const std::vector<int64_t>& axes, int r);
// `axis` in [-rank, rank) made non-negative; throws naming the node when outside.
int norm_axis(const Node& n, int64_t axis, int rank);

int64_t numel_of(const Shape& s);
// The numpy broadcast of two shapes; throws naming the node when they do not broadcast.
Shape broadcast_shape(const Node& n, const Shape& a, const Shape& b);
// Element strides of `s` placed in an output of rank `rank` (leading 1s, 0 where broadcast).
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out);
// Contiguous row-major strides.
std::vector<int64_t> strides_of(const Shape& s);

// A tensor of `shape` holding `src`'s elements reinterpreted (same storage, any dtype).
Tensor view_as(const Tensor& src, const Shape& shape);
Tensor make_i64(const std::vector<int64_t>& v, const Shape& shape);
// A total order on floats for the sorts (TopK, Unique, NonMaxSuppression): NaN after every number
// and equal to itself, so a comparator stays a strict weak order whatever a request carries.
inline int compare_total(double a, double b) {
  const bool na = a != a, nb = b != b;
  if (na || nb) return static_cast<int>(na) - static_cast<int>(nb);
  return a < b ? -1 : a > b ? 1 : 0;
}
// Element i of a tensor of any element type, as a double (ops_elementwise.cpp).
double load_as_double(const Tensor& t, int64_t i);
// Element i of a tensor of any element type set from a double (integers toward zero, saturated).
void store_from_double(Tensor& t, int64_t i, double v);

// fuse.cpp: the load-time fusions over nodes in execution order; returns how many nodes went.
// `folded`: nodes that constant folding ran at load (a QDQ model's DequantizeLinear of its int8
// weights), for the fusions that would rather take the weights as they were.
int fuse_nodes(std::vector<Node>& nodes, const std::vector<Tensor>& constants, const std::vector<int>& output_ids,
               const std::vector<Node>& folded = {});
// rows.cpp: "" when row i of every output provably depends on row i of the inputs alone (the
// folded graph, before fusion), else the first reason it does not or may not.
std::string rows_independent(const std::vector<Node>& nodes, const std::vector<Tensor>& constants,
                             const std::vector<int>& input_ids, const std::vector<TensorInfo>& inputs,
                             const std::vector<int>& output_ids, const std::vector<std::string>& names);

// Kernel families, each in its file; the registry (ops_registry.cpp) names them.
// ops_elementwise.cpp
void op_add(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_sub(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_mul(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_div(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_pow(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_equal(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_less(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_greater(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_where(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_greater_equal(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_less_equal(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_logic(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_variadic(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_prelu(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_mod(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_arg(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_hardmax(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_gather_elements(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_nll_loss(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_softmax_xent_loss(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_not(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_cast(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_unary(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // by n.op
void op_is_special(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // IsNaN, IsInf
// ops_shape.cpp
void op_identity(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_constant(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_shape(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_size(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_reshape(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_flatten(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_squeeze(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_unsqueeze(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_transpose(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_concat(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_split(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_slice(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_gather(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_expand(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_range(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_constant_of_shape(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_trilu(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_pad(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// ops_math.cpp
void op_matmul(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_gemm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_softmax(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // and LogSoftmax
void op_reduce(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);   // ReduceMean/Sum/Max
void op_layer_norm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// ops_conv.cpp
void op_conv(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_batch_norm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_pool(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // Max/AveragePool
void op_global_avg_pool(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // and GlobalMaxPool
void op_conv_transpose(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // ops_conv_transpose.cpp
// ops_norm.cpp
void op_instance_norm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_mvn(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_lrn(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_window(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // ops_signal.cpp: Hann, Hamming, Blackman
void op_rnn(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // ops_rnn.cpp: RNN, GRU, LSTM
void op_nms(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // ops_detection.cpp: NonMaxSuppression
// ops_resize.cpp
void op_resize(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_grid_sample(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// ops_index.cpp
void op_gather_nd(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_scatter_nd(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_scatter_elements(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_top_k(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_non_zero(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_unique(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_compress(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_one_hot(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_eye_like(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_tile(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_depth_space(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // DepthToSpace, SpaceToDepth
void op_reverse_sequence(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);

void op_cumsum(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // ops_math.cpp
void op_gelu(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // Gelu, Loom.Gelu (ops_fused.cpp)
// ops_attention.cpp: MatMul through the fusion's transposes (loom.perm_a/_b/_y, rank 3 or 4,
// both operands of that rank), and Loom.Attention.
void matmul_strided(const Node& n, const Tensor& a, const Tensor& b, float alpha, Tensor* out);
void op_attention(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// What Loom.Attention does to its scores between the MatMul and the Softmax, in the order of its
// loom.score_steps (fuse_attention.cpp writes them): a fake quantization (four of
// loom.score_consts: scale, zero point, range), a Div or a Mul by a scalar (one), the Where over
// its condition input (loom.fill, loom.keep), the Add of its mask input.
enum AttentionStep : int64_t { kStepQdq = 1, kStepDiv = 2, kStepMul = 3, kStepWhere = 4, kStepMask = 5 };
void op_affine(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // Loom.Affine (fused)
// ops_quant.cpp
void op_quantize_linear(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_dequantize_linear(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_clip(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_matmul_integer(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_qlinear_matmul(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_dynamic_quantize_linear(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// The fused forms of quantized models' patterns (fuse_quant.cpp): a QDQ pair in one pass;
// quantize_dynamic's MatMulInteger chain as one GEMM, its constant weight W (W_zero: absent, one
// value or one per column) set into the fused node's attributes by matmul_integer_weights.
void op_quantize_dequantize(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_matmul_integer_to_float(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void matmul_integer_weights(const Node& n, const Tensor& w, const Tensor* zero, std::map<std::string, Attr>* attrs);
int64_t exact_chunk(const Tensor& centred);
// ops_contrib.cpp: ONNX Runtime's com.microsoft operators, named "com.microsoft:<op>" in the graph
// (contrib_schemas.cpp describes them to ONNX's checker).
void op_ms_attention(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_multi_head_attention(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_embed_layer_norm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_skip_layer_norm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // and Simplified
void op_bias_gelu(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // FastGelu, QuickGelu
void op_fused_matmul(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// ops_qlinear.cpp: QLinearConv and the QOperator format's com.microsoft operators (ConvInteger: ops_quant.cpp)
void qlinear_conv_weights(const Node& n, const std::vector<const Tensor*>& in, std::map<std::string, Attr>* attrs);
void op_qlinear_conv(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
// ops_conv.cpp: ConvInteger's int32 sums on the int8 GEMM (x uint8, w int8); false where that
// does not apply. "loom.transient_weights" on a Conv keeps weights made for one call out of oneDNN's cache.
bool conv_integer_int8(const Node& n, const Tensor& x, int x_zero, const Tensor& w, int w_zero, Tensor* acc);
void op_conv_integer(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_qlinear_binary(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // QLinearAdd, QLinearMul
void op_qlinear_unary(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);  // pools, Softmax, Sigmoid, LeakyRelu
void op_qlinear_concat(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
void op_qgemm(const Node&, const std::vector<const Tensor*>&, std::vector<Tensor>&);
extern const char* const kContribDomain;  // "com.microsoft"
void register_contrib_schemas();  // once per process, before ONNX's checker sees a model

}  // namespace loom::rt::graph
