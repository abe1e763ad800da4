// rows_test.cpp — the pass that decides whether requests may share a run (rows.cpp): graphs
// whose rows stay independent (the exporter's shape arithmetic included) are proven so; every
// way a row can reach another (a reduction, a Gram matrix, a Reshape that merges the rows, a
// constant with rows of its own, arithmetic on N, rows in blocks that do not line up) is refused,
// with the node named; rows merged with other dimensions, in blocks, are followed.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ops.hpp"

namespace {

using loom::rt::DType;
using loom::rt::Tensor;
using loom::rt::graph::Attr;
using loom::rt::graph::Node;
using loom::rt::graph::TensorInfo;

Attr ints(std::vector<int64_t> v) { return Attr::of(std::move(v)); }
Attr ai(int64_t v) { return Attr::of(v); }

// A graph by value names, as the loader builds it (folded: constants are values with tensors).
struct G {
  std::map<std::string, int> ids;
  std::vector<std::string> names;
  std::vector<Tensor> constants;
  std::vector<Node> nodes;
  std::vector<int> in_ids, out_ids;
  std::vector<TensorInfo> inputs;
  int v(const std::string& n) {
    auto it = ids.find(n);
    if (it != ids.end()) return it->second;
    names.push_back(n);
    constants.emplace_back();
    return ids[n] = static_cast<int>(names.size()) - 1;
  }
  G& input(const std::string& n, std::vector<int64_t> shape) {
    in_ids.push_back(v(n));
    inputs.push_back({n, DType::kF32, shape, {}});
    return *this;
  }
  G& constant(const std::string& n, std::vector<int64_t> shape, std::vector<int64_t> vals = {}) {
    Tensor t = Tensor::empty(shape, DType::kI64);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = i < static_cast<int64_t>(vals.size()) ? vals[i] : 1;
    constants[static_cast<size_t>(v(n))] = t;
    return *this;
  }
  G& node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          std::map<std::string, Attr> attrs = {}) {
    Node n;
    n.op = op;
    n.name = out[0];
    for (auto& s : in) n.in.push_back(s.empty() ? -1 : v(s));
    for (auto& s : out) n.out.push_back(v(s));
    n.attrs = std::move(attrs);
    nodes.push_back(n);
    return *this;
  }
  std::string why(const std::string& output = "y") {
    out_ids = {v(output)};
    return loom::rt::graph::rows_independent(nodes, constants, in_ids, inputs, out_ids, names);
  }
};

TEST(RowIndependence, RowWiseOperatorsAreProven) {
  G g;
  g.input("x", {-1, 4}).constant("w", {4, 3}).constant("b", {3});
  g.node("MatMul", {"x", "w"}, {"m"}).node("Add", {"m", "b"}, {"a"}).node("Relu", {"a"}, {"r"});
  g.node("Softmax", {"r"}, {"s"}, {{"axis", ai(-1)}});
  g.node("ReduceMean", {"s"}, {"y"}, {{"axes", ints({1})}, {"keepdims", ai(1)}});
  EXPECT_EQ(g.why(), "");
}

TEST(RowIndependence, TheExportersShapeArithmeticIsFollowed) {
  // Shape -> Gather(0) -> Unsqueeze -> Concat([N], [S], [2], [2]) -> Reshape, then Transpose
  // and attention's MatMul of two rows values, as torch.onnx.export writes BERT's heads.
  G g;
  g.input("x", {-1, -1, 4}).constant("zero", {}, {0}).constant("one", {}, {1}).constant("ax0", {1}, {0});
  g.constant("heads", {2}, {2, 2});
  g.node("Shape", {"x"}, {"shape"}).node("Gather", {"shape", "zero"}, {"n"}, {{"axis", ai(0)}});
  g.node("Gather", {"shape", "one"}, {"s"}, {{"axis", ai(0)}});
  g.node("Unsqueeze", {"n", "ax0"}, {"n1"}).node("Unsqueeze", {"s", "ax0"}, {"s1"});
  g.node("Concat", {"n1", "s1", "heads"}, {"target"}, {{"axis", ai(0)}});
  g.node("Reshape", {"x", "target"}, {"r"}).node("Transpose", {"r"}, {"q"}, {{"perm", ints({0, 2, 1, 3})}});
  g.node("Transpose", {"r"}, {"k"}, {{"perm", ints({0, 2, 3, 1})}});
  g.node("MatMul", {"q", "k"}, {"scores"}).node("Softmax", {"scores"}, {"p"}, {{"axis", ai(-1)}});
  g.node("ConstantOfShape", {"shape"}, {"zeros"});  // token types: zeros of the input's shape
  g.node("MatMul", {"p", "q"}, {"ctx"}).node("Transpose", {"ctx"}, {"t"}, {{"perm", ints({0, 2, 1, 3})}});
  g.node("Reshape", {"t", "target3"}, {"y"});
  g.constant("target3", {3}, {0, 0, 4});  // 0 copies N
  EXPECT_EQ(g.why(), "");
}

TEST(RowIndependence, AReductionOverTheRowsIsRefused) {
  G g;
  g.input("x", {-1, 2});
  g.node("ReduceMean", {"x"}, {"m"}, {{"axes", ints({0})}}).node("Sub", {"x", "m"}, {"y"});
  EXPECT_NE(g.why().find("ReduceMean 'm': it runs over the rows"), std::string::npos) << g.why();
}

TEST(RowIndependence, AGramMatrixIsRefused) {
  G g;
  g.input("x", {-1, 2});
  g.node("Transpose", {"x"}, {"xt"}, {{"perm", ints({1, 0})}}).node("MatMul", {"x", "xt"}, {"y"});
  EXPECT_NE(g.why().find("MatMul"), std::string::npos) << g.why();
}

TEST(RowIndependence, ReshapesThatMayMergeRowsAreRefused) {
  G a;  // [-1, 4] of [N, S, 2]: S is not known, so the rows may merge
  a.input("x", {-1, -1, 2}).constant("t", {2}, {-1, 4}).node("Reshape", {"x", "t"}, {"y"});
  EXPECT_NE(a.why().find("merge"), std::string::npos) << a.why();
  G b;  // [-1, 4] of [N, 2, 2]: every other dimension known, so row i stays row i
  b.input("x", {-1, 2, 2}).constant("t", {2}, {-1, 4}).node("Reshape", {"x", "t"}, {"y"});
  EXPECT_EQ(b.why(), "");
  G c;  // Flatten at axis 0 puts every row in one
  c.input("x", {-1, 2}).node("Flatten", {"x"}, {"y"}, {{"axis", ai(0)}});
  EXPECT_NE(c.why(), "");
}

TEST(RowIndependence, AConstantWithRowsOfItsOwnIsRefused) {
  G a;  // x[N,2] + c[3,2]: row i gets c's row i, so its answer depends on its place
  a.input("x", {-1, 2}).constant("c", {3, 2}).node("Add", {"x", "c"}, {"y"});
  EXPECT_NE(a.why().find("several elements along the rows"), std::string::npos) << a.why();
  G b;
  b.input("x", {-1, 2}).constant("c", {1, 2}).node("Add", {"x", "c"}, {"y"});
  EXPECT_EQ(b.why(), "");
}

TEST(RowIndependence, AxisOperatorsOverTheRowsAreRefused) {
  auto one = [](const std::string& op, std::map<std::string, Attr> attrs, std::vector<std::string> extra = {}) {
    G g;
    g.input("x", {-1, 3}).constant("i", {1}, {0});
    std::vector<std::string> in = {"x"};
    in.insert(in.end(), extra.begin(), extra.end());
    g.node(op, in, {"y"}, std::move(attrs));
    return g.why();
  };
  EXPECT_NE(one("Softmax", {{"axis", ai(0)}}), "");
  EXPECT_NE(one("Gather", {{"axis", ai(0)}}, {"i"}), "");  // picks rows
  EXPECT_EQ(one("Gather", {{"axis", ai(1)}}, {"i"}), "");
  EXPECT_NE(one("Squeeze", {}), "");  // no axes: squeezes N when it is 1
  EXPECT_NE(one("Concat", {{"axis", ai(0)}}, {"x"}), "");
  EXPECT_NE(one("Slice", {}, {"i", "i"}), "");  // starts and ends on axis 0
  EXPECT_NE(one("ReduceSum", {{"keepdims", ai(1)}}), "");  // every axis
  EXPECT_NE(one("Size", {}), "");
}

// A detector's or segmenter's layers: activations beside Relu, per-sample normalizations and a
// Resize whose constant scales keep the rows are proven; a Resize that scales the rows is not.
G image_model(float batch_scale) {
  G g;
  g.input("x", {-1, 4, 8, 8});
  g.constants[static_cast<size_t>(g.v("w"))] = Tensor::zeros({1, 2, 3, 3});
  Tensor sc = Tensor::empty({4});
  const float v[4] = {batch_scale, 1, 2, 2};
  for (int i = 0; i < 4; ++i) sc.f32()[i] = v[i];
  g.constants[static_cast<size_t>(g.v("scales"))] = sc;
  g.node("LeakyRelu", {"x"}, {"a"}).node("HardSwish", {"a"}, {"b"}).node("InstanceNormalization", {"b", "", ""}, {"c"});
  g.node("Resize", {"c", "", "scales"}, {"d"}, {{"mode", Attr::of(std::string("nearest"))}});
  g.node("DepthToSpace", {"d"}, {"d2"}, {{"blocksize", ai(2)}}).node("ConvTranspose", {"d2", "w"}, {"d3"});
  g.node("Max", {"d3", "d3"}, {"e"}).node("GlobalMaxPool", {"e"}, {"y"});
  return g;
}

TEST(RowIndependence, ImageModelOperatorsAreFollowed) {
  EXPECT_EQ(image_model(1).why(), "");
  const std::string why = image_model(2).why();
  EXPECT_NE(why.find("Resize"), std::string::npos) << why;
}

// PyTorch 2's exporter writes flatten(1) after a pooled convolution as Reshape(x, [-1, C]), and
// a Conv1d's output fed time-major to a GRU as Reshape(y, [T, -1, 2H]): proven once the pass
// knows the channels (the weight's) and the sizes the convolution and pooling keep; not where a
// Reshape's constant merges them with the rows.
std::string flatten_after_conv(int64_t c, int64_t t, const std::string& output) {
  G g;
  g.input("x", {-1, 3, 7}).constant("w", {5, 3, 3}).constant("shape", {2}, {-1, c}).constant("seq", {3}, {t, -1, 5});
  g.node("Conv", {"x", "w"}, {"a"}, {{"pads", ints({1, 1})}}).node("MaxPool", {"a"}, {"b"}, {{"kernel_shape", ints({3})}, {"pads", ints({1, 1})}, {"strides", ints({1})}});
  g.node("Transpose", {"b"}, {"bt"}, {{"perm", ints({2, 0, 1})}}).node("Reshape", {"bt", "seq"}, {"r"});
  g.node("Transpose", {"r"}, {"rt"}, {{"perm", ints({1, 0, 2})}}).node("GlobalAveragePool", {"b"}, {"p"});
  g.node("Reshape", {"p", "shape"}, {"f"}).node("Concat", {"f", "f"}, {"y"}, {{"axis", ai(1)}});
  return g.why(output);
}

TEST(RowIndependence, ReshapesAfterConvolutionsKeepTheRows) {
  EXPECT_EQ(flatten_after_conv(5, 7, "y"), "");
  EXPECT_EQ(flatten_after_conv(5, 7, "rt"), "");
  EXPECT_NE(flatten_after_conv(1, 7, "y"), "");  // [5N, 1]: the rows merged with the channels
  EXPECT_NE(flatten_after_conv(5, 1, "rt"), "");
}

// Hugging Face's padding mask as PyTorch 2 exports it: mask[arange(N)[:, None], arange(S)] by
// GatherND over indices whose first column is the rows' own numbers. Proven; not when those
// numbers are computed upon (+1), sit in another column, or index data without rows.
std::string row_numbers_mask(int variant) {
  G g;
  g.input("x", {-1, -1}).constant("zero", {}, {0}).constant("one", {}, {1}).constant("ax0", {1}, {0});
  g.constant("ax1", {1}, {1}).constant("axl", {1}, {-1}).constant("table", {4, 4});
  g.node("Shape", {"x"}, {"shape"}).node("Gather", {"shape", "zero"}, {"n"}, {{"axis", ai(0)}});
  g.node("Gather", {"shape", "one"}, {"s"}, {{"axis", ai(0)}});
  g.node("Range", {"zero", "n", "one"}, {"rn"}).node("Range", {"zero", "s", "one"}, {"rs"});
  if (variant == 1) g.node("Add", {"rn", "one"}, {"rn1"});
  g.node("Unsqueeze", {variant == 1 ? "rn1" : "rn", "ax1"}, {"rows"}).node("Unsqueeze", {"rs", "ax0"}, {"cols"});
  g.node("Max", {"rows", "cols"}, {"both"}).node("Shape", {"both"}, {"bshape"});
  g.node("Expand", {"rows", "bshape"}, {"re"}).node("Expand", {"cols", "bshape"}, {"ce"});
  g.node("Unsqueeze", {"re", "axl"}, {"r1"}).node("Unsqueeze", {"ce", "axl"}, {"c1"});
  if (variant == 2) g.node("Concat", {"c1", "r1"}, {"idx"}, {{"axis", ai(-1)}});
  else g.node("Concat", {"r1", "c1"}, {"idx"}, {{"axis", ai(-1)}});
  g.node("GatherND", {variant == 3 ? "table" : "x", "idx"}, {"y"});
  return g.why();
}

TEST(RowIndependence, TheRowsOwnNumbersIndexTheirRows) {
  EXPECT_EQ(row_numbers_mask(0), "");
  for (int variant : {1, 2, 3}) EXPECT_NE(row_numbers_mask(variant).find("GatherND"), std::string::npos) << variant;
}

// Open dimensions that the inputs name alike are one size: HF's BERT reshapes the hidden states
// of input_ids [N, S, d] into heads by the shape of attention_mask [N, S], then merges the heads
// with the rows. Without the names the two S are two sizes and the heads' count is not known.
std::string named_sequences(const std::string& ids_name, const std::string& mask_name) {
  G g;
  g.input("x", {-1, -1, 8}).input("m", {-1, -1});
  g.inputs[0].dim_names = {"batch", ids_name, ""}, g.inputs[1].dim_names = {"batch", mask_name};
  g.constant("tail", {2}, {-1, 4}).constant("m1", {1}, {-1}).constant("two", {1}, {2}).constant("four", {1}, {4});
  g.constant("zero", {1}, {0}).constant("one", {1}, {1}).constant("end", {1}, {2});
  g.node("Shape", {"m"}, {"ms"}).node("Concat", {"ms", "tail"}, {"t1"}, {{"axis", ai(0)}});
  g.node("Slice", {"ms", "zero", "one"}, {"n"}).node("Slice", {"ms", "one", "end"}, {"s"});
  g.node("Reshape", {"x", "t1"}, {"a"}).node("Transpose", {"a"}, {"b"}, {{"perm", ints({0, 2, 1, 3})}});
  g.node("Concat", {"m1", "s", "four"}, {"t2"}, {{"axis", ai(0)}}).node("Reshape", {"b", "t2"}, {"c"});  // [2N, S, 4]
  g.node("Concat", {"n", "two", "s", "four"}, {"t3"}, {{"axis", ai(0)}}).node("Reshape", {"c", "t3"}, {"y"});
  return g.why();
}

TEST(RowIndependence, OpenDimensionsNamedAlikeAreOneSize) {
  EXPECT_EQ(named_sequences("sequence", "sequence"), "");
  EXPECT_NE(named_sequences("sequence", "other"), "");
  EXPECT_NE(named_sequences("", ""), "");
}

// GPT-2's fused QKV as PyTorch 2 exports it: Split(num_outputs=3) of [N, S, 3d], then a Reshape
// whose -1 the part's length gives. Proven where the pass knows the parts (num_outputs, or the
// constant split); not where they cannot be told (a split that does not divide).
std::string split_then_reshape(int64_t width, bool num_outputs) {
  G g;
  g.input("x", {-1, 6, width}).constant("t", {3}, {-1, 6, 8}).constant("parts", {3}, {8, 8, 8});
  std::map<std::string, Attr> attrs = {{"axis", ai(2)}};
  if (num_outputs) attrs["num_outputs"] = ai(3);
  g.node("Split", num_outputs ? std::vector<std::string>{"x"} : std::vector<std::string>{"x", "parts"}, {"q", "k", "v"}, attrs);
  g.node("Reshape", {"k", "t"}, {"y"});
  return g.why();
}

TEST(RowIndependence, SplitPartsKeepTheirLengths) {
  EXPECT_EQ(split_then_reshape(24, true), "");
  EXPECT_EQ(split_then_reshape(24, false), "");
  EXPECT_NE(split_then_reshape(25, true), "");  // parts of 9, 9, 7
}

// nn.GRU(batch_first=True) as exported: X transposed to [T, N, I], the initial state zeros of
// [1, N, H] from N; its batch is the rows. Fed [N, T, I] as if time-major, the rows would be time.
TEST(RowIndependence, RecurrentLayersFollowTheirBatch) {
  auto gru = [](bool transposed) {
    G g;
    g.input("x", {-1, 7, 6}).constant("w", {1, 24, 6}).constant("r", {1, 24, 8}).constant("zero", {}, {0});
    g.constant("one", {1}, {1}).constant("eight", {1}, {8}).constant("ax0", {1}, {0});
    g.node("Shape", {"x"}, {"shape"}).node("Gather", {"shape", "zero"}, {"n"}, {{"axis", ai(0)}});
    g.node("Unsqueeze", {"n", "ax0"}, {"n1"}).node("Concat", {"one", "n1", "eight"}, {"hshape"}, {{"axis", ai(0)}});
    g.node("ConstantOfShape", {"hshape"}, {"h0"});
    if (transposed) g.node("Transpose", {"x"}, {"xt"}, {{"perm", ints({1, 0, 2})}});
    g.node("GRU", {transposed ? "xt" : "x", "w", "r", "", "", "h0"}, {"yg", "yh"}, {{"hidden_size", ai(8)}});
    g.node("Transpose", {"yg"}, {"y"}, {{"perm", ints({2, 0, 1, 3})}});
    return g.why();
  };
  EXPECT_EQ(gru(true), "");
  EXPECT_NE(gru(false).find("GRU"), std::string::npos);
}

// [N, S, 4] -> [N·S, 4] by a shape computed from N: followed (a row-wise op may run on it), and
// proven once split back; returned merged, it is refused, naming the output.
G merged_rows(bool split_back) {
  G g;
  g.input("x", {-1, -1, 4}).constant("zero", {}, {0}).constant("one", {}, {1}).constant("ax0", {1}, {0});
  g.constant("four", {1}, {4}).constant("w", {4, 4});
  g.node("Shape", {"x"}, {"shape"}).node("Gather", {"shape", "zero"}, {"n"}, {{"axis", ai(0)}});
  g.node("Gather", {"shape", "one"}, {"s"}, {{"axis", ai(0)}}).node("Mul", {"n", "s"}, {"ns"});
  g.node("Unsqueeze", {"ns", "ax0"}, {"ns1"}).node("Concat", {"ns1", "four"}, {"t"}, {{"axis", ai(0)}});
  g.node("Reshape", {"x", "t"}, {"m"}).node("MatMul", {"m", "w"}, {split_back ? "mw" : "y"});
  if (split_back) g.node("Reshape", {"mw", "shape"}, {"y"});
  return g;
}

TEST(RowIndependence, RowsMergedWithOtherDimensionsAreFollowed) {
  EXPECT_EQ(merged_rows(true).why(), "");
  EXPECT_NE(merged_rows(false).why().find("output 'y' holds the rows merged"), std::string::npos) << merged_rows(false).why();
}

// nn.MultiheadAttention as torch.onnx.export writes it (batch_first): x [N, T, d] -> [T, N, d]
// -> [T, N·heads, d/heads] -> [N·heads, T, d/heads], attention per (row, head), then back
// through [T·N, d] (out_proj's Gemm) and [T, N, d] to [N, T, d]; the key padding mask [N, T]
// expanded to [N, heads, 1, T] and reshaped to [N·heads, 1, T] meets the scores in the same blocks.
TEST(RowIndependence, MultiheadAttentionsHeadsAreFollowed) {
  G g;
  g.input("x", {-1, -1, 8}).input("mask", {-1, -1});
  g.constant("zero", {}, {0}).constant("one", {}, {1}).constant("ax0", {1}, {0}).constant("heads", {}, {2});
  g.constant("hd", {1}, {4}).constant("d", {1}, {8}).constant("ones", {2}, {1, 1}).constant("eh", {4}, {1, 2, 1, 1});
  g.constant("minus1", {1}, {-1}).constant("w", {8, 8}).constant("b", {8});
  g.node("Transpose", {"x"}, {"xt"}, {{"perm", ints({1, 0, 2})}}).node("Shape", {"xt"}, {"sh"});
  g.node("Gather", {"sh", "zero"}, {"t"}, {{"axis", ai(0)}}).node("Gather", {"sh", "one"}, {"n"}, {{"axis", ai(0)}});
  g.node("Mul", {"n", "heads"}, {"nh"}).node("Unsqueeze", {"t", "ax0"}, {"t1"}).node("Unsqueeze", {"nh", "ax0"}, {"nh1"});
  g.node("Concat", {"t1", "nh1", "hd"}, {"qshape"}, {{"axis", ai(0)}}).node("Reshape", {"xt", "qshape"}, {"q3"});
  g.node("Transpose", {"q3"}, {"q"}, {{"perm", ints({1, 0, 2})}}).node("Transpose", {"q3"}, {"kt"}, {{"perm", ints({1, 2, 0})}});
  g.node("MatMul", {"q", "kt"}, {"scores"});
  g.node("Unsqueeze", {"n", "ax0"}, {"n1"}).node("Concat", {"n1", "ones", "minus1"}, {"mshape"}, {{"axis", ai(0)}});
  g.node("Reshape", {"mask", "mshape"}, {"m4"}).node("Expand", {"m4", "eh"}, {"me"});
  g.node("Concat", {"nh1", "one1", "minus1"}, {"m3shape"}, {{"axis", ai(0)}}).constant("one1", {1}, {1});
  g.node("Reshape", {"me", "m3shape"}, {"m3"}).node("Add", {"scores", "m3"}, {"masked"});
  g.node("Softmax", {"masked"}, {"p"}, {{"axis", ai(-1)}}).node("MatMul", {"p", "q"}, {"ctx"});
  g.node("Transpose", {"ctx"}, {"ct"}, {{"perm", ints({1, 0, 2})}}).node("Mul", {"t", "n"}, {"tn"});
  g.node("Unsqueeze", {"tn", "ax0"}, {"tn1"}).node("Concat", {"tn1", "d"}, {"flat"}, {{"axis", ai(0)}});
  g.node("Reshape", {"ct", "flat"}, {"c2"}).node("Gemm", {"c2", "w", "b"}, {"o2"});
  g.node("Concat", {"t1", "n1", "d"}, {"back"}, {{"axis", ai(0)}}).node("Reshape", {"o2", "back"}, {"o3"});
  g.node("Transpose", {"o3"}, {"y"}, {{"perm", ints({1, 0, 2})}});
  EXPECT_EQ(g.why(), "");
}

TEST(RowIndependence, RowsInOtherBlocksAreRefused) {
  // [N, 2, 3] -> [N·2, 3] holds row i at i / 2; [2, N, 3] -> [2·N, 3] at i % N: adding them
  // mixes requests.
  G g;
  g.input("x", {-1, 2, 3}).constant("zero", {}, {0}).constant("ax0", {1}, {0}).constant("two", {}, {2}).constant("three", {1}, {3});
  g.node("Shape", {"x"}, {"sh"}).node("Gather", {"sh", "zero"}, {"n"}, {{"axis", ai(0)}}).node("Mul", {"n", "two"}, {"n2"});
  g.node("Unsqueeze", {"n2", "ax0"}, {"n21"}).node("Concat", {"n21", "three"}, {"t"}, {{"axis", ai(0)}});
  g.node("Reshape", {"x", "t"}, {"a"}).node("Transpose", {"x"}, {"xt"}, {{"perm", ints({1, 0, 2})}});
  g.node("Reshape", {"xt", "t"}, {"b"}).node("Add", {"a", "b"}, {"y"});
  EXPECT_NE(g.why().find("Add 'y': its inputs hold the rows in different blocks"), std::string::npos) << g.why();
}

TEST(RowIndependence, ArithmeticOnTheNumberOfRowsIsRefused) {
  G a;  // N + 1 rows: a shape no request alone would have
  a.input("x", {-1, 4}).constant("zero", {}, {0}).constant("one", {}, {1});
  a.node("Shape", {"x"}, {"shape"}).node("Gather", {"shape", "zero"}, {"n"}, {{"axis", ai(0)}});
  a.node("Add", {"n", "one"}, {"n1"}).node("Range", {"zero", "n1", "one"}, {"y"});
  EXPECT_NE(a.why().find("Add 'n1': it computes with the number of rows"), std::string::npos) << a.why();
  G b;  // [N, 4] -> [2, -1, 4]: the rows split in two halves
  b.input("x", {-1, 4}).constant("t", {3}, {2, -1, 4}).node("Reshape", {"x", "t"}, {"y"});
  EXPECT_NE(b.why().find("Reshape 'y': it may merge the rows"), std::string::npos) << b.why();
}

TEST(RowIndependence, AnOutputWithoutTheRowsIsRefused) {
  G g;
  g.input("x", {-1, 2}).node("Shape", {"x"}, {"y"});
  EXPECT_NE(g.why().find("output 'y'"), std::string::npos) << g.why();
}

}  // namespace
