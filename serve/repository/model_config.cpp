// model_config.cpp — config.pbtxt through protobuf's TextFormat, the version policy, the
// configuration checked against and completed from the loaded model, and Triton's JSON of it.
#include "repository/model_config.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "loom/rt/error.hpp"
#include "repository/model.hpp"

namespace loom::serve {
namespace {

constexpr size_t kMaxConfigBytes = size_t{1} << 20;
constexpr int kMaxInstances = 64;

using inference::ModelConfig;

// protobuf's parser reports errors and skipped fields here (lines and columns from 0).
class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(const std::string& file) : file_(file) {}
  void AddError(int line, google::protobuf::io::ColumnNumber col, const std::string& msg) override {
    if (error_.empty()) error_ = where(line, col) + msg;
  }
  void AddWarning(int line, google::protobuf::io::ColumnNumber col, const std::string& msg) override {
    warnings_.push_back(where(line, col) + msg);
  }
  std::string error_;
  std::vector<std::string> warnings_;

 private:
  std::string where(int line, int col) const { return file_ + ":" + std::to_string(line + 1) + ":" + std::to_string(col + 1) + ": "; }
  const std::string& file_;
};

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// KServe's datatype names as Triton's DataType (BYTES is TYPE_STRING), and back.
inference::DataType to_type(const std::string& datatype) {
  inference::DataType t = inference::TYPE_INVALID;
  inference::DataType_Parse(datatype == "BYTES" ? "TYPE_STRING" : "TYPE_" + datatype, &t);
  return t;
}

// One tensor of the file checked against the model's: datatype and every dim (-1 in either is
// any size). Returns the shape the model then takes (the file may fix a dim the graph leaves free).
template <typename T>
std::vector<int64_t> check_tensor(const std::string& model, const char* kind, const T& t, const TensorDesc& d, int max_batch) {
  const std::string what = "model " + model + " " + kind + " '" + t.name() + "': ";
  if (t.data_type() != to_type(d.datatype))
    throw rt::Error(what + "config.pbtxt says " + inference::DataType_Name(t.data_type()) + ", the model has " +
                    inference::DataType_Name(to_type(d.datatype)));
  if (t.has_reshape()) throw rt::Error(what + "config.pbtxt asks for a reshape, which loom-serve does not do");
  std::vector<int64_t> want(t.dims().begin(), t.dims().end());
  if (max_batch > 0) want.insert(want.begin(), -1);
  const std::string said = "config.pbtxt dims " + dims_str({t.dims().begin(), t.dims().end()}) +
                           (max_batch > 0 ? " (with the batch dimension " + dims_str(want) + ")" : "");
  if (max_batch > 0 && !d.shape.empty() && d.shape[0] != -1)
    throw rt::Error(what + "max_batch_size " + std::to_string(max_batch) + " needs a batch dimension, but the model's shape is " +
                    dims_str(d.shape) + " (max_batch_size: 0 serves it as it is)");
  bool ok = want.size() == d.shape.size();
  for (size_t i = 0; ok && i < want.size(); ++i) ok = want[i] == -1 || d.shape[i] == -1 || want[i] == d.shape[i];
  if (!ok) throw rt::Error(what + said + ", the model's shape " + dims_str(d.shape));
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] == -1) want[i] = d.shape[i];
  return want;
}

// The file's inputs or outputs against the model's: each named once and known; those it leaves
// out are added from the model. `shapes` gets the shape the model takes for each of `ds`.
template <typename T>
void match_tensors(const std::string& model, const char* kind, google::protobuf::RepeatedPtrField<T>* list,
                   const std::vector<TensorDesc>& ds, int max_batch, std::vector<std::vector<int64_t>>* shapes) {
  std::set<std::string> seen;
  std::string names;
  for (const auto& d : ds) names += (names.empty() ? "" : ", ") + d.name;
  shapes->clear();
  for (const auto& d : ds) shapes->push_back(d.shape);
  for (const auto& t : *list) {
    if (!seen.insert(t.name()).second) throw rt::Error("model " + model + ": config.pbtxt lists " + kind + " '" + t.name() + "' twice");
    const auto it = std::find_if(ds.begin(), ds.end(), [&](const TensorDesc& d) { return d.name == t.name(); });
    if (it == ds.end())
      throw rt::Error("model " + model + ": config.pbtxt names " + kind + " '" + t.name() + "', which the model does not have (its " +
                      kind + "s: " + names + ")");
    (*shapes)[static_cast<size_t>(it - ds.begin())] = check_tensor(model, kind, t, *it, max_batch);
  }
  for (const auto& d : ds) {
    if (seen.count(d.name)) continue;
    T* t = list->Add();
    t->set_name(d.name);
    t->set_data_type(to_type(d.datatype));
    for (size_t i = max_batch > 0 ? 1 : 0; i < d.shape.size(); ++i) t->add_dims(d.shape[i]);
  }
}

// Every input and output has a free first dimension: requests may carry rows.
bool has_batch_dim(const ServedModel& m) {
  for (const auto* ds : {&m.inputs(), &m.outputs()})
    for (const auto& d : *ds)
      if (d.shape.empty() || d.shape[0] != -1) return false;
  return true;
}

void check_batching(const ModelConfig& c, const std::string& model, const Options& o) {
  const std::string what = "model " + model + ": config.pbtxt ";
  if (c.max_batch_size() < 0) throw rt::Error(what + "max_batch_size " + std::to_string(c.max_batch_size()) + " is negative");
  if (c.max_batch_size() > o.max_batch_size)
    throw rt::Error(what + "max_batch_size " + std::to_string(c.max_batch_size()) + " is above the server's --max-batch-size " +
                    std::to_string(o.max_batch_size));
  if (!c.has_dynamic_batching()) return;
  const auto& db = c.dynamic_batching();
  if (db.max_queue_delay_microseconds() > static_cast<uint64_t>(o.request_timeout_ms) * 1000)
    throw rt::Error(what + "dynamic_batching max_queue_delay_microseconds " + std::to_string(db.max_queue_delay_microseconds()) +
                    " is longer than the request deadline (--request-timeout-ms " + std::to_string(o.request_timeout_ms) + ")");
  for (int p : db.preferred_batch_size())
    if (p < 1 || p > std::max(c.max_batch_size(), 1))
      throw rt::Error(what + "preferred_batch_size " + std::to_string(p) + " is outside 1..max_batch_size " +
                      std::to_string(c.max_batch_size()));
}

int instance_count(const ModelConfig& c, const std::string& model) {
  int64_t n = 0;  // 64 + 2^31 - 1 instances do not wrap round to a small number
  for (const auto& g : c.instance_group()) {
    if (g.count() < 0) throw rt::Error("model " + model + ": config.pbtxt instance_group count " + std::to_string(g.count()) + " is negative");
    n += std::max(g.count(), 1);  // Triton's default count is 1
    if (n > kMaxInstances)
      throw rt::Error("model " + model + ": config.pbtxt asks for more than " + std::to_string(kMaxInstances) + " instances");
  }
  return static_cast<int>(std::max<int64_t>(n, 1));
}

// Refuses text whose messages nest deeper than kMaxConfigNesting (quotes and comments aside)
// before protobuf reads it: its parser recurses once a level, unknown fields included.
void check_nesting(const std::string& text, const std::string& file) {
  constexpr int kMaxConfigNesting = 32;
  int depth = 0;
  char quote = 0;
  for (size_t k = 0; k < text.size(); ++k) {
    const char c = text[k];
    if (quote) {
      if (c == '\\') ++k;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      k = std::min(text.find('\n', k), text.size());
    } else if (c == '{' || c == '<') {
      if (++depth > kMaxConfigNesting) throw rt::Error(file + ": messages nested deeper than " + std::to_string(kMaxConfigNesting) + " levels");
    } else if ((c == '}' || c == '>') && depth > 0) {
      --depth;
    }
  }
}

// What the model is, in Triton's words where Triton has one.
void check_platform(const ModelConfig& c, const std::string& model, const ServedModel& m) {
  const bool onnx = std::string(m.platform()) == "loom-onnx";
  static const std::set<std::string> onnx_ok = {"", "onnxruntime_onnx", "onnxruntime", "loom-onnx", "loom"};
  static const std::set<std::string> hdf5_ok = {"", "loom-hdf5", "loom"};
  const auto& ok = onnx ? onnx_ok : hdf5_ok;
  for (const std::string* v : {&c.platform(), &c.backend()})
    if (!ok.count(*v))
      throw rt::Error("model " + model + ": config.pbtxt says " + (v == &c.platform() ? "platform" : "backend") + " '" + *v +
                      "', but the model file is " + (onnx ? "ONNX (onnxruntime_onnx)" : "a Loom HDF5 model (loom-hdf5)"));
}

// The tensors a gpt answers through generate, as Triton's generate models describe them.
void gpt_tensors(ModelConfig* c) {
  inference::ModelInput* i = c->add_input();
  i->set_name("text_input");
  i->set_data_type(inference::TYPE_STRING);
  i->add_dims(1);
  inference::ModelOutput* o = c->add_output();
  o->set_name("text_output");
  o->set_data_type(inference::TYPE_STRING);
  o->add_dims(1);
}

// The configuration of a model with no config.pbtxt: Triton's auto-completed one.
ModelConfig derived(const std::string& folder, ServedModel& m, const Options& o) {
  ModelConfig c;
  c.set_name(folder);
  c.set_platform(m.platform());
  c.set_backend("loom");
  c.mutable_version_policy()->mutable_all();
  if (m.engine()) {
    gpt_tensors(&c);
    return c;
  }
  c.set_max_batch_size(has_batch_dim(m) ? o.max_batch_size : 0);
  std::vector<std::vector<int64_t>> shapes;
  match_tensors(folder, "input", c.mutable_input(), m.inputs(), c.max_batch_size(), &shapes);
  match_tensors(folder, "output", c.mutable_output(), m.outputs(), c.max_batch_size(), &shapes);
  if (m.batched()) c.mutable_dynamic_batching()->set_max_queue_delay_microseconds(static_cast<uint64_t>(o.max_queue_delay_us));
  return c;
}

}  // namespace

ModelConfig parse_model_config(const std::string& text, const std::string& file, const ConfigWarn& warn) {
  ModelConfig c;
  Collector errors(file);
  check_nesting(text, file);
  google::protobuf::TextFormat::Parser parser;
  parser.AllowUnknownField(true);  // Triton's fields Loom does not model: skipped, and named below
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &c))
    throw rt::Error(errors.error_.empty() ? file + ": not a model configuration in protobuf's text format" : errors.error_);
  if (!errors.warnings_.empty() && warn) {
    std::string all;
    for (const auto& w : errors.warnings_) all += (all.empty() ? "" : "; ") + w;
    warn("fields loom-serve does not act on, skipped: " + all);
  }
  return c;
}

bool read_model_config(const std::string& folder, ModelConfig* c, const ConfigWarn& warn) {
  const std::string file = folder + "/config.pbtxt";
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(&text[0], static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) throw rt::Error(file + ": larger than 1 MiB");
  *c = parse_model_config(text, file, warn);
  return true;
}

std::vector<std::string> policy_versions(const ModelConfig& c, const std::vector<std::string>& found) {
  std::vector<std::pair<long long, std::string>> numbered;
  for (const auto& v : found)
    if (!v.empty() && v.size() < 18 && v.find_first_not_of("0123456789") == std::string::npos) numbered.emplace_back(std::stoll(v), v);
  std::sort(numbered.begin(), numbered.end());
  std::vector<std::string> out;
  const auto& p = c.version_policy();
  if (p.has_all()) {
    for (const auto& n : numbered) out.push_back(n.second);
  } else if (p.has_specific()) {
    for (const auto& n : numbered)
      if (std::count(p.specific().versions().begin(), p.specific().versions().end(), n.first)) out.push_back(n.second);
  } else {
    const size_t keep = p.has_latest() ? std::max<uint32_t>(p.latest().num_versions(), 1) : 1;
    for (size_t i = numbered.size() > keep ? numbered.size() - keep : 0; i < numbered.size(); ++i) out.push_back(numbered[i].second);
  }
  return out;
}

ModelConfig settle_config(const ModelConfig* file, const std::string& folder, ServedModel& m, Options* o) {
  if (!file) return derived(folder, m, *o);
  ModelConfig c = *file;
  if (!c.name().empty() && c.name() != folder)
    throw rt::Error("model " + folder + ": config.pbtxt names the model '" + c.name() + "', but its folder is " + folder);
  c.set_name(folder);
  check_platform(c, folder, m);
  check_batching(c, folder, *o);
  if (m.engine()) {
    if (c.input_size() || c.output_size() || c.max_batch_size())
      throw rt::Error("model " + folder + ": a gpt answers generate (text_input, text_output); its config.pbtxt may not set inputs, outputs or max_batch_size");
    gpt_tensors(&c);
    return c;
  }
  std::vector<std::vector<int64_t>> in_shapes, out_shapes;
  match_tensors(folder, "input", c.mutable_input(), m.inputs(), c.max_batch_size(), &in_shapes);
  match_tensors(folder, "output", c.mutable_output(), m.outputs(), c.max_batch_size(), &out_shapes);
  for (size_t k = 0; k < in_shapes.size(); ++k) m.narrow_input(k, in_shapes[k]);
  if (c.max_batch_size() == 0) m.never_batch("config.pbtxt says max_batch_size: 0");
  else if (!c.has_dynamic_batching()) m.never_batch("config.pbtxt has no dynamic_batching (Triton's: no batching across requests)");
  if (c.max_batch_size() > 0) o->max_batch_size = c.max_batch_size();
  if (c.has_dynamic_batching()) {
    o->max_queue_delay_us = static_cast<int64_t>(c.dynamic_batching().max_queue_delay_microseconds());
    o->preferred_batch_sizes.assign(c.dynamic_batching().preferred_batch_size().begin(), c.dynamic_batching().preferred_batch_size().end());
  }
  o->instances = instance_count(c, folder);
  if (c.platform().empty() && c.backend().empty()) c.set_platform(m.platform());
  return c;
}

ModelConfig described_config(const std::string& name, const std::string& platform, const std::vector<TensorDesc>& inputs,
                             const std::vector<TensorDesc>& outputs) {
  ModelConfig c;
  c.set_name(name);
  c.set_platform(platform);
  std::vector<std::vector<int64_t>> shapes;
  match_tensors(name, "input", c.mutable_input(), inputs, 0, &shapes);
  match_tensors(name, "output", c.mutable_output(), outputs, 0, &shapes);
  return c;
}

namespace {

// The names of every 64-bit integer field reachable from `d` (protobuf's JSON writes them as strings).
void int64_fields(const google::protobuf::Descriptor* d, std::set<std::string>* names, std::set<const void*>* seen) {
  if (!seen->insert(d).second) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    using FD = google::protobuf::FieldDescriptor;
    if (f->cpp_type() == FD::CPPTYPE_INT64 || f->cpp_type() == FD::CPPTYPE_UINT64) names->insert(f->name());
    if (f->message_type()) int64_fields(f->message_type(), names, seen);
  }
}

void numbers(nlohmann::json& j, const std::set<std::string>& names, bool here) {
  if (j.is_string() && here) {
    const std::string s = j.get<std::string>();
    j = s.size() && s[0] == '-' ? nlohmann::json(std::stoll(s)) : nlohmann::json(std::stoull(s));
  } else if (j.is_array()) {
    for (auto& e : j) numbers(e, names, here);
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) numbers(it.value(), names, names.count(it.key()) > 0);
  }
}

}  // namespace

nlohmann::json proto_json(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions opt;
  opt.always_print_primitive_fields = true;
  opt.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(m, &text, opt).ok()) throw rt::Error("cannot write " + m.GetTypeName() + " as JSON");
  nlohmann::json j = nlohmann::json::parse(text);
  std::set<std::string> names;
  std::set<const void*> seen;
  int64_fields(m.GetDescriptor(), &names, &seen);
  numbers(j, names, false);
  return j;
}

}  // namespace loom::serve
