// spec.cpp — reading and checking a sweep spec (spec.hpp) with yaml-cpp.
#include "spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace loom::sweep {
namespace {

const std::set<std::string> kTopKeys = {"command", "metric", "goal", "method", "parameters", "trials",
                                        "parallel", "seed", "init_trials", "max_failures", "sbatch"};

template <typename T>
T scalar(const YAML::Node& n, const std::string& key) {
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    throw SpecError("'" + key + "': '" + (n.IsScalar() ? n.Scalar() : std::string("(not a scalar)")) +
                    "' is not a valid value");
  }
}

Param parse_param(const std::string& name, const YAML::Node& n) {
  static const std::regex ident("[A-Za-z_][A-Za-z0-9_]*");
  if (!std::regex_match(name, ident)) throw SpecError("parameter '" + name + "': names are letters, digits and _");
  if (name == "metrics_file") throw SpecError("parameter 'metrics_file': the name is reserved for the placeholder");
  if (!n.IsMap()) throw SpecError("parameter '" + name + "': expected a map with type, min, max or values");
  Param p;
  p.name = name;
  const std::string where = "parameters." + name;
  const std::string type = n["type"] ? scalar<std::string>(n["type"], where + ".type") : "";
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    if (k != "type" && k != "min" && k != "max" && k != "values")
      throw SpecError(where + ": unknown key '" + k + "' (type, min, max, values)");
  }
  if (type == "choice") {
    p.type = ParamType::Choice;
    if (!n["values"] || !n["values"].IsSequence() || n["values"].size() == 0)
      throw SpecError(where + ": a choice needs a non-empty list 'values'");
    for (const auto& v : n["values"]) p.choices.push_back(scalar<std::string>(v, where + ".values"));
    return p;
  }
  if (type == "float") p.type = ParamType::Float;
  else if (type == "int") p.type = ParamType::Int;
  else if (type == "log") p.type = ParamType::Log;
  else throw SpecError(where + ": unknown type '" + type + "' (float, int, log or choice)");
  if (!n["min"] || !n["max"]) throw SpecError(where + ": needs min and max");
  p.min = scalar<double>(n["min"], where + ".min");
  p.max = scalar<double>(n["max"], where + ".max");
  if (!std::isfinite(p.min) || !std::isfinite(p.max) || p.min >= p.max)
    throw SpecError(where + ": min must be below max (min " + n["min"].Scalar() + ", max " + n["max"].Scalar() + ")");
  if (p.type == ParamType::Log && p.min <= 0) throw SpecError(where + ": a log parameter needs min > 0");
  if (p.type == ParamType::Int && (p.min != std::floor(p.min) || p.max != std::floor(p.max)))
    throw SpecError(where + ": an int parameter needs integer min and max");
  // Every integer of the range must be a double exactly and a 64-bit integer: within +-2^53.
  constexpr double kExact = 9007199254740992.0;
  if (p.type == ParamType::Int && (std::fabs(p.min) > kExact || std::fabs(p.max) > kExact))
    throw SpecError(where + ": an int parameter's min and max must lie within +-2^53 (min " + n["min"].Scalar() +
                    ", max " + n["max"].Scalar() + ")");
  return p;
}

void check_placeholders(const Spec& s) {
  static const std::regex ph("\\{([A-Za-z_][A-Za-z0-9_]*)\\}");
  std::set<std::string> used;
  for (std::sregex_iterator it(s.command.begin(), s.command.end(), ph), end; it != end; ++it) used.insert((*it)[1]);
  if (!used.count("metrics_file"))
    throw SpecError("'command' has no {metrics_file}: the trial must write its metric to that file");
  for (const auto& name : used) {
    if (name == "metrics_file") continue;
    if (std::none_of(s.params.begin(), s.params.end(), [&](const Param& p) { return p.name == name; }))
      throw SpecError("'command' uses {" + name + "}, which is not a parameter");
  }
  for (const auto& p : s.params)
    if (!used.count(p.name)) throw SpecError("parameter '" + p.name + "' is not used in 'command' (add {" + p.name + "})");
}

void parse_top(Spec& s, const YAML::Node& root) {
  for (const auto& kv : root) {
    const auto k = kv.first.as<std::string>();
    if (!kTopKeys.count(k))
      throw SpecError("unknown key '" + k + "' (command, metric, goal, method, parameters, trials, parallel, seed, "
                      "init_trials, max_failures, sbatch)");
  }
  for (const char* k : {"command", "metric", "parameters"})
    if (!root[k]) throw SpecError(std::string("'") + k + "' is missing");
  s.command = scalar<std::string>(root["command"], "command");
  s.metric = scalar<std::string>(root["metric"], "metric");
  if (s.metric.empty()) throw SpecError("'metric' is empty");
  // Loom's min|max, and minimize|maximize as Optuna's direction and W&B sweeps' goal spell them.
  const std::string goal = root["goal"] ? scalar<std::string>(root["goal"], "goal") : "min";
  if (goal != "min" && goal != "max" && goal != "minimize" && goal != "maximize")
    throw SpecError("'goal': '" + goal + "' (min or max; minimize or maximize)");
  s.maximise = goal == "max" || goal == "maximize";
  const std::string method = root["method"] ? scalar<std::string>(root["method"], "method") : "bayes";
  if (method != "bayes" && method != "random") throw SpecError("'method': '" + method + "' (bayes or random)");
  s.bayes = method == "bayes";
  if (root["trials"]) s.trials = scalar<int>(root["trials"], "trials");
  if (root["parallel"]) s.parallel = scalar<int>(root["parallel"], "parallel");
  if (root["init_trials"]) s.init_trials = scalar<int>(root["init_trials"], "init_trials");
  if (root["max_failures"]) s.max_failures = scalar<int>(root["max_failures"], "max_failures");
  if (root["seed"]) s.seed = scalar<unsigned long>(root["seed"], "seed");
  if (s.trials < 1 || s.trials > 100000) throw SpecError("'trials' must be 1..100000");
  if (s.parallel < 1 || s.parallel > s.trials) throw SpecError("'parallel' must be 1..trials");
  if (s.init_trials < 0 || s.max_failures < 0) throw SpecError("'init_trials' and 'max_failures' must be >= 0");
  if (root["sbatch"]) {
    if (!root["sbatch"].IsSequence()) throw SpecError("'sbatch' must be a list of sbatch options");
    for (const auto& a : root["sbatch"]) {
      auto opt = scalar<std::string>(a, "sbatch");
      if (opt.empty() || opt[0] != '-') throw SpecError("'sbatch': '" + opt + "' is not an option (starts with -)");
      if (opt.rfind("--array", 0) == 0) throw SpecError("'sbatch': --array is loom-sweep's (trials and parallel)");
      s.sbatch_args.push_back(opt);
    }
  }
}

}  // namespace

Spec parse_spec(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw SpecError(std::string("not valid YAML: ") + e.what());
  }
  if (!root.IsMap()) throw SpecError("expected a map of keys (command, metric, parameters, ...)");
  Spec s;
  s.text = text;
  try {  // a list or a map where a scalar belongs: yaml-cpp's conversion error, with its place
    parse_top(s, root);
    const YAML::Node params = root["parameters"];
    if (!params.IsMap() || params.size() == 0) throw SpecError("'parameters' must be a non-empty map of name: {type, ...}");
    for (const auto& kv : params) s.params.push_back(parse_param(kv.first.as<std::string>(), kv.second));
  } catch (const YAML::Exception& e) {
    throw SpecError("line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                    ": a value of the wrong kind (" + e.msg + ")");
  }
  check_placeholders(s);
  const int dims = static_cast<int>(s.params.size());
  if (s.init_trials == 0) s.init_trials = std::max(s.parallel, 2 * dims + 1);
  if (s.max_failures == 0) s.max_failures = std::max(3, s.trials / 4);
  return s;
}

Spec load_spec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SpecError(path + ": cannot read the spec");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return parse_spec(ss.str());
  } catch (const SpecError& e) {
    throw SpecError(path + ": " + e.what());
  }
}

std::string expand_command(const Spec& spec, const Space& space, const Point& values, const std::string& metrics_file) {
  // One pass, so a substituted value is never expanded again.
  static const std::regex ph("\\{([A-Za-z_][A-Za-z0-9_]*)\\}");
  std::string out;
  auto last = spec.command.cbegin();
  for (std::sregex_iterator it(spec.command.begin(), spec.command.end(), ph), end; it != end; ++it) {
    out.append(last, (*it)[0].first);
    const std::string name = (*it)[1];
    if (name == "metrics_file") out += shell_quote(metrics_file);
    for (size_t i = 0; i < space.dims(); ++i)
      if (space.params()[i].name == name) out += shell_quote(space.format(i, values[i]));
    last = (*it)[0].second;
  }
  out.append(last, spec.command.cend());
  return out;
}

}  // namespace loom::sweep
