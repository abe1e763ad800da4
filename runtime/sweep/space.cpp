// space.cpp — the unit-cube map of a sweep's parameters (space.hpp).
#include "space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace loom::sweep {

Space::Space(std::vector<Param> params) : params_(std::move(params)) {}

const char* type_name(ParamType t) {
  switch (t) {
    case ParamType::Float: return "float";
    case ParamType::Int: return "int";
    case ParamType::Log: return "log";
    case ParamType::Choice: return "choice";
  }
  return "?";
}

Point Space::decode(const std::vector<double>& u) const {
  Point v(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    const double x = std::clamp(u[i], 0.0, 1.0);
    switch (p.type) {
      case ParamType::Float: v[i] = p.min + x * (p.max - p.min); break;
      case ParamType::Log: v[i] = std::exp(std::log(p.min) + x * (std::log(p.max) - std::log(p.min))); break;
      case ParamType::Int: {
        const double bins = p.max - p.min + 1;
        v[i] = std::min(p.max, p.min + std::floor(x * bins));
        break;
      }
      case ParamType::Choice: {
        const double k = static_cast<double>(p.choices.size());
        v[i] = std::min(k - 1, std::floor(x * k));
        break;
      }
    }
  }
  return v;
}

std::vector<double> Space::encode(const Point& v) const {
  std::vector<double> u(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    switch (p.type) {
      case ParamType::Float: u[i] = (v[i] - p.min) / (p.max - p.min); break;
      case ParamType::Log: u[i] = (std::log(v[i]) - std::log(p.min)) / (std::log(p.max) - std::log(p.min)); break;
      case ParamType::Int: u[i] = (v[i] - p.min + 0.5) / (p.max - p.min + 1); break;
      case ParamType::Choice: u[i] = (v[i] + 0.5) / static_cast<double>(p.choices.size()); break;
    }
    u[i] = std::clamp(u[i], 0.0, 1.0);
  }
  return u;
}

std::string Space::format(size_t i, double value) const {
  const Param& p = params_[i];
  char buf[64];
  switch (p.type) {
    case ParamType::Choice: return p.choices[static_cast<size_t>(value)];
    case ParamType::Int: std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(std::llround(value))); break;
    default: std::snprintf(buf, sizeof buf, "%.6g", value); break;
  }
  return buf;
}

}  // namespace loom::sweep
