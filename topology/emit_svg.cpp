// emit_svg.cpp — emit_svg.hpp: one column per NUMA node (grouped by socket), its cores as a
// grid, its GPUs and NICs below; GPUs without a NUMA node in a last column. NVLinks are arcs
// under the GPUs, as thick as their link count (an NVSwitch, one bar); a NIC's PIX/PXB path to
// a GPU a dashed line; a placement colours each task's cores, GPU and NIC and numbers the ring.
#include "emit_svg.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "loom/markup.hpp"

namespace loom::topo {
namespace {

const char* const kTaskColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr int kCell = 16, kCols = 8, kColumnW = kCols * kCell + 24, kBoxH = 38, kMargin = 36;

std::string esc(const std::string& s) { return markup_text(s); }  // names come from files and clients

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

struct Pos {
  double x, y;
};

class Svg {
 public:
  void rect(double x, double y, double w, double h, const std::string& fill, const std::string& stroke, double sw = 1) {
    os_ << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << h << "\" rx=\"3\" fill=\"" << fill
        << "\" stroke=\"" << stroke << "\" stroke-width=\"" << sw << "\"/>\n";
  }
  void text(double x, double y, const std::string& s, int size = 11, const std::string& extra = "") {
    os_ << "<text x=\"" << x << "\" y=\"" << y << "\" font-size=\"" << size << "\"" << extra << ">" << esc(s) << "</text>\n";
  }
  void line(Pos a, Pos b, const std::string& stroke, double w, const std::string& title) {
    os_ << "<line x1=\"" << a.x << "\" y1=\"" << a.y << "\" x2=\"" << b.x << "\" y2=\"" << b.y << "\" stroke=\"" << stroke
        << "\" stroke-width=\"" << w << "\" stroke-opacity=\"0.5\"><title>" << esc(title) << "</title></line>\n";
  }
  // From a to b bulging `depth` to the right.
  void arc(Pos a, Pos b, double depth, const std::string& stroke, double w, const std::string& title) {
    os_ << "<path d=\"M" << a.x << "," << a.y << " C" << a.x + depth << "," << a.y << " " << b.x + depth << "," << b.y << " " << b.x
        << "," << b.y << "\" fill=\"none\" stroke=\"" << stroke << "\" stroke-width=\"" << w << "\" stroke-opacity=\"0.6\"><title>"
        << esc(title) << "</title></path>\n";
  }
  // A dashed curve bulging left of two boxes' left edges (a PCIe path).
  void curve(Pos a, Pos b, const std::string& stroke, const std::string& title) {
    os_ << "<path d=\"M" << a.x << "," << a.y << " C" << a.x - 7 << "," << a.y << " " << b.x - 7 << "," << b.y << " " << b.x << ","
        << b.y << "\" fill=\"none\" stroke=\"" << stroke << "\" stroke-dasharray=\"4 3\"><title>" << esc(title) << "</title></path>\n";
  }
  std::string str(double w, double h, const std::string& title) const {
    std::ostringstream out;
    out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
        << "\" viewBox=\"0 0 " << w << " " << h << "\" font-family=\"sans-serif\">\n<title>" << esc(title) << "</title>\n"
        << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        << os_.str() << "</svg>\n";
    return out.str();
  }

 private:
  std::ostringstream os_;
};

// Which task (placement) holds each CPU, GPU and NIC; -1 for none.
struct Owners {
  std::map<int, int> cpu, gpu;
  std::map<std::string, int> nic;
};

Owners owners_of(const Placement* p) {
  Owners o;
  if (!p) return o;
  for (size_t k = 0; k < p->tasks.size(); ++k) {
    const int task = static_cast<int>(k);
    for (int c : p->tasks[k].cpus) o.cpu.emplace(c, task);
    for (int g : p->tasks[k].gpus) o.gpu.emplace(g, task);
    if (!p->tasks[k].nic.empty()) o.nic.emplace(p->tasks[k].nic, task);
  }
  return o;
}

std::string colour(int task) {
  return task < 0 ? "#ffffff" : kTaskColours[task % 8];
}

// The picture, part by part; each part records where it put what the next parts connect.
class Picture {
 public:
  Picture(const Topology& t, const Placement* p) : t_(t), p_(p), own_(owners_of(p)) { plan_columns(); }
  std::string draw() {
    for (size_t k = 0; k < columns_.size(); ++k) column(k);
    bottom_ = top_ + column_h_ + 10;
    nvlinks();
    pcie();
    if (p_) placement();
    s_.text(kMargin, 24, title() + " · " + std::to_string(t_.total_cpus()) + " CPUs, " + std::to_string(t_.gpus.size()) + " GPUs, " +
                             std::to_string(t_.nics.size()) + " NICs", 14, " font-weight=\"bold\"");
    return s_.str(std::max(760.0, kMargin + columns_.size() * (kColumnW + kMargin) + 0.0), bottom_ + 10, title());
  }

 private:
  std::string title() const { return "loom-topo: " + (t_.host.empty() ? std::string("node") : t_.host); }

  // NUMA positions, by socket then id; -1: the devices without one. And the columns' height.
  void plan_columns() {
    for (size_t i = 0; i < t_.numa_nodes.size(); ++i) columns_.push_back(static_cast<int>(i));
    std::stable_sort(columns_.begin(), columns_.end(), [&](int a, int b) { return t_.numa_nodes[a].socket < t_.numa_nodes[b].socket; });
    const bool loose = std::any_of(t_.gpus.begin(), t_.gpus.end(), [](const Gpu& g) { return g.numa < 0; }) ||
                       std::any_of(t_.nics.begin(), t_.nics.end(), [](const Nic& n) { return n.numa < 0; });
    if (loose || columns_.empty()) columns_.push_back(-1);
    size_t max_rows = 1, max_devices = 1;
    for (int c : columns_) {
      if (c >= 0) max_rows = std::max(max_rows, (t_.numa_nodes[c].cores.size() + kCols - 1) / kCols);
      const int numa = c >= 0 ? t_.numa_nodes[c].id : -1;
      size_t n = 0;
      for (const auto& g : t_.gpus) n += g.numa == numa;
      for (const auto& nic : t_.nics) n += nic.numa == numa;
      max_devices = std::max(max_devices, n);
    }
    devices_y_ = top_ + 40 + max_rows * kCell + 12;
    column_h_ = devices_y_ - top_ + max_devices * (kBoxH + 6) + 8;
  }

  void column(size_t k) {
    const double x = kMargin + k * (kColumnW + kMargin);
    const int c = columns_[k];
    s_.rect(x, top_, kColumnW, column_h_, c >= 0 ? "#f4f6f8" : "#fbfbfb", "#8a96a3");
    if (c >= 0) cores(x, t_.numa_nodes[c]);
    else s_.text(x + 8, top_ + 16, "no NUMA node", 12, " font-weight=\"bold\"");
    const int numa = c >= 0 ? t_.numa_nodes[c].id : -1;
    double y = devices_y_;
    for (const auto& g : t_.gpus)
      if (g.numa == numa) gpu(x, y, k, g), y += kBoxH + 6;
    for (const auto& nic : t_.nics)
      if (nic.numa == numa) this->nic(x, y, nic), y += kBoxH + 6;
  }

  void cores(double x, const NumaNode& n) {
    s_.text(x + 8, top_ + 16, "Socket " + std::to_string(n.socket) + " · NUMA " + std::to_string(n.id), 12, " font-weight=\"bold\"");
    s_.text(x + 8, top_ + 31, std::to_string(n.cores.size()) + " cores" + (n.memory_mb ? " · " + num(n.memory_mb / 1024.0) + " GB" : ""), 10);
    for (size_t i = 0; i < n.cores.size(); ++i) {
      int task = -1;
      for (int pu : n.cores[i].pus)
        if (own_.cpu.count(pu)) task = own_.cpu.at(pu);
      const double cx = x + 12 + (i % kCols) * kCell, cy = top_ + 40 + (i / kCols) * kCell;
      s_.rect(cx, cy, kCell - 2, kCell - 2, colour(task), "#5b6770", 0.5);
      s_.text(cx + 2, cy + 10, std::to_string(n.cores[i].logical), 7, task >= 0 ? " fill=\"white\"" : " fill=\"#5b6770\"");
    }
  }

  void gpu(double x, double y, size_t column, const Gpu& g) {
    const int task = own_.gpu.count(g.index) ? own_.gpu.at(g.index) : -1;
    s_.rect(x + 8, y, kColumnW - 16, kBoxH, task >= 0 ? colour(task) : "#e3f1e0", "#3a7d2c", task >= 0 ? 2.5 : 1);
    const std::string fg = task >= 0 ? " fill=\"white\"" : "";
    s_.text(x + 14, y + 15, "GPU " + std::to_string(g.index) + " " + g.cls + (g.memory_mb ? " " + num(g.memory_mb / 1024.0) + " GB" : ""), 11,
            " font-weight=\"bold\"" + fg);
    s_.text(x + 14, y + 30, task >= 0 ? "task " + std::to_string(task) : g.pci, 9, fg);
    gpu_left_[g.index] = {x + 8, y + kBoxH / 2.0};
    gpu_right_[g.index] = {x + kColumnW - 8, y + kBoxH / 2.0};
    gpu_column_[g.index] = column;
  }

  void nic(double x, double y, const Nic& n) {
    const int task = own_.nic.count(n.name) ? own_.nic.at(n.name) : -1;
    s_.rect(x + 8, y, kColumnW - 16, kBoxH - 10, "#e8eefb", task >= 0 ? colour(task) : "#34589c", task >= 0 ? 2.5 : 1);
    s_.text(x + 14, y + 18, "NIC " + n.name + (task >= 0 ? "  · task " + std::to_string(task) : ""), 11);
    nic_at_[n.name] = {x + 8, y + (kBoxH - 10) / 2.0};
  }

  // As thick as their links: arcs on the right within a column, lines across the gap between
  // columns; an NVSwitch as one bar below.
  void nvlinks() {
    const size_t g = t_.gpus.size();
    if (t_.is_nvswitch() && g > 1) {
      s_.rect(kMargin, bottom_ + 8, columns_.size() * (kColumnW + kMargin) - kMargin, 14, "#3a7d2c", "#3a7d2c");
      s_.text(kMargin + 6, bottom_ + 19, "NVSwitch: every GPU pair " + path_word(t_.gpu_paths[0][1]), 10, " fill=\"white\"");
      bottom_ += 30;
      return;
    }
    for (size_t i = 0; i < g; ++i)
      for (size_t j = i + 1; j < g; ++j) {
        const Path& p = t_.gpu_paths[i][j];
        if (p.kind != PathKind::kNVLink) continue;
        int a = t_.gpus[i].index, b = t_.gpus[j].index;
        if (gpu_column_[a] > gpu_column_[b]) std::swap(a, b);
        const std::string title = "GPU " + std::to_string(a) + " - GPU " + std::to_string(b) + ": " + path_word(p);
        if (gpu_column_[a] == gpu_column_[b])
          s_.arc(gpu_right_[a], gpu_right_[b], 8 + std::abs(gpu_right_[b].y - gpu_right_[a].y) / 6, "#3a7d2c", 1 + p.nvlinks, title);
        else
          s_.line(gpu_right_[a], gpu_left_[b], "#3a7d2c", 1 + p.nvlinks, title);
      }
    bottom_ += 16;
  }

  // A NIC's path to the GPUs it is nearest (PIX, PXB): dashed.
  void pcie() {
    for (size_t i = 0; i < t_.gpus.size(); ++i)
      for (size_t k = 0; k < t_.nics.size(); ++k) {
        const Path& p = t_.gpu_nic_paths[i][k];
        if (p.kind != PathKind::kPIX && p.kind != PathKind::kPXB) continue;
        s_.curve(gpu_left_[t_.gpus[i].index], nic_at_[t_.nics[k].name], "#34589c",
                 "GPU " + std::to_string(t_.gpus[i].index) + " - NIC " + t_.nics[k].name + ": " + path_word(p));
      }
  }

  void placement() {
    std::string ring;
    for (int gi : p_->ring.gpus) ring += (ring.empty() ? "" : " → ") + std::to_string(gi);
    s_.text(kMargin, bottom_ + 4, std::to_string(p_->tasks.size()) + " tasks (mode " + bind_mode_word(p_->mode) + ")" +
                                      (ring.empty() ? std::string() : "; ring order: GPU " + ring), 12, " font-weight=\"bold\"");
    for (size_t k = 0; k < p_->tasks.size(); ++k) {
      const TaskPlacement& tp = p_->tasks[k];
      std::string gpus;
      for (int gi : tp.gpus) gpus += (gpus.empty() ? "GPU " : ",") + std::to_string(gi);
      const double y = bottom_ + 22 + 16 * static_cast<double>(k);
      s_.rect(kMargin, y - 10, 12, 12, colour(static_cast<int>(k)), "#333");
      s_.text(kMargin + 18, y, "task " + std::to_string(k) + ": " + (gpus.empty() ? "no GPU" : gpus) + ", CPUs " +
                                   format_cpu_list(tp.cpus) + (tp.nic.empty() ? "" : ", NIC " + tp.nic + " (" + tp.nic_path + ")"), 11);
    }
    bottom_ += 30 + 16 * static_cast<double>(p_->tasks.size());
  }

  const Topology& t_;
  const Placement* p_;
  const Owners own_;
  Svg s_;
  std::vector<int> columns_;
  double top_ = 40, devices_y_ = 0, column_h_ = 0, bottom_ = 0;
  std::map<int, Pos> gpu_left_, gpu_right_;  // the middle of each GPU box's left and right edges
  std::map<int, size_t> gpu_column_;
  std::map<std::string, Pos> nic_at_;         // the middle of each NIC box's left edge
};

}  // namespace

std::string emit_svg(const Topology& t, const Placement* placement) { return Picture(t, placement).draw(); }

}  // namespace loom::topo
