// repository.hpp — the models loom-serve serves: DIR/<model>/<version>/model.h5 and
// InferenceService specs, each version with its batcher, reloaded while requests keep running.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "core/options.hpp"
#include "repository/batcher.hpp"

namespace loom::serve {

// The models loaded from a repository (DIR/<model>/<version>/model.h5) and from
// InferenceService specs, with their batchers. reload() loads what is new or changed and
// unloads what is gone, while requests keep running on the versions they started with; models
// load outside the lock, so a large one does not stall the others' requests. A model file that
// resolves outside the repository (a symbolic link) is refused unless allow_symlinks.
class Repository {
 public:
  Repository(std::string dir, std::vector<std::string> specs, Options o, Metrics* metrics,
             std::function<void(const std::string& level, const std::string& msg)> log);
  // Throws when nothing can be served at start; later reloads keep what fails to load.
  void reload(bool initial);
  // The batcher of `name` at `version` (empty: the newest). Throws ServeError kNotFound.
  std::shared_ptr<Batcher> find(const std::string& name, const std::string& version) const;
  std::vector<std::string> versions(const std::string& name) const;
  bool empty() const;
  bool loaded(const std::string& name) const;  // some version of `name` is being served
  // The repository extension's index: every model version found, READY or UNAVAILABLE (with
  // the reason it did not load).
  struct State {
    std::string name, version, state, reason;
  };
  std::vector<State> index() const;
  // Every loaded version's batcher, by name then version (the statistics extension, /metrics).
  struct Loaded {
    std::string name, version;
    std::shared_ptr<Batcher> batcher;
  };
  std::vector<Loaded> loaded_versions() const;
  bool all_ready() const;  // every model version found is loaded (--strict-readiness)
  void stop();  // drains and drops every batcher

 private:
  struct Entry {
    std::string path;
    int64_t mtime_ns = 0, size = 0;  // of the model file and, when there is one, its config.pbtxt
    std::shared_ptr<Batcher> batcher;
  };
  using Wanted = std::map<std::string, std::map<std::string, std::string>>;  // name -> version -> file
  Wanted scan();
  std::vector<std::string> served_versions(const std::string& model) const;
  std::string contained(const std::string& file) const;  // "" when it may be served, else why not
  LlmOptions llm_options() const {  // a language model's engine runs on the server's --threads
    LlmOptions l = o_.llm;
    l.threads = o_.threads;
    return l;
  }
  std::shared_ptr<Batcher> load(const std::string& name, const std::string& version, const std::string& file);
  void unload_gone(const Wanted& want);  // with mu_ held
  std::string dir_;
  std::vector<std::string> specs_;
  Options o_;
  Metrics* metrics_;
  std::function<void(const std::string&, const std::string&)> log_;
  std::mutex reload_mu_;  // one reload at a time
  mutable std::mutex mu_;  // models_ and failed_
  std::map<std::string, std::map<std::string, Entry>> models_;  // name -> version -> entry
  std::map<std::string, std::map<std::string, std::string>> failed_;  // name -> version -> reason
};

}  // namespace loom::serve
