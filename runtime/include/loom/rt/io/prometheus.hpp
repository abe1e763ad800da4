// prometheus.hpp — Prometheus's text exposition format, written one way for every Loom endpoint
// (loom-serve's /metrics, the controller's, loom-train's --metrics-port): each family's # HELP
// and # TYPE once, label values escaped, numbers in their shortest exact form.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::rt {

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  // Begins family `name` of `type` (counter, gauge, histogram): its HELP and TYPE lines.
  PrometheusText& family(const std::string& name, const char* type, const std::string& help);
  // One sample line: `name` (the family's, or it with _bucket/_sum/_count), its labels, value.
  PrometheusText& sample(const std::string& name, const Labels& labels, double value);
  // A family of one sample without labels.
  PrometheusText& single(const std::string& name, const char* type, const std::string& help, double value);
  // A histogram's samples for `labels`: cumulative buckets (`counts` per bound, the last for
  // +Inf), _sum and _count. The family is begun by the caller, once.
  PrometheusText& histogram(const std::string& name, const Labels& labels, const std::vector<double>& bounds,
                            const std::vector<uint64_t>& counts, double sum, uint64_t n);
  const std::string& str() const { return out_; }

  static std::string escape(const std::string& label_value);  // \ " and newline
  static std::string number(double v);                         // 3, 0.25, 1e-05, +Inf, NaN

 private:
  std::string out_;
};

}  // namespace loom::rt
