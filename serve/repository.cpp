// repository.cpp — scanning the repository and specs, loading and unloading model versions.
#include "repository.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

#include "loom/rt/error.hpp"
#include "spec.hpp"

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
