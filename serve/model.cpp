// core.cpp — models, batchers, metrics and the repository of loom-serve.
#include "core.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loom/rt/kernels.hpp"
#include "loom/rt/model_io.hpp"
#include "loom/rt/ops.hpp"

namespace loom::serve {

int http_status(Status s) {
  switch (s) {
    case Status::kOk: return 200;
    case Status::kBadRequest: return 400;
    case Status::kUnauthorized: return 401;
    case Status::kNotFound: return 404;
    case Status::kTooLarge: return 413;
    case Status::kUnavailable: return 503;
    case Status::kTimeout: return 504;
    case Status::kInternal: return 500;
  }
  return 500;
}

int grpc_code(Status s) {
  switch (s) {  // grpc::StatusCode
    case Status::kOk: return 0;
    case Status::kBadRequest: return 3;     // INVALID_ARGUMENT
    case Status::kUnauthorized: return 16;  // UNAUTHENTICATED
    case Status::kNotFound: return 5;       // NOT_FOUND
    case Status::kTooLarge: return 8;       // RESOURCE_EXHAUSTED
    case Status::kUnavailable: return 14;   // UNAVAILABLE
    case Status::kTimeout: return 4;        // DEADLINE_EXCEEDED
    case Status::kInternal: return 13;      // INTERNAL
  }
  return 13;
}

const char* status_reason(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kBadRequest: return "bad_request";
    case Status::kUnauthorized: return "unauthorized";
    case Status::kNotFound: return "not_found";
    case Status::kTooLarge: return "too_large";
    case Status::kUnavailable: return "unavailable";
    case Status::kTimeout: return "timeout";
    case Status::kInternal: return "internal";
  }
  return "internal";
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

// ---------------------------------------------------------------- ServedModel

ServedModel::ServedModel(std::string name, std::string version, std::string path, const std::string& device)
    : name_(std::move(name)), version_(std::move(version)), path_(std::move(path)) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    throw rt::Error("--device must be auto, cpu or cuda, not '" + device + "'");
  rt::ModelFile f = rt::load_model(path_);  // verifies every checksum
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(f.config_json);
  } catch (const nlohmann::json::exception& e) {
    throw rt::Error(path_ + ": model.config is not valid JSON: " + e.what());
  }
  const std::string type = cfg.value("type", "");
  if (type != "mlp")
    throw rt::Error(path_ + ": model type '" + type + "' cannot be served (loom-serve serves type mlp)");
  mlp_ = std::make_unique<rt::Mlp>(rt::load_mlp(path_, f));  // the file is read (and verified) once
  in_ = mlp_->widths().front();
  out_ = mlp_->widths().back();
  if (cfg.contains("preprocess")) {
    const auto& p = cfg["preprocess"];
    scale_ = p.value("scale", 1.0f);
    mean_ = p.value("mean", 0.0f);
    std_ = p.value("std", 1.0f);
    if (!(std_ > 0) || !std::isfinite(scale_) || !std::isfinite(mean_))
      throw rt::Error(path_ + ": model.config preprocess has a bad scale, mean or std");
  }
  config_ = f.config_json;
  std::string why;
  cuda_ = device != "cpu" && rt::ops::cuda_usable(&why);
  if (device == "cuda" && !cuda_) throw rt::Error("--device cuda: " + why);
  if (cuda_) mlp_->to(rt::Device::kCuda);
}

void ServedModel::forward(const float* x, int rows, float* out) {
  rt::Tensor in = rt::Tensor::empty({rows, in_});
  std::memcpy(in.f32(), x, static_cast<size_t>(rows) * in_ * sizeof(float));
  if (cuda_) {
    const rt::Tensor y = mlp_->forward(in.to(rt::Device::kCuda)).to(rt::Device::kCpu);
    std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
    return;
  }
  const rt::Tensor& y = mlp_->forward(in);
  std::memcpy(out, y.f32(), static_cast<size_t>(rows) * out_ * sizeof(float));
}

std::vector<float> decode_input(const ServedModel& m, const std::vector<TensorIn>& inputs, int* rows) {
  if (inputs.empty()) throw ServeError(Status::kBadRequest, "missing input: the model takes one tensor named 'input'");
  if (inputs.size() > 1) throw ServeError(Status::kBadRequest, "the model takes one input ('input'), not " + std::to_string(inputs.size()));
  const TensorIn& t = inputs[0];
  if (t.name != "input") throw ServeError(Status::kBadRequest, "unexpected input '" + t.name + "': the model's input is 'input'");
  if (t.shape.size() < 2) throw ServeError(Status::kBadRequest, "input shape must be [N, " + std::to_string(m.in_features()) + "]");
  int64_t features = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] <= 0 || t.shape[i] > (int64_t{1} << 24))
      throw ServeError(Status::kBadRequest, "input shape has a bad dimension " + std::to_string(t.shape[i]));
    if (i > 0) features *= t.shape[i];
  }
  if (features != m.in_features())
    throw ServeError(Status::kBadRequest, "input shape: each row must hold " + std::to_string(m.in_features()) +
                                              " values, not " + std::to_string(features));
  const int64_t n = t.shape[0];
  const size_t count = static_cast<size_t>(n * features);
  std::vector<float> x(count);
  if (t.datatype == "FP32") {
    if (t.data.size() != count * 4)
      throw ServeError(Status::kBadRequest, "input holds " + std::to_string(t.data.size()) + " bytes, shape and FP32 need " +
                                                std::to_string(count * 4));
    std::memcpy(x.data(), t.data.data(), count * 4);
    for (float v : x)
      if (!std::isfinite(v)) throw ServeError(Status::kBadRequest, "input holds a NaN or infinite value");
  } else if (t.datatype == "UINT8") {
    if (t.data.size() != count)
      throw ServeError(Status::kBadRequest, "input holds " + std::to_string(t.data.size()) + " bytes, shape and UINT8 need " +
                                                std::to_string(count));
    const float scale = m.scale(), mean = m.mean(), inv_std = 1.0f / m.stddev();
    for (size_t i = 0; i < count; ++i)
      x[i] = (static_cast<float>(static_cast<unsigned char>(t.data[i])) * scale - mean) * inv_std;
  } else {
    throw ServeError(Status::kBadRequest, "input datatype " + t.datatype + " is not supported (FP32 or UINT8)");
  }
  *rows = static_cast<int>(n);
  return x;
}

// ---------------------------------------------------------------- Batcher

Batcher::Batcher(std::shared_ptr<ServedModel> model, const Options& o, Metrics* metrics)
    : model_(std::move(model)), o_(o), metrics_(metrics) {
  answer_thread_ = std::thread([this] { answer_loop(); });
  thread_ = std::thread([this] { loop(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // every admitted request computed (or timed out) ...
  {
    std::lock_guard<std::mutex> lock(answer_mu_);
    answers_done_ = true;
  }
  answer_cv_.notify_all();
  answer_thread_.join();  // ... and answered
}

void Batcher::answer_loop() {
  for (;;) {
    std::deque<std::pair<Done, Outcome>> batch;
    {
      std::unique_lock<std::mutex> lock(answer_mu_);
      answer_cv_.wait(lock, [this] { return answers_done_ || !answers_.empty(); });
      if (answers_.empty()) return;
      batch.swap(answers_);
    }
    for (auto& a : batch) a.first(std::move(a.second));
  }
}

size_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Batcher::submit(std::vector<float> x, int rows, Clock::time_point deadline, Done done) {
  if (rows > o_.max_batch_size)
    throw ServeError(Status::kBadRequest, "the request has " + std::to_string(rows) + " rows; --max-batch-size is " +
                                              std::to_string(o_.max_batch_size));
  size_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) throw ServeError(Status::kUnavailable, "model " + model_->name() + " is being unloaded");
    if (queue_.size() >= static_cast<size_t>(o_.max_queue_size))
      throw ServeError(Status::kUnavailable, "model " + model_->name() + ": queue full (" +
                                                 std::to_string(o_.max_queue_size) + " requests waiting); retry later");
    queue_.push_back({std::move(x), rows, Clock::now(), deadline, std::move(done)});
    n = queue_.size();
  }
  if (metrics_) metrics_->set_queue(model_->name(), n);
  cv_.notify_one();
}

Batcher::Outcome Batcher::run(std::vector<float> x, int rows, Clock::time_point deadline) {
  auto p = std::make_shared<std::promise<Outcome>>();
  auto f = p->get_future();
  submit(std::move(x), rows, deadline, [p](Outcome o) { p->set_value(std::move(o)); });
  return f.get();  // the batcher answers every admitted request, timeouts included
}

void Batcher::loop() {
  rt::cpu::set_threads(o_.threads);
  std::vector<float> in, out;
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      // Wait for more rows until the first request has waited max_queue_delay_us.
      const auto until = queue_.front().arrived + std::chrono::microseconds(o_.max_queue_delay_us);
      auto rows_queued = [this] {
        int r = 0;
        for (const auto& j : queue_) r += j.rows;
        return r;
      };
      while (!stop_ && rows_queued() < o_.max_batch_size && Clock::now() < until)
        if (cv_.wait_until(lock, until) == std::cv_status::timeout) break;
      int rows = 0;
      while (!queue_.empty() && rows + queue_.front().rows <= o_.max_batch_size) {
        rows += queue_.front().rows;
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (metrics_) metrics_->set_queue(model_->name(), queue_.size());
    }
    const auto start = Clock::now();
    // Requests whose deadline passed while queued are answered, not computed.
    std::vector<Job> live;
    for (auto& j : batch) {
      if (start > j.deadline) {
        Outcome o;
        o.status = Status::kTimeout;
        o.error = "request timed out after " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(start - j.arrived).count()) +
                  " ms in the queue";
        j.done(std::move(o));
      } else {
        live.push_back(std::move(j));
      }
    }
    if (live.empty()) continue;
    int rows = 0;
    for (const auto& j : live) rows += j.rows;
    const int in_f = model_->in_features(), out_f = model_->out_features();
    in.resize(static_cast<size_t>(rows) * in_f);
    out.resize(static_cast<size_t>(rows) * out_f);
    size_t at = 0;
    for (const auto& j : live) {
      std::memcpy(in.data() + at, j.x.data(), j.x.size() * sizeof(float));
      at += j.x.size();
    }
    std::string error;
    try {
      model_->forward(in.data(), rows, out.data());
    } catch (const std::exception& e) {
      error = e.what();
    }
    const auto end = Clock::now();
    const double compute = std::chrono::duration<double>(end - start).count();
    at = 0;
    bool first = true;
    for (auto& j : live) {
      Outcome o;
      o.queue_s = std::chrono::duration<double>(start - j.arrived).count();
      o.compute_s = compute;
      o.batch_rows = rows;
      if (!error.empty()) {
        o.status = Status::kInternal;
        o.error = "inference failed: " + error;
      } else {
        o.out.assign(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(j.rows) * out_f));
      }
      at += static_cast<size_t>(j.rows) * out_f;
      if (metrics_) metrics_->observe(model_->name(), o.queue_s, compute, rows, first);
      first = false;
      std::lock_guard<std::mutex> lock(answer_mu_);
      answers_.emplace_back(std::move(j.done), std::move(o));
    }
    answer_cv_.notify_one();
  }
}

// ---------------------------------------------------------------- Metrics

namespace {
const std::vector<double> kSecondsBounds{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const std::vector<double> kBatchBounds{1, 2, 4, 8, 16, 32, 64, 128, 256};

std::string label(const std::string& v) {  // Prometheus label value escaping
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

void Metrics::Histogram::add(double v) {
  if (counts.empty()) counts.assign(bounds.size() + 1, 0);
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++n;
}

Metrics::PerModel& Metrics::at(const std::string& model) {
  auto it = models_.find(model);
  if (it != models_.end()) return it->second;
  PerModel& p = models_[model];
  p.queue_s.bounds = kSecondsBounds;
  p.compute_s.bounds = kSecondsBounds;
  p.batch.bounds = kBatchBounds;
  return p;
}

void Metrics::request(const std::string& model, const std::string& protocol, Status s) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& p = at(model);
  ++p.requests[protocol + "|" + std::to_string(protocol == "grpc" ? grpc_code(s) : http_status(s))];
  if (s != Status::kOk) ++p.failures[status_reason(s)];
}

void Metrics::observe(const std::string& model, double queue_s, double compute_s, int batch_rows, bool batch_start) {
  std::lock_guard<std::mutex> lock(mu_);
  PerModel& p = at(model);
  p.queue_s.add(queue_s);
  if (batch_start) {
    p.compute_s.add(compute_s);
    p.batch.add(batch_rows);
    ++p.batches;
  }
}

void Metrics::set_queue(const std::string& model, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  at(model).queue = n;
}

std::string Metrics::text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  auto histogram = [&](const char* name, const char* help, const std::string& model, const Histogram& h) {
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cum = 0;
    for (size_t i = 0; i <= h.bounds.size(); ++i) {
      cum += h.counts.empty() ? 0 : h.counts[i];
      os << name << "_bucket{model=\"" << label(model) << "\",le=\"";
      if (i < h.bounds.size()) os << h.bounds[i];
      else os << "+Inf";
      os << "\"} " << cum << "\n";
    }
    os << name << "_sum{model=\"" << label(model) << "\"} " << h.sum << "\n";
    os << name << "_count{model=\"" << label(model) << "\"} " << h.n << "\n";
  };
  os << "# HELP loom_serve_requests_total Inference requests by model, protocol and status code.\n"
        "# TYPE loom_serve_requests_total counter\n";
  for (const auto& m : models_)
    for (const auto& r : m.second.requests) {
      const size_t bar = r.first.find('|');
      os << "loom_serve_requests_total{model=\"" << label(m.first) << "\",protocol=\"" << r.first.substr(0, bar)
         << "\",code=\"" << r.first.substr(bar + 1) << "\"} " << r.second << "\n";
    }
  os << "# HELP loom_serve_request_failures_total Failed inference requests by model and reason.\n"
        "# TYPE loom_serve_request_failures_total counter\n";
  for (const auto& m : models_)
    for (const auto& f : m.second.failures)
      os << "loom_serve_request_failures_total{model=\"" << label(m.first) << "\",reason=\"" << f.first << "\"} "
         << f.second << "\n";
  os << "# HELP loom_serve_queue_length Requests waiting for a batch.\n# TYPE loom_serve_queue_length gauge\n";
  for (const auto& m : models_) os << "loom_serve_queue_length{model=\"" << label(m.first) << "\"} " << m.second.queue << "\n";
  for (const auto& m : models_) {
    histogram("loom_serve_queue_seconds", "Time a request waited for its batch.", m.first, m.second.queue_s);
    histogram("loom_serve_compute_seconds", "Time a batch's forward pass took.", m.first, m.second.compute_s);
    histogram("loom_serve_batch_size", "Rows per batch run.", m.first, m.second.batch);
  }
  return os.str();
}

// ---------------------------------------------------------------- Repository

Repository::Repository(std::string dir, std::vector<std::string> specs, Options o, Metrics* metrics,
                       std::function<void(const std::string&, const std::string&)> log)
    : dir_(std::move(dir)), specs_(std::move(specs)), o_(o), metrics_(metrics), log_(std::move(log)) {}

namespace {
bool stat_file(const std::string& p, int64_t* mtime_ns, int64_t* size) {
  struct stat st;
  if (stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  *size = static_cast<int64_t>(st.st_size);
  return true;
}

std::vector<std::string> subdirs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      struct stat st;
      if (valid_name(n) && stat((dir + "/" + n).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

void Repository::reload(bool initial) {
  // What should be served: name -> version -> file.
  std::map<std::string, std::map<std::string, std::string>> want;
  if (!dir_.empty()) {
    struct stat st;
    if (stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw rt::Error("--model-repository " + dir_ + ": not a folder");
    for (const auto& m : subdirs(dir_))
      for (const auto& v : subdirs(dir_ + "/" + m)) {
        const std::string f = dir_ + "/" + m + "/" + v + "/model.h5";
        int64_t t, s;
        if (stat_file(f, &t, &s)) want[m][v] = f;
      }
  }
  for (const auto& file : specs_) {
    InferenceServiceSpec spec = load_spec(file);
    want[spec.name]["1"] = spec.path;
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> loaded, failed;
  for (const auto& m : want)
    for (const auto& v : m.second) {
      int64_t t = 0, s = 0;
      stat_file(v.second, &t, &s);
      auto& slot = models_[m.first][v.first];
      if (slot.batcher && slot.path == v.second && slot.mtime_ns == t && slot.size == s) continue;
      try {
        auto model = std::make_shared<ServedModel>(m.first, v.first, v.second, o_.device);
        // The old batcher (if any) finishes its queue when the last request holding it is done.
        slot.batcher = std::make_shared<Batcher>(model, o_, metrics_);
        slot.path = v.second;
        slot.mtime_ns = t;
        slot.size = s;
        loaded.push_back(m.first + "/" + v.first);
        log_("info", "loaded model " + m.first + " version " + v.first + " from " + v.second + " (" +
                         std::to_string(model->in_features()) + " inputs, " + std::to_string(model->out_features()) +
                         " outputs, " + (model->on_cuda() ? "CUDA" : "CPU") + ")");
      } catch (const std::exception& e) {
        failed.push_back(m.first + "/" + v.first);
        log_("error", "cannot load model " + m.first + " version " + v.first + ": " + e.what() +
                          (slot.batcher ? " (the loaded one stays)" : ""));
        if (!slot.batcher) models_[m.first].erase(v.first);
      }
    }
  // Versions that are gone are unloaded.
  for (auto m = models_.begin(); m != models_.end();) {
    for (auto v = m->second.begin(); v != m->second.end();) {
      if (!want.count(m->first) || !want[m->first].count(v->first)) {
        log_("info", "unloaded model " + m->first + " version " + v->first + " (its file is gone)");
        v = m->second.erase(v);
      } else {
        ++v;
      }
    }
    m = m->second.empty() ? models_.erase(m) : std::next(m);
  }
  if (initial && models_.empty())
    throw rt::Error("no model to serve" + std::string(failed.empty() ? " (the repository holds no <model>/<version>/model.h5)" : ""));
}

namespace {
bool version_less(const std::string& a, const std::string& b) {  // numeric when both are numbers
  const bool na = !a.empty() && a.find_first_not_of("0123456789") == std::string::npos && a.size() < 18;
  const bool nb = !b.empty() && b.find_first_not_of("0123456789") == std::string::npos && b.size() < 18;
  if (na && nb) return std::stoll(a) < std::stoll(b);
  return a < b;
}
}  // namespace

std::shared_ptr<Batcher> Repository::find(const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto m = models_.find(name);
  if (m == models_.end() || m->second.empty()) throw ServeError(Status::kNotFound, "unknown model '" + name + "'");
  if (version.empty()) {
    auto best = m->second.begin();
    for (auto it = m->second.begin(); it != m->second.end(); ++it)
      if (version_less(best->first, it->first)) best = it;
    return best->second.batcher;
  }
  auto v = m->second.find(version);
  if (v == m->second.end())
    throw ServeError(Status::kNotFound, "unknown version '" + version + "' of model '" + name + "'");
  return v->second.batcher;
}

std::vector<std::string> Repository::versions(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  auto m = models_.find(name);
  if (m != models_.end())
    for (const auto& v : m->second) out.push_back(v.first);
  std::sort(out.begin(), out.end(), version_less);
  return out;
}

bool Repository::empty() const {
  std::lock_guard<std::mutex> lock(mu_);
  return models_.empty();
}

void Repository::stop() {
  std::map<std::string, std::map<std::string, Entry>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gone.swap(models_);
  }
  gone.clear();  // each batcher drains its queue as it is destroyed
}

}  // namespace loom::serve
