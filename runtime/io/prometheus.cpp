// prometheus.cpp — the text exposition format (version 0.0.4).
#include "loom/rt/io/prometheus.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace loom::rt {

std::string PrometheusText::escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string PrometheusText::number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // the shortest text that reads back as v
  return std::string(buf, r.ptr);
}

PrometheusText& PrometheusText::family(const std::string& name, const char* type, const std::string& help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  return *this;
}

PrometheusText& PrometheusText::sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i)
      out_ += (i ? ",": "") + labels[i].first + "=\"" + escape(labels[i].second) + "\"";
    out_ += '}';
  }
  out_ += " " + number(value) + "\n";
  return *this;
}

PrometheusText& PrometheusText::single(const std::string& name, const char* type, const std::string& help, double value) {
  return family(name, type, help).sample(name, {}, value);
}

PrometheusText& PrometheusText::histogram(const std::string& name, const Labels& labels, const std::vector<double>& bounds,
                                          const std::vector<uint64_t>& counts, double sum, uint64_t n) {
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds.size(); ++i) {
    cum += i < counts.size() ? counts[i] : 0;
    Labels with = labels;
    with.emplace_back("le", i < bounds.size() ? number(bounds[i]) : "+Inf");
    sample(name + "_bucket", with, static_cast<double>(cum));
  }
  sample(name + "_sum", labels, sum);
  return sample(name + "_count", labels, static_cast<double>(n));
}

}  // namespace loom::rt
