// onnx_reader.cpp — an ONNX file to the executor's graph: parsed by Debian's ONNX library
// (libonnx_proto), refused early with the reason a user can act on (not ONNX, opset, operator
// and domain), then checked by ONNX's checker and strict shape inference; initializers read from
// the file or from external data beside it, every size checked before it is allocated.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "loom/rt/graph/graph.hpp"
#include "loom/rt/tensor/kernels.hpp"
#include "ops.hpp"

namespace loom::rt::graph {

struct Loader {
  static Model load(const std::string& path);
  static std::string request_parameter(const Model& model);
};

namespace {

constexpr int64_t kMinOpset = 13, kMaxOpset = 20;
constexpr int64_t kMaxElements = int64_t{1} << 33;  // 32 GiB of float: a header claiming more is refused

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open");
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string dir_of(const std::string& path) {
  const auto s = path.rfind('/');
  return s == std::string::npos ? "." : path.substr(0, s);
}

// An external-data location must stay beside the model: no absolute path, no "..".
bool safe_location(const std::string& loc) {
  if (loc.empty() || loc[0] == '/') return false;
  std::istringstream parts(loc);
  for (std::string p; std::getline(parts, p, '/');)
    if (p == "..") return false;
  return true;
}

Tensor read_tensor(const onnx::TensorProto& t, const std::string& model_dir, const std::string& what) {
  DType dt;
  if (!dtype_from_onnx(t.data_type(), &dt))
    throw Error(what + ": element type " + std::to_string(t.data_type()) + " is not supported");
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error(what + ": a negative dimension");
    if (d && n > kMaxElements / d) throw Error(what + ": its header claims more than 2^33 elements");
    n *= d;
  }
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dt);
  Tensor out = Tensor::empty(dims, dt);
  char* dst = out.data<char>();
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string loc;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location") loc = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    }
    if (!safe_location(loc)) throw Error(what + ": external data location '" + loc + "' is outside the model's folder");
    if (length >= 0 && static_cast<size_t>(length) != bytes)
      throw Error(what + ": external data of " + std::to_string(length) + " bytes for " + std::to_string(bytes));
    char dir_real[PATH_MAX], file_real[PATH_MAX];  // and no symbolic link out of it either
    if (!realpath(model_dir.c_str(), dir_real) || !realpath((model_dir + "/" + loc).c_str(), file_real))
      throw Error(what + ": cannot open external data " + loc);
    const std::string root = std::string(dir_real) + "/";
    if (std::string(file_real).compare(0, root.size(), root) != 0)
      throw Error(what + ": external data location '" + loc + "' resolves outside the model's folder");
    std::ifstream f(file_real, std::ios::binary);
    if (!f) throw Error(what + ": cannot open external data " + loc);
    f.seekg(offset);
    if (!f.read(dst, static_cast<std::streamsize>(bytes)))
      throw Error(what + ": external data " + loc + " is shorter than the tensor");
    return out;
  }
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes)
      throw Error(what + ": " + std::to_string(t.raw_data().size()) + " bytes of data for shape of " + std::to_string(bytes));
    std::memcpy(dst, t.raw_data().data(), bytes);
    return out;
  }
  auto fill = [&](auto& field, auto conv) {
    if (static_cast<int64_t>(field.size()) != n)
      throw Error(what + ": " + std::to_string(field.size()) + " values for " + std::to_string(n) + " elements");
    for (int64_t i = 0; i < n; ++i) conv(i, field.Get(static_cast<int>(i)));
  };
  switch (dt) {
    case DType::kF32: fill(t.float_data(), [&](int64_t i, float v) { out.data<float>()[i] = v; }); break;
    case DType::kI64: fill(t.int64_data(), [&](int64_t i, int64_t v) { out.data<int64_t>()[i] = v; }); break;
    case DType::kI32: fill(t.int32_data(), [&](int64_t i, int32_t v) { out.data<int32_t>()[i] = v; }); break;
    case DType::kU8:
    case DType::kBool:
    case DType::kI8: fill(t.int32_data(), [&](int64_t i, int32_t v) { out.data<uint8_t>()[i] = static_cast<uint8_t>(v); }); break;
    default: throw Error(what + ": " + dtype_name(dt) + " data outside raw_data is not supported");
  }
  return out;
}

TensorInfo info_of(const onnx::ValueInfoProto& v, const std::string& path) {
  TensorInfo ti;
  ti.name = v.name();
  if (!v.type().has_tensor_type()) throw Error(path + ": graph input/output '" + v.name() + "' is not a tensor");
  const auto& tt = v.type().tensor_type();
  if (!dtype_from_onnx(tt.elem_type(), &ti.dtype))
    throw Error(path + ": '" + v.name() + "' has element type " + std::to_string(tt.elem_type()) + ", which is not supported");
  for (const auto& d : tt.shape().dim()) {
    ti.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    ti.dim_names.push_back(d.has_dim_value() ? "" : d.dim_param());
  }
  return ti;
}

Attr attr_of(const onnx::AttributeProto& a, const std::string& model_dir, const std::string& what) {
  Attr r;
  switch (a.type()) {
    case onnx::AttributeProto::INT: r.kind = Attr::kInt, r.i = a.i(); break;
    case onnx::AttributeProto::FLOAT: r.kind = Attr::kFloat, r.f = a.f(); break;
    case onnx::AttributeProto::STRING: r.kind = Attr::kString, r.s = a.s(); break;
    case onnx::AttributeProto::INTS: r.kind = Attr::kInts, r.ints.assign(a.ints().begin(), a.ints().end()); break;
    case onnx::AttributeProto::FLOATS: r.kind = Attr::kFloats, r.floats.assign(a.floats().begin(), a.floats().end()); break;
    case onnx::AttributeProto::STRINGS: r.kind = Attr::kStrings, r.strs.assign(a.strings().begin(), a.strings().end()); break;
    case onnx::AttributeProto::TENSOR: r.kind = Attr::kTensor, r.t = read_tensor(a.t(), model_dir, what); break;
    default: throw Error(what + ": attribute " + a.name() + " has a kind this executor does not read");
  }
  return r;
}

// The executor's name of a node's operator: a default-domain operator by its type, one of ONNX
// Runtime's domain as "com.microsoft:<type>", any other domain as no operator the registry holds.
std::string op_name(const onnx::NodeProto& n) {
  if (n.op_type().find(':') != std::string::npos) return "";
  if (n.domain().empty() || n.domain() == "ai.onnx") return n.op_type();
  return n.domain() == kContribDomain ? std::string(kContribDomain) + ":" + n.op_type() : "";
}

int64_t default_opset(const onnx::ModelProto& m, const std::string& path) {
  int64_t v = -1;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") v = o.version();
  if (v < 0) return v;  // check_operators names an operator of another domain first
  if (v < 1 || v > kMaxOpset)
    throw Error(path + ": opset " + std::to_string(v) + " is not supported (this executor runs ai.onnx opsets up to " +
                std::to_string(kMaxOpset) + ")");
  return v;
}

// Every node's operator is one this executor runs, before ONNX's checker sees the graph. The
// kernels follow the operators' definitions at opsets 13-20; a model of an older opset runs when
// each of its operators is still defined there as it was at opset 13 (ONNX's schema of the
// operator at the model's opset is the one in force at opset 13: AveragePool at opset 11, Relu at
// 6), and is refused naming the first one whose definition changed since (Squeeze's axes became
// an input at 13).
void check_operators(const onnx::GraphProto& g, int64_t opset, const std::string& path) {
  auto label = [](const onnx::NodeProto& n) {
    return (n.domain().empty() ? std::string("ai.onnx") : n.domain()) + ":" + n.op_type() +
           (n.name().empty() ? "" : " (node '" + n.name() + "')");
  };
  for (const auto& n : g.node())
    if (!find_op(op_name(n))) throw Error(path + ": operator " + label(n) + " is not supported");
  if (opset < 0) throw Error(path + ": the model imports no default-domain (ai.onnx) opset");
  if (opset >= kMinOpset) return;
  for (const auto& n : g.node()) {
    if (n.domain() == kContribDomain) continue;
    const auto* then = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), "");
    const auto* now = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(kMinOpset), "");
    if (!then || !now || then->since_version() != now->since_version())
      throw Error(path + ": operator " + label(n) + " at opset " + std::to_string(opset) +
                  " is not supported: its definition changed by opset " + std::to_string(kMinOpset) +
                  " (this executor runs ai.onnx opsets 13-" + std::to_string(kMaxOpset) +
                  ", and older ones whose operators are unchanged since)");
  }
}

// ONNX's checker over the graph, as checker::check_model does it, with two differences: the
// model's folder is known (external data is checked where it lies, without reading the file
// again), and a model newer than this libonnx (PyTorch 2.9+'s exporter writes IR 10; Debian's
// libonnx 1.12 knows IR 8) is checked by the rules of the newest IR it knows instead of being
// refused outright. What the newer IRs added and this executor does not run (new datatypes) is
// refused by its own reader, naming the tensor.
void check_with_onnx(const onnx::ModelProto& m, const std::string& dir) {
  if (!m.has_ir_version()) throw Error("the model has no ir_version", Kind::kInput);
  onnx::checker::CheckerContext ctx;
  ctx.set_ir_version(static_cast<int>(std::min<int64_t>(m.ir_version(), onnx::IR_VERSION)));
  std::unordered_map<std::string, int> opsets;
  for (const auto& o : m.opset_import()) opsets[o.domain()] = static_cast<int>(o.version());
  if (opsets.empty()) throw Error("the model imports no opset", Kind::kInput);
  ctx.set_opset_imports(opsets);
  ctx.set_model_dir(dir);
  onnx::checker::LexicalScopeContext lex;
  onnx::checker::check_graph(m.graph(), ctx, lex);
  onnx::checker::check_model_local_functions(m, ctx, lex);
}

// Debian's libonnx knows the operators' schemas up to an older opset than exporters write
// (1.12: opset 17; PyTorch's dynamo exporter writes 18 to 20). Opsets 18-20 changed how some
// operators this executor runs are written, not what they compute: the reductions' axes became
// an input, Split gained num_outputs, Pad an axes input, Resize (18), AveragePool (19) and Cast
// (19) attributes for what they did not do before, GridSample (20) new names for its modes; and
// opset 20 added Gelu, element-wise. For ONNX's checker and shape inference the model is written
// as the newest opset libonnx knows says (a Gelu as another element-wise operator of the same
// types, Sigmoid), then put back as it was for the executor; its shapes are then checked by the
// run on zeros below, not by shape inference.
class AsLibonnxKnows {
 public:
  AsLibonnxKnows(onnx::ModelProto& m, int64_t opset) : m_(m) {
    const int known = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(onnx::ONNX_DOMAIN).second;
    if (opset <= known) return;
    for (int i = 0; i < m.opset_import_size(); ++i)
      if (m.opset_import(i).domain().empty() || m.opset_import(i).domain() == "ai.onnx")
        saved_opsets_.emplace_back(i, m.opset_import(i).version()), m.mutable_opset_import(i)->set_version(known);
    std::map<std::string, const onnx::TensorProto*> consts;
    for (const auto& t : m.graph().initializer()) consts[t.name()] = &t;
    for (const auto& n : m.graph().node())
      if (n.op_type() == "Constant" && n.attribute_size() == 1 && n.attribute(0).has_t()) consts[n.output(0)] = &n.attribute(0).t();
    for (int i = 0; i < m.graph().node_size(); ++i) rewrite(i, consts);
  }
  ~AsLibonnxKnows() {
    for (auto& [i, node] : saved_nodes_) m_.mutable_graph()->mutable_node(i)->Swap(&node);
    for (auto& [i, v] : saved_opsets_) m_.mutable_opset_import(i)->set_version(v);
  }
  // Whether the model was written anew: shape inference then goes by opset 17's rules, which
  // fail on some opset 18 shapes (an uneven Split), so its errors are not the model's.
  bool rewritten() const { return !saved_opsets_.empty(); }
  AsLibonnxKnows(const AsLibonnxKnows&) = delete;
  AsLibonnxKnows& operator=(const AsLibonnxKnows&) = delete;

 private:
  onnx::ModelProto& m_;
  std::vector<std::pair<int, onnx::NodeProto>> saved_nodes_;
  std::vector<std::pair<int, int64_t>> saved_opsets_;

  void rewrite(int i, const std::map<std::string, const onnx::TensorProto*>& consts) {
    const onnx::NodeProto& n = m_.graph().node(i);
    const bool reduce = n.op_type().rfind("Reduce", 0) == 0 && n.op_type() != "ReduceSum" && n.input_size() > 1;
    const bool split = n.op_type() == "Split" && std::any_of(n.attribute().begin(), n.attribute().end(),
                                                             [](const auto& a) { return a.name() == "num_outputs"; });
    const bool pad = n.op_type() == "Pad" && n.input_size() > 3;
    const std::set<std::string>& newer = newer_attributes(n.op_type());
    const bool attrs = std::any_of(n.attribute().begin(), n.attribute().end(), [&](const auto& a) { return newer.count(a.name()); });
    const bool gelu = n.op_type() == "Gelu", grid = n.op_type() == "GridSample";
    if (!reduce && !split && !pad && !attrs && !gelu && !grid) return;
    onnx::NodeProto old = n;
    onnx::NodeProto* w = m_.mutable_graph()->mutable_node(i);
    for (int k = w->attribute_size() - 1; k >= 0; --k)
      if (newer.count(w->attribute(k).name()) || gelu) w->mutable_attribute()->DeleteSubrange(k, 1);
    if (gelu) w->set_op_type("Sigmoid");
    for (auto& a : *w->mutable_attribute())
      if (grid && a.name() == "mode" && (a.s() == "linear" || a.s() == "cubic")) a.set_s("bi" + a.s());
    if (reduce) {  // constant axes become the attribute; axes given at run time are left out
      auto c = consts.find(n.input(1));
      if (c != consts.end()) {
        auto* a = w->add_attribute();
        a->set_name("axes"), a->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : onnx_ints(*c->second)) a->add_ints(v);
      }
      w->mutable_input()->DeleteSubrange(1, w->input_size() - 1);
    }
    if (split)
      for (int k = 0; k < w->attribute_size(); ++k)
        if (w->attribute(k).name() == "num_outputs") w->mutable_attribute()->DeleteSubrange(k, 1);
    if (pad) w->mutable_input()->DeleteSubrange(3, w->input_size() - 3);
    saved_nodes_.emplace_back(i, std::move(old));
  }

  // The attributes an operator gained after opset 17, written by exporters at their defaults.
  static const std::set<std::string>& newer_attributes(const std::string& op) {
    static const std::map<std::string, std::set<std::string>> added = {
        {"Resize", {"antialias", "axes", "keep_aspect_ratio_policy"}}, {"AveragePool", {"dilations"}},
        {"Cast", {"saturate"}}, {"CastLike", {"saturate"}}};
    static const std::set<std::string> none, reduce = {"noop_with_empty_axes"};
    if (op.rfind("Reduce", 0) == 0 && op != "ReduceSum") return reduce;  // ReduceSum had it at 13
    const auto it = added.find(op);
    return it == added.end() ? none : it->second;
  }

  static std::vector<int64_t> onnx_ints(const onnx::TensorProto& t) {
    std::vector<int64_t> v(t.int64_data().begin(), t.int64_data().end());
    if (v.empty() && t.data_type() == onnx::TensorProto::INT64 && t.raw_data().size() % 8 == 0) {
      v.resize(t.raw_data().size() / 8);
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
    }
    return v;
  }
};

// Debian's libonnx (1.12) infers ConvTranspose's output from its weight's dimension 1 and its
// kernel dimensions without checking the weight's rank: a weight of rank 0 or 1 reads past a
// protobuf list and one of a rank above the input's past the dilations (a crash while loading a
// model anyone may upload). Its inference runs behind this check, once per process.
void guard_conv_transpose_inference() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int since : {1, 11}) {
      auto* s = const_cast<onnx::OpSchema*>(onnx::OpSchemaRegistry::Schema("ConvTranspose", since, ""));
      if (!s || s->since_version() != since) continue;
      const onnx::InferenceFunction inner = s->GetTypeAndShapeInferenceFunction();
      s->TypeAndShapeInferenceFunction([inner](onnx::InferenceContext& ctx) {
        const auto* x = ctx.getNumInputs() > 0 ? ctx.getInputType(0) : nullptr;
        const auto* w = ctx.getNumInputs() > 1 ? ctx.getInputType(1) : nullptr;
        const bool wr = w && w->has_tensor_type() && w->tensor_type().has_shape();
        const bool xr = x && x->has_tensor_type() && x->tensor_type().has_shape();
        if (wr && (w->tensor_type().shape().dim_size() < 3 ||
                   (xr && w->tensor_type().shape().dim_size() != x->tensor_type().shape().dim_size())))
          fail_shape_inference("ConvTranspose's weight must have the input's rank, at least 3");
        if (inner) inner(ctx);
      });
    }
  });
}

// Operand slots that are parameters rather than data (a shape, axes, bounds, a scale, a mode, a
// divisor): zeros there mean nothing (a Reshape to shape 0, a Slice of step 0), so when the load's
// probe on zeros fails on a graph that takes one of them as an input, the model loads with a note.
bool parameter_slot(const std::string& op, size_t i) {
  static const std::map<std::string, std::set<size_t>> slots = {
      {"Reshape", {1}}, {"Expand", {1}}, {"Slice", {1, 2, 3, 4}}, {"Split", {1}}, {"Squeeze", {1}}, {"Unsqueeze", {1}},
      {"Pad", {1, 2}}, {"ConstantOfShape", {0}}, {"Range", {0, 1, 2}}, {"QuantizeLinear", {1, 2}},
      {"DequantizeLinear", {1, 2}}, {"Clip", {1, 2}}, {"Dropout", {1, 2}}, {"Trilu", {1}}, {"ReduceSum", {1}},
      {"Tile", {1}}, {"Div", {1}}, {"Mod", {1}}, {"Resize", {1, 2, 3}},  // Div, Mod: an integer divisor of zero
      {"QLinearConv", {1, 2, 4, 5, 6, 7}}, {"QLinearMatMul", {1, 2, 4, 5, 6, 7}}};  // scales of 0
  auto it = slots.find(op);
  return it != slots.end() && it->second.count(i) > 0;
}

}  // namespace

Model Loader::load(const std::string& path) {
  const std::string bytes = read_file(path);
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes) || !m.has_graph())
    throw Error(path + ": not an ONNX model (the protobuf does not parse: a truncated file or another format)");
  Model model;
  model.opset_ = default_opset(m, path);
  check_operators(m.graph(), model.opset_, path);
  const auto& g = m.graph();
  const std::string dir = dir_of(path);
  std::unordered_map<std::string, int> ids;
  auto id_of = [&](const std::string& name) {
    auto it = ids.find(name);
    if (it != ids.end()) return it->second;
    const int id = static_cast<int>(model.names_.size());
    ids.emplace(name, id);
    model.names_.push_back(name);
    model.constants_.emplace_back();
    return id;
  };
  for (const auto& t : g.initializer()) {
    const int id = id_of(t.name());
    model.constants_[static_cast<size_t>(id)] = read_tensor(t, dir, path + ": initializer '" + t.name() + "'");
  }
  // Initializers first: their sizes are checked before ONNX's passes read them.
  try {
    register_contrib_schemas();
    AsLibonnxKnows as_known(m, model.opset_);
    check_with_onnx(m, dir);
    const int strict = as_known.rewritten() ? 0 : 1;  // opset 17's rules fail on some opset 18 shapes
    guard_conv_transpose_inference();
    onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(), onnx::ShapeInferenceOptions(true, strict, false));
  } catch (const std::exception& e) {
    throw Error(path + ": ONNX's checker refuses the model: " + e.what());
  }
  for (const auto& v : g.input()) {
    const int id = id_of(v.name());
    if (model.constants_[static_cast<size_t>(id)].defined()) continue;  // an initializer listed as an input (IR < 4)
    model.inputs_.push_back(info_of(v, path));
    model.input_ids_.push_back(id);
  }
  for (const auto& v : g.output()) {
    model.outputs_.push_back(info_of(v, path));
    model.output_ids_.push_back(id_of(v.name()));
  }
  for (const auto& pn : g.node()) {
    Node n;
    n.op = op_name(pn);
    n.name = pn.name();
    n.fn = find_op(n.op);
    for (const auto& i : pn.input()) n.in.push_back(i.empty() ? -1 : id_of(i));
    for (const auto& o : pn.output()) n.out.push_back(o.empty() ? -1 : id_of(o));
    for (const auto& a : pn.attribute()) n.attrs.emplace(a.name(), attr_of(a, dir, path + ": " + n.label()));
    model.nodes_.push_back(std::move(n));
  }
  model.prepare();
  // A graph whose initializers contradict their use (a weight of the wrong shape) passes ONNX's
  // shape inference for some operators: one run on zeros, every dynamic dimension 1, finds it.
  // A dimension past the rows that the graph leaves open is guessed as 1: the graph may need
  // another size there (an exporter that fixed a sequence length inside it), so a failure then
  // is kept as a note, not a refusal.
  std::vector<Tensor> probe;
  bool guessed = false;
  for (const auto& in : model.inputs_) {
    std::vector<int64_t> shape = in.shape;
    for (size_t i = 0; i < shape.size(); ++i) {
      guessed = guessed || (i > 0 && shape[i] < 0);
      shape[i] = shape[i] < 0 ? 1 : shape[i];
    }
    probe.push_back(Tensor::zeros(shape, in.dtype));
  }
  try {
    model.run(probe);
  } catch (const Error& e) {
    // An input where an operator wants a shape, axes, a scale or a divisor means nothing as zeros
    // (a Reshape to shape 0): each request's values are checked by the kernels as they run.
    const std::string fed = request_parameter(model);
    if (!guessed && fed.empty()) throw Error(path + ": the graph fails on zeros at batch 1: " + e.what());
    model.probe_note_ = (fed.empty() ? std::string("it fails on zeros with its open dimensions at 1 (")
                                     : fed + " comes with each request; it fails on zeros (") + e.what() + ")";
  }
  return model;
}

// The first request input that gives an operator a parameter ("input 'shape' gives Reshape its
// operand 1"), or "".
std::string Loader::request_parameter(const Model& model) {
  for (const auto& nd : model.nodes_)
    for (size_t k = 0; k < nd.in.size(); ++k) {
      const auto at = std::find(model.input_ids_.begin(), model.input_ids_.end(), nd.in[k]);
      if (parameter_slot(nd.op, k) && at != model.input_ids_.end())
        return "input '" + model.inputs_[static_cast<size_t>(at - model.input_ids_.begin())].name + "' gives " + nd.label() +
               " its operand " + std::to_string(k);
    }
  return "";
}

Model Model::load(const std::string& path) {
  // Each run allocates its intermediates and outputs and frees them again, the same sizes every
  // time: on the heap, not fresh mapped pages (GPT-2's block at batch 32: 0.78 -> 0.61 ms).
  cpu::keep_buffers_on_heap(32 << 20);
  return Loader::load(path);
}

}  // namespace loom::rt::graph
