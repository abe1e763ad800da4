// context.hpp — what the HTTP and gRPC front ends share: the repository, metrics, limits, the
// token and readiness. The request flow common to both (find, decode, batch, answer) is infer.hpp;
// the servers themselves are servers.hpp.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grpc_service.pb.h"
#include "pipeline/pipeline.hpp"
#include "repository/repository.hpp"

namespace loom::serve {

// Where the serving controller's router sends what a replica answers: with a Forwarder in the
// Context, the front ends keep their limits, token, health and metrics endpoints and hand every
// other request, body untouched, to forward_http (the gRPC router is its own service).
class Forwarder {
 public:
  virtual ~Forwarder() = default;
  struct Response {
    int status = 200;
    std::string body, content_type = "application/json";
    std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type and Content-Length
    // Set for a streamed answer (generate_stream): sends each piece the replica sends, as it
    // comes, through `send` (false once the client is gone); the body is not used.
    std::function<void(const std::function<bool(const std::string&)>&)> stream;
    bool client_left = false;  // the client went away while its request waited: nothing to write
  };
  // `client_here` says whether the client is still connected (asked while a request waits).
  virtual Response forward_http(const std::string& method, const std::string& target,
                                const std::vector<std::pair<std::string, std::string>>& headers,
                                const std::string& body, const std::function<bool()>& client_here) = 0;
  virtual bool any_ready() const = 0;           // the service takes requests now (its health)
  virtual bool serves(const std::string& model) const = 0;  // the model its replicas serve
  virtual std::string metrics_text() const = 0;  // appended to /metrics
};

// A model's or a pipeline's metadata (KServe's model metadata), as both front ends answer it.
struct ModelMetadata {
  std::string name, platform;
  std::vector<std::string> versions;
  std::vector<TensorDesc> inputs, outputs;
  std::string precision;  // a model's (HTTP's "parameters"; empty for a pipeline)
  int64_t opset = 0;      // an ONNX graph's; 0 otherwise
};

struct Context {
  Repository* repo = nullptr;         // null in the controller, which has a forwarder instead
  std::vector<std::unique_ptr<PipelineRunner>> pipelines;  // InferencePipeline specs, served by name
  Forwarder* forward = nullptr;
  std::function<nlohmann::json()> status;  // the controller's status page data; empty in loom-serve
  Metrics* metrics = nullptr;
  Options options;
  std::string token;                  // empty: no authentication
  size_t max_request_bytes = 64 << 20;
  int read_timeout_s = 30;            // a request must arrive whole within this
  int write_timeout_s = 30;           // an answer must be taken by the client within this
  int max_connections = 512;
  // Server-sent event streams open at once (generate_stream, OpenAI's stream): at most half the
  // connections, so that clients that never read cannot take every one; beyond: 503.
  std::atomic<int> streams{0};
  bool strict_readiness = false;      // ready only when every model found is loaded
  std::atomic<bool> ready{false}, stopping{false};
  std::function<void(const std::string& level, const std::string& msg)> log;

  // Ready for traffic: started, not stopping and (with strict_readiness) every model loaded.
  bool is_ready() const;
  // The metrics label of a request's model: its name when loaded, else one shared label (an
  // attacker's names must not grow /metrics).
  std::string metrics_label(const std::string& name) const;
  // The pipeline served as `name`, or null.
  PipelineRunner* pipeline(const std::string& name) const;
  // Constant-time comparison of an "Authorization" header value with "Bearer <token>".
  bool authorized(const std::string& authorization) const;
  // The metadata of the model `name` at `version` ("": the newest) or of the pipeline `name`.
  // Throws ServeError kNotFound naming an unknown model or version, kUnavailable for a pipeline
  // whose steps are not connected.
  ModelMetadata model_metadata(const std::string& name, const std::string& version) const;
  // Whether `name` (`version`) takes requests now: the server ready and, for a pipeline, its
  // steps connected. Throws ServeError kNotFound naming an unknown model or version.
  bool model_ready(const std::string& name, const std::string& version) const;
  std::string server_metadata_json() const;
  // The model_configuration extension: what `name` at `version` runs with (Triton's
  // ModelConfig). Throws ServeError kNotFound naming an unknown model or version.
  inference::ModelConfig model_config(const std::string& name, const std::string& version) const;
  // The statistics extension: every loaded model (`name` empty), every version of `name`
  // (`version` empty), or one. Throws ServeError kNotFound naming what is unknown.
  inference::ModelStatisticsResponse statistics(const std::string& name, const std::string& version) const;
  // The repository extension's index: every model version found, READY or UNAVAILABLE with
  // why, and every pipeline.
  std::vector<Repository::State> repository_index() const;
  // /metrics: loom-serve's own families, Triton's nv_inference_* counters of every loaded model
  // version (the statistics extension's numbers), and the controller's.
  std::string metrics_text() const;
};

// The protocol extensions both front ends implement, as the server metadata lists them.
const std::vector<std::string>& server_extensions();

constexpr const char* kServerName = "loom-serve";
constexpr const char* kUnknownModelLabel = "_unknown";
constexpr const char* kServerVersion = "0.1.0";

}  // namespace loom::serve
