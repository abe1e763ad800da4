// repository.cpp — scanning the repository and specs, loading and unloading model versions.
#include "repository/repository.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <algorithm>
#include <future>

#include "core/model_files.hpp"
#include "loom/rt/error.hpp"
#include "repository/model_config.hpp"
#include "spec/spec.hpp"

namespace loom::serve {

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

// The entries of dir whose stat() passes `keep`, sorted.
std::vector<std::string> entries(const std::string& dir, bool (*keep)(const std::string& name, const struct stat&)) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      struct stat st;
      if (n != "." && n != ".." && stat((dir + "/" + n).c_str(), &st) == 0 && keep(n, st)) out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
std::vector<std::string> subdirs(const std::string& dir) {
  return entries(dir, [](const std::string& n, const struct stat& st) { return valid_name(n) && S_ISDIR(st.st_mode); });
}
std::vector<std::string> files_in(const std::string& dir) {
  return entries(dir, [](const std::string&, const struct stat& st) { return S_ISREG(st.st_mode); });
}
}  // namespace

namespace {
// Group- or world-writable: anyone in that group could replace what is served.
void warn_writable(const std::string& path, const std::function<void(const std::string&, const std::string&)>& log) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)))
    log("warning", path + " is writable by " + ((st.st_mode & S_IWOTH) ? "everyone" : "its group") +
                       ": anyone who can write it decides what is served (chmod go-w)");
}

std::string real(const std::string& p) {
  char buf[PATH_MAX];
  return realpath(p.c_str(), buf) ? std::string(buf) : std::string();
}
}  // namespace

std::string Repository::contained(const std::string& file) const {
  if (o_.allow_symlinks) return "";
  const std::string root = real(dir_), target = real(file);
  if (root.empty() || target.empty()) return file + ": cannot resolve its path";
  if (target.compare(0, root.size() + 1, root + "/") != 0)
    return file + " resolves to " + target + ", outside the repository " + root +
           " (a symbolic link; --allow-symlinks serves it)";
  return "";
}

// Every version folder of `model`, or those its config.pbtxt's version_policy names. A config
// that does not read serves them all here: loading each then fails with the config's error.
std::vector<std::string> Repository::served_versions(const std::string& model) const {
  std::vector<std::string> found = subdirs(dir_ + "/" + model);
  inference::ModelConfig c;
  try {
    if (read_model_config(dir_ + "/" + model, &c, nullptr)) return policy_versions(c, found);
  } catch (const std::exception&) {
  }
  return found;
}

Repository::Wanted Repository::scan() {
  Wanted want;
  if (!dir_.empty()) {
    struct stat st;
    if (stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw rt::Error("--model-repository " + dir_ + ": not a folder");
    for (const auto& m : subdirs(dir_))
      for (const auto& v : served_versions(m)) {
        // Triton's layout (an HDF5 file first), or Hugging Face's: model.safetensors (or its
        // shards' index) beside config.json.
        for (const char* file : {"model.h5", "model.onnx", "model.safetensors", "model.safetensors.index.json"}) {
          const std::string f = dir_ + "/" + m + "/" + v + "/" + file;
          int64_t t, s;
          if (stat_file(f, &t, &s)) {
            want[m][v] = f;
            break;
          }
        }
      }
  }
  for (const auto& file : specs_) {
    InferenceServiceSpec spec = load_spec(file);
    want[spec.name]["1"] = spec.path;
  }
  return want;
}

std::shared_ptr<Batcher> Repository::load(const std::string& name, const std::string& version, const std::string& file) {
  if (!dir_.empty() && file.compare(0, dir_.size() + 1, dir_ + "/") == 0) {
    std::string why = contained(file);
    const std::string folder = file.substr(0, file.rfind('/'));
    if (is_safetensors_file(file))  // a Hugging Face folder: every file it reads (shards, tokenizer, template) stays inside
      for (const auto& f : files_in(folder))
        if (why.empty()) why = contained(folder + "/" + f);
    if (!why.empty()) throw rt::Error(why);
    for (const std::string& p : {dir_, dir_ + "/" + name, dir_ + "/" + name + "/" + version, file}) warn_writable(p, log_);
  } else {
    warn_writable(file, log_);
  }
  inference::ModelConfig file_config;
  bool has_config = false;
  if (!dir_.empty()) {
    struct stat st;
    const std::string pbtxt = dir_ + "/" + name + "/config.pbtxt";
    const std::string why = lstat(pbtxt.c_str(), &st) == 0 ? contained(pbtxt) : "";
    if (!why.empty()) throw rt::Error(why);
    has_config = read_model_config(dir_ + "/" + name, &file_config, [&](const std::string& w) { log_("warning", w); });
  }
  auto model = std::make_shared<ServedModel>(name, version, file, o_.device, llm_options());
  model->set_run_memory_budget(static_cast<size_t>(o_.max_run_memory_mb) << 20);
  Options o = o_;  // a model folder's config.pbtxt sets its own batching, within the server's limits
  inference::ModelConfig config = settle_config(has_config ? &file_config : nullptr, name, *model, &o);
  std::vector<std::shared_ptr<ServedModel>> instances = {model};
  // A language model's one engine already runs its sequences side by side.
  for (int i = 1; i < (model->engine() ? 1 : o.instances); ++i) {  // the same file again, checked the same way
    instances.push_back(std::make_shared<ServedModel>(name, version, file, o_.device));
    instances.back()->set_run_memory_budget(static_cast<size_t>(o_.max_run_memory_mb) << 20);
    Options same = o_;
    settle_config(has_config ? &file_config : nullptr, name, *instances.back(), &same);
  }
  std::string what;
  if (model->engine()) {
    const LlmOptions& l = model->engine()->options();
    what = model->family() + ", context " + std::to_string(model->engine()->context()) +
           ", generate, up to " + std::to_string(l.max_num_seqs) + " sequences, " + std::to_string(model->engine()->stats().blocks_total) +
           " KV blocks of " + std::to_string(l.kv_block_tokens) + " tokens, " +
           (model->engine()->tokenizer() ? std::string(model->engine()->tokenizer()->kind()) + " tokenizer" : "token ids only") + (model->chat() ? ", chat template" : "");
  } else if (model->opset()) {
    what = "onnx opset " + std::to_string(model->opset()) + ", " + model->graph_summary() + ", inputs";
    for (const auto& d : model->inputs()) what += " " + d.name;
    what += model->batched() ? ", batched up to " + std::to_string(o.max_batch_size) + " rows"
                             : ", one request at a time" + (model->not_batched().empty() ? "" : " (" + model->not_batched() + ")");
  } else {
    what = std::to_string(model->in_features()) + " inputs, " + std::to_string(model->out_features()) + " outputs";
  }
  if (o.instances > 1) what += ", " + std::to_string(o.instances) + " instances";
  log_("info", "loaded model " + name + " version " + version + " from " + file + " (" + what +
                   ", " + model->precision() + ", " + (model->on_cuda() ? "CUDA" : "CPU") + ")");
  return std::make_shared<Batcher>(std::move(instances), o, metrics_, std::move(config));
}

void Repository::reload(bool initial) {
  std::lock_guard<std::mutex> one(reload_mu_);
  const Wanted want = scan();
  struct Pending {  // a version to (re)load
    std::string name, version, file;
    int64_t mtime_ns = 0, size = 0;
    std::shared_ptr<Batcher> batcher;
    std::string error;
  };
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& m : want)
      for (const auto& v : m.second) {
        Pending t;
        t.name = m.first;
        t.version = v.first;
        t.file = v.second;
        stat_file(t.file, &t.mtime_ns, &t.size);
        int64_t config_ns = 0, config_size = 0;  // a changed config.pbtxt reloads the model too
        if (!dir_.empty() && stat_file(dir_ + "/" + t.name + "/config.pbtxt", &config_ns, &config_size))
          t.mtime_ns ^= config_ns, t.size += config_size << 32;
        auto mi = models_.find(m.first);
        const Entry* e = mi == models_.end() || !mi->second.count(v.first) ? nullptr : &mi->second.at(v.first);
        if (!(e && e->batcher && e->path == t.file && e->mtime_ns == t.mtime_ns && e->size == t.size)) pending.push_back(t);
      }
  }
  for (auto& t : pending) {  // outside the lock: requests to every loaded model go on meanwhile
    try {
      // On a thread of its own, which ends: the OpenMP team a model's check runs open goes with
      // it, instead of staying beside the compute pool's (compute_pool.hpp).
      t.batcher = std::async(std::launch::async, [&] { return load(t.name, t.version, t.file); }).get();
    } catch (const std::exception& e) {
      t.error = e.what();
    }
  }
  size_t failures = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : pending) {
      if (t.batcher) {
        // The old batcher (if any) finishes its queue when the last request holding it is done.
        models_[t.name][t.version] = {t.file, t.mtime_ns, t.size, t.batcher};
        failed_[t.name].erase(t.version);
        continue;
      }
      ++failures;
      const bool kept = models_.count(t.name) && models_[t.name].count(t.version);
      auto fm = failed_.find(t.name);
      if (fm != failed_.end() && fm->second.count(t.version) && fm->second[t.version] == t.error) continue;  // said already
      log_("error", "cannot load model " + t.name + " version " + t.version + ": " + t.error +
                        (kept ? " (the loaded one stays)" : ""));
      if (!kept) failed_[t.name][t.version] = t.error;
    }
    unload_gone(want);
    if (initial && failures > 0 && o_.exit_on_error)
      throw rt::Error(std::to_string(failures) + " model version(s) failed to load (--exit-on-error)");
    if (initial && models_.empty())
      throw rt::Error("no model to serve" + std::string(failures == 0 ? " (the repository holds no <model>/<version>/model.h5, model.onnx or model.safetensors)" : ""));
  }
}

void Repository::unload_gone(const Wanted& want) {
  for (auto m = models_.begin(); m != models_.end();) {
    for (auto v = m->second.begin(); v != m->second.end();) {
      if (!want.count(m->first) || !want.at(m->first).count(v->first)) {
        log_("info", "unloaded model " + m->first + " version " + v->first + " (its file is gone)");
        v = m->second.erase(v);
      } else {
        ++v;
      }
    }
    m = m->second.empty() ? models_.erase(m) : std::next(m);
  }
  for (auto m = failed_.begin(); m != failed_.end();) {
    for (auto v = m->second.begin(); v != m->second.end();)
      v = want.count(m->first) && want.at(m->first).count(v->first) ? std::next(v) : m->second.erase(v);
    m = m->second.empty() ? failed_.erase(m) : std::next(m);
  }
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

bool Repository::loaded(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto m = models_.find(name);
  return m != models_.end() && !m->second.empty();
}

std::vector<Repository::Loaded> Repository::loaded_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Loaded> out;
  for (const auto& m : models_)
    for (const auto& v : m.second) out.push_back({m.first, v.first, v.second.batcher});
  return out;
}

std::vector<Repository::State> Repository::index() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<State> out;
  for (const auto& m : models_)
    for (const auto& v : m.second) out.push_back({m.first, v.first, "READY", ""});
  for (const auto& m : failed_)
    for (const auto& v : m.second) out.push_back({m.first, v.first, "UNAVAILABLE", v.second});
  std::sort(out.begin(), out.end(), [](const State& a, const State& b) {
    return a.name != b.name ? a.name < b.name : a.version < b.version;
  });
  return out;
}

bool Repository::all_ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : failed_)
    if (!m.second.empty()) return false;
  return true;
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
