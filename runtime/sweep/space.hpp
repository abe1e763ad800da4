// space.hpp — a sweep's parameters and their map to and from the unit cube, where the
// Gaussian process works: float linearly, log on the log scale, int and choice by bins (the
// centre of a bin encodes its value, so a decoded point encodes back to the same place).
#pragma once

#include <string>
#include <vector>

#include "loom/error.hpp"

namespace loom::sweep {

// A bad spec or bad use: a loom::Error of kind kUsage (loom-sweep exits 2 with the message).
struct SpecError : loom::Error {
  explicit SpecError(const std::string& msg) : loom::Error(msg, Kind::kUsage) {}
};

enum class ParamType { Float, Int, Log, Choice };

struct Param {
  std::string name;
  ParamType type = ParamType::Float;
  double min = 0, max = 1;
  std::vector<std::string> choices;
};

// One parameter's value: a number, or for a choice the index of the chosen string.
using Point = std::vector<double>;

class Space {
 public:
  explicit Space(std::vector<Param> params);
  size_t dims() const { return params_.size(); }
  const std::vector<Param>& params() const { return params_; }
  // Unit cube -> values (clamped into range; int rounded; choice as its index).
  Point decode(const std::vector<double>& u) const;
  std::vector<double> encode(const Point& values) const;
  // Snaps a unit-cube point onto what it decodes to (int and choice bins).
  std::vector<double> snap(const std::vector<double>& u) const { return encode(decode(u)); }
  // The text substituted for {name} in the command: %.6g, an integer, or the choice.
  std::string format(size_t i, double value) const;

 private:
  std::vector<Param> params_;
};

const char* type_name(ParamType t);

}  // namespace loom::sweep
