// http_routes.cpp — the KServe v2 REST endpoints: JSON tensors and the binary-data extension,
// the repository index, the protocol's error body ({"error": "..."})
// and status codes; the controller's forwarding. Inference goes through infer.hpp.
#include "frontend/http_routes.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/kserve_json.hpp"
#include "frontend/http_decode.hpp"
#include "frontend/infer.hpp"
#include "frontend/llm_routes.hpp"
#include "frontend/status_page.hpp"
#include "repository/model_config.hpp"

namespace loom::serve {

using json = nlohmann::json;

namespace {

// A tensor's elements as a flat JSON array (KServe v2's "data") appended to `out`: numbers in
// their shortest text that reads back the same (a float32 as a float32, not its double's 17
// digits; a whole float with ".0", so JSON readers keep it a float), booleans by datatype; a
// value JSON cannot hold (NaN, infinity) as null.
template <typename T>
void numbers(const char* data, size_t bytes, std::string& out) {
  const size_t n = bytes / sizeof(T);
  out.push_back('[');
  char buf[32];
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    if (i) out.push_back(',');
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) {
        out += "null";
        continue;
      }
    }
    char* e = std::to_chars(buf, buf + sizeof buf, v).ptr;
    out.append(buf, e);
    if constexpr (std::is_floating_point_v<T>)
      if (std::find_if(buf, e, [](char c) { return c == '.' || c == 'e'; }) == e) out += ".0";  // 3.0, not the integer 3
  }
  out.push_back(']');
}

void tensor_json(const std::string& datatype, const char* data, size_t bytes, std::string& out) {
  if (datatype == "FP32") return numbers<float>(data, bytes, out);
  if (datatype == "INT64") return numbers<int64_t>(data, bytes, out);
  if (datatype == "INT32") return numbers<int32_t>(data, bytes, out);
  if (datatype == "INT8") return numbers<int8_t>(data, bytes, out);
  if (datatype == "UINT8") return numbers<uint8_t>(data, bytes, out);
  if (datatype == "BOOL") {
    out.push_back('[');
    for (size_t i = 0; i < bytes; ++i) out += i ? (data[i] ? ",true" : ",false") : (data[i] ? "true" : "false");
    out.push_back(']');
    return;
  }
  throw ServeError(Status::kInternal, "an output of datatype " + datatype);
}

// The bytes rendering `bytes` of `datatype` as JSON numbers takes at most: a json value (16
// bytes) and the longest text of one element with its comma, per element.
size_t json_cost(const std::string& datatype, size_t bytes) {
  const size_t width = datatype_width(datatype);
  const size_t text = datatype == "FP32" ? 16 : datatype == "INT64" ? 21 : datatype == "INT32" ? 12 : 6;
  return width ? bytes / width * (sizeof(json) + text) : 0;
}

// A JSON answer may take many times its tensors' bytes: counted in the request's memory budget
// (--max-run-memory-mb) before any of it is built. The binary extension needs no rendering.
void check_json_cost(const std::vector<const TensorIn*>& outs, size_t budget) {
  size_t cost = 0;
  for (const TensorIn* t : outs) cost += t->data.size() + json_cost(t->datatype, t->data.size());
  if (budget && cost > budget)
    throw ServeError(Status::kInput, "the answer as JSON would take " + std::to_string(cost >> 20) +
                                              " MiB to render, past --max-run-memory-mb " + std::to_string(budget >> 20) +
                                              ": ask for the binary extension (\"binary_data_output\": true) or fewer rows");
}

// The infer answer: the outputs asked for, as JSON data or the binary extension.
Reply infer_reply(const std::string& model, const std::string& version, const InferRequest& req,
                  const std::vector<const TensorIn*>& outs, size_t budget) {
  if (!req.binary_out) check_json_cost(outs, budget);
  json res = {{"model_name", model}, {"model_version", version}};
  if (req.has_id) res["id"] = req.id;
  Reply r;
  std::string binary;
  // {"id":..,"model_name":..,"model_version":..,"outputs":[...]}: "outputs" sorts last, and each
  // output's "data" first ({"data":[..],"datatype":..,"name":..,"shape":[..]}), written as text.
  std::string outputs = "[";
  for (const TensorIn* t : outs) {
    json o = {{"name", t->name}, {"datatype", t->datatype}, {"shape", t->shape}};
    if (outputs.size() > 1) outputs.push_back(',');
    if (req.binary_out) {
      o["parameters"] = {{"binary_data_size", t->data.size()}};
      binary += t->data;
      outputs += dump_json(o);
    } else {
      outputs += "{\"data\":";
      tensor_json(t->datatype, t->data.data(), t->data.size(), outputs);
      outputs += "," + dump_json(o).substr(1);
    }
  }
  outputs += "]";
  res["outputs"] = json::array();
  r.body = dump_json(res);
  r.body.replace(r.body.size() - 3, 3, outputs + "}");  // the empty "outputs":[] and the closing brace
  if (req.binary_out) {
    r.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.body.size()));
    r.body += binary;
    r.content_type = "application/octet-stream";
  }
  return r;
}

// POST .../infer: JSON, or JSON + binary tensors after Inference-Header-Content-Length bytes,
// through the one request flow (infer.hpp).
Reply infer(Context& ctx, const std::string& name, const std::string& version, const std::string& body,
            const std::string& header_length) {
  check_target(ctx, name, version);  // an unknown model is a 404 whatever the body
  InferRequest req = parse_infer_request(body, header_length);
  InferCall call{name, version, std::move(req.inputs), req.outputs,
                 Clock::now() + std::chrono::milliseconds(ctx.options.request_timeout_ms)};
  const InferAnswer a = run_inference(ctx, std::move(call));
  std::vector<const TensorIn*> outs;
  for (const auto& t : a.outputs) outs.push_back(&t);
  return infer_reply(a.model, a.version, req, outs, static_cast<size_t>(ctx.options.max_run_memory_mb) << 20);
}

std::vector<std::string> split_path(const std::string& target) {
  std::vector<std::string> parts;
  const std::string path = target.substr(0, target.find('?'));
  size_t at = 0;
  while (at < path.size()) {
    size_t slash = path.find('/', at);
    if (slash == std::string::npos) slash = path.size();
    if (slash > at) parts.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

// POST /v2/repository/index (the repository extension): every model version found, its state
// and why it is not ready.
Reply repository_index(Context& ctx) {
  json list = json::array();
  for (const auto& st : ctx.repository_index()) {
    json e = {{"name", st.name}, {"version", st.version}, {"state", st.state}};
    if (!st.reason.empty()) e["reason"] = st.reason;
    list.push_back(e);
  }
  Reply r;
  r.body = dump_json(list);
  return r;
}

json descs_json(const std::vector<TensorDesc>& ds) {
  json a = json::array();
  for (const auto& d : ds) a.push_back({{"name", d.name}, {"datatype", d.datatype}, {"shape", d.shape}});
  return a;
}

// GET /v2/models/M[/versions/V]: KServe's metadata object; a model's precision (and an ONNX
// graph's opset) as its parameters.
json metadata_json(const ModelMetadata& m) {
  json out = {{"name", m.name}, {"versions", m.versions}, {"platform", m.platform}};
  if (!m.precision.empty()) out["parameters"] = {{"precision", m.precision}};
  if (m.opset) out["parameters"]["opset"] = m.opset;
  out["inputs"] = descs_json(m.inputs);
  out["outputs"] = descs_json(m.outputs);
  return out;
}

// GET .../config and .../stats (Triton's model_configuration and statistics extensions), in
// Triton's JSON.
Reply proto_reply(const google::protobuf::Message& m) {
  Reply r;
  r.body = dump_json(proto_json(m));
  return r;
}

Status status_of(int http) {
  switch (http) {
    case 200: return Status::kOk;
    case 400: case 405: case 411: return Status::kInput;
    case 401: return Status::kUnauthorized;
    case 404: return Status::kNotFound;
    case 413: case 431: return Status::kTooLarge;
    case 429: case 503: return Status::kUnavailable;
    case 408: case 504: return Status::kTimeout;
    default: return http < 400 ? Status::kOk : Status::kInternal;
  }
}

// The controller: a replica answers; its status, type and the protocol's headers come back. The
// request may wait for a replica to start (the client's presence is watched meanwhile): the
// answer is made in `finish`, while the transport still holds the request.
Reply forwarded(Context& ctx, const http::request<http::string_body>& req) {
  Reply r;
  r.finish = [&ctx, &req](Reply& r, const std::function<bool()>& client_here) {
    std::vector<std::pair<std::string, std::string>> pass;
    for (const char* h : {"Inference-Header-Content-Length", "Content-Type", "Authorization"}) {
      const auto it = req.find(h);
      if (it != req.end()) pass.emplace_back(h, std::string(it->value()));
    }
    Forwarder::Response a =
        ctx.forward->forward_http(std::string(req.method_string()), std::string(req.target()), pass, req.body(), client_here);
    if (a.client_left) return false;
    r.status = static_cast<http::status>(a.status);
    r.kind = status_of(a.status);
    r.body = std::move(a.body);
    r.content_type = std::move(a.content_type);
    r.headers = std::move(a.headers);
    r.stream = std::move(a.stream);
    return true;
  };
  return r;
}

// GET /: the status page, its data with the token (or with none set), else a form asking for it.
Reply status_reply(const Context& ctx, bool authorized) {
  Reply r;
  r.body = status_page(authorized ? status_json(ctx) : nlohmann::json());
  r.content_type = "text/html; charset=utf-8";
  r.headers.push_back({"Content-Security-Policy",
                       "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self'"});
  return r;
}

}  // namespace

Reply route(Context& ctx, const http::request<http::string_body>& req, std::string* model_for_metrics) {
  const auto p = split_path(std::string(req.target()));
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  auto ok = [](const json& body) {
    Reply r;
    r.body = dump_json(body);
    return r;
  };
  if (p.size() == 3 && p[0] == "v2" && p[1] == "health" && (p[2] == "live" || p[2] == "ready")) {
    if (!get) return method_not_allowed("GET");
    if (p[2] == "live") return ok({{"live", true}});
    const bool ready = ctx.is_ready();
    Reply r = ok({{"ready", ready}});
    if (!ready) r.status = http::status::service_unavailable;
    return r;
  }
  const bool authorized = ctx.authorized(std::string(req[http::field::authorization]));
  if (p.empty()) return get ? status_reply(ctx, authorized) : method_not_allowed("GET");
  // Every other endpoint needs the token, when there is one.
  if (!authorized) return error_reply(Status::kUnauthorized, "missing or wrong bearer token");
  if (p.size() == 2 && p[0] == "v2" && p[1] == "status") {
    if (!get) return method_not_allowed("GET");
    return ok(status_json(ctx));
  }
  if (p.size() == 1 && p[0] == "metrics") {
    if (!get) return method_not_allowed("GET");
    Reply r;
    r.body = ctx.metrics_text();
    r.content_type = "text/plain; version=0.0.4";
    return r;
  }
  if (ctx.forward) {
    if (p.size() >= 3 && p[0] == "v2" && p[1] == "models") *model_for_metrics = ctx.metrics_label(p[2]);
    return forwarded(ctx, req);
  }
  if (!p.empty() && (p[0] == "v1" || (p.size() == 1 && (p[0] == "tokenize" || p[0] == "detokenize")))) {  // OpenAI's API, vLLM's tokenizer endpoints
    if (p.size() == 2 && p[1] == "completions") *model_for_metrics = ctx.metrics_label(kUnknownModelLabel);
    return openai_route(ctx, p, get, post, req.body());
  }
  if (p.size() == 1 && p[0] == "v2") {
    if (!get) return method_not_allowed("GET");
    Reply r;
    r.body = ctx.server_metadata_json();
    return r;
  }
  if (p.size() == 3 && p[0] == "v2" && p[1] == "repository" && p[2] == "index") {
    if (!post) return method_not_allowed("POST");
    return repository_index(ctx);
  }
  if (p.size() == 3 && p[0] == "v2" && p[1] == "models" && p[2] == "stats") {
    if (!get) return method_not_allowed("GET");
    return proto_reply(ctx.statistics("", ""));
  }
  if (p.size() >= 3 && p[0] == "v2" && p[1] == "models") {
    const std::string name = p[2];
    std::string version;
    size_t rest = 3;
    if (p.size() >= 5 && p[3] == "versions") {
      version = p[4];
      rest = 5;
    }
    if (!valid_name(name) || (rest == 5 && !valid_name(version)))
      return error_reply(Status::kInput, "bad model name or version in the URL");
    *model_for_metrics = ctx.metrics_label(name);  // unknown names share one label
    if (p.size() == rest) {
      if (!get) return method_not_allowed("GET");
      return ok(metadata_json(ctx.model_metadata(name, version)));
    }
    if (p.size() == rest + 1 && p[rest] == "ready") {
      if (!get) return method_not_allowed("GET");
      // The status code is the answer (KServe's protocol; Triton's client, curl -f and health
      // checks read only it): 200 ready, 400 not ready, as Triton answers.
      const bool ready = ctx.model_ready(name, version);
      Reply r = ok({{"name", name}, {"ready", ready}});
      if (!ready) r.status = http::status::bad_request;
      return r;
    }
    if (p.size() == rest + 1 && (p[rest] == "config" || p[rest] == "stats")) {
      if (!get) return method_not_allowed("GET");
      if (p[rest] == "config") return proto_reply(ctx.model_config(name, version));
      return proto_reply(ctx.statistics(name, version));
    }
    if (p.size() == rest + 1 && (p[rest] == "generate" || p[rest] == "generate_stream")) {
      if (!post) return method_not_allowed("POST");
      return generate(ctx, name, version, req.body(), p[rest] == "generate_stream");
    }
    if (p.size() == rest + 1 && p[rest] == "infer") {
      if (!post) return method_not_allowed("POST");
      const auto hl = req.find("Inference-Header-Content-Length");
      return infer(ctx, name, version, req.body(), hl == req.end() ? "" : std::string(hl->value()));
    }
  }
  return error_reply(Status::kNotFound, "unknown endpoint " + std::string(req.method_string()).substr(0, 20) + " " +
                                            std::string(req.target()).substr(0, 200));
}

}  // namespace loom::serve
