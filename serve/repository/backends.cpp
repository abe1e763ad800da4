// backends.cpp — the three backends (backend.hpp): an MLP, an ONNX graph, a language model.
#include "repository/backend.hpp"

#ifdef LOOM_HAVE_ONNX
#include "loom/rt/graph/graph.hpp"
#endif

#include <cstring>

#include "core/status.hpp"
#include "loom/rt/error.hpp"

namespace loom::serve {

namespace {

class MlpBackend : public Backend {
 public:
  MlpBackend(std::unique_ptr<rt::Mlp> mlp, std::unique_ptr<rt::QuantMlp> int8, bool cuda, InputSpec input)
      : mlp_(std::move(mlp)), int8_(std::move(int8)), cuda_(cuda), input_(input) {}

  std::vector<rt::Tensor> decode(const std::vector<TensorDesc>&, bool, const std::vector<TensorIn>& in, int max_rows,
                                 int* rows) const override {
    rt::Tensor t;
    decode_input(input_, in, max_rows, rows, [&t](int64_t n, int64_t features) {
      t = rt::Tensor::empty({n, features});
      return t.f32();
    });
    return {t};
  }

  std::vector<rt::Tensor> forward(const std::vector<rt::Tensor>& in) override {
    const rt::Tensor& x = in.at(0);
    if (int8_) return {int8_->forward(x)};
    if (cuda_) return {mlp_->forward(x.to(rt::Device::kCuda)).to(rt::Device::kCpu)};
    return {mlp_->forward(x).clone()};  // the model reuses its activations on the next call
  }

 private:
  std::unique_ptr<rt::Mlp> mlp_;
  std::unique_ptr<rt::QuantMlp> int8_;
  bool cuda_;
  InputSpec input_;
};

class EngineBackend : public Backend {
 public:
  EngineBackend(std::unique_ptr<llm::Engine> engine, std::string path) : engine_(std::move(engine)), path_(std::move(path)) {}

  std::vector<rt::Tensor> decode(const std::vector<TensorDesc>&, bool, const std::vector<TensorIn>&, int, int*) const override {
    throw ServeError(Status::kInput, path_ + " is a language model: it answers generate and /v1/completions, not infer");
  }
  std::vector<rt::Tensor> forward(const std::vector<rt::Tensor>&) override {
    throw ServeError(Status::kInput, path_ + " is a language model: it answers generate and /v1/completions, not infer");
  }
  llm::Engine* engine() override { return engine_.get(); }

 private:
  std::unique_ptr<llm::Engine> engine_;
  std::string path_;
};

#ifdef LOOM_HAVE_ONNX
class GraphBackend : public Backend {
 public:
  explicit GraphBackend(std::unique_ptr<rt::graph::Model> graph) : graph_(std::move(graph)) {}

  std::vector<rt::Tensor> decode(const std::vector<TensorDesc>& inputs, bool batched, const std::vector<TensorIn>& in,
                                 int max_rows, int* rows) const override {
    const std::vector<const TensorIn*> got = check_named(inputs, in, max_rows, batched, rows);
    std::vector<rt::Tensor> out;
    for (size_t k = 0; k < got.size(); ++k) {
      rt::Tensor t = rt::Tensor::empty(got[k]->shape, graph_->inputs()[k].dtype);
      std::memcpy(t.data<char>(), got[k]->data.data(), t.bytes());
      out.push_back(t);
    }
    return out;
  }

  std::vector<rt::Tensor> forward(const std::vector<rt::Tensor>& in) override { return graph_->run(in); }
  void set_run_memory_budget(size_t bytes) override { graph_->set_memory_budget(bytes); }
  int64_t opset() const override { return graph_->opset(); }
  std::string summary() const override {
    return std::to_string(graph_->node_count()) + " nodes, " + std::to_string(graph_->folded()) + " folded, " +
           std::to_string(graph_->fused()) + " fused" + (graph_->probe_note().empty() ? "" : ", " + graph_->probe_note());
  }

 private:
  std::unique_ptr<rt::graph::Model> graph_;
};
#endif

}  // namespace

std::unique_ptr<Backend> mlp_backend(std::unique_ptr<rt::Mlp> mlp, std::unique_ptr<rt::QuantMlp> int8, bool cuda,
                                     InputSpec input) {
  return std::make_unique<MlpBackend>(std::move(mlp), std::move(int8), cuda, input);
}

std::unique_ptr<Backend> engine_backend(std::unique_ptr<llm::Engine> engine, std::string path) {
  return std::make_unique<EngineBackend>(std::move(engine), std::move(path));
}

#ifdef LOOM_HAVE_ONNX
std::unique_ptr<Backend> graph_backend(std::unique_ptr<rt::graph::Model> graph) {
  return std::make_unique<GraphBackend>(std::move(graph));
}
#endif

}  // namespace loom::serve
