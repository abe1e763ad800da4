// emit_svg.cpp — emit_svg.hpp: one column per NUMA node (grouped by socket), its cores as a
// grid, its GPUs and NICs below; GPUs without a NUMA node in a last column. NVLinks are arcs
// under the GPUs, as thick as their link count (an NVSwitch, one bar); a NIC's PIX/PXB path to
// a GPU a dashed line; a placement colours each task's cores, GPU and NIC and numbers the ring.
#include "emit_svg.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

namespace loom::topo {
namespace {

const char* const kTaskColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr int kCell = 16, kCols = 8, kColumnW = kCols * kCell + 24, kBoxH = 38, kMargin = 36;

std::string esc(const std::string& s) {  // names come from files: never markup
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
    }
  }
  return o;
}

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

std::string colour(int task) { return task < 0 ? "#ffffff" : kTaskColours[task % 8]; }

}  // namespace

std::string emit_svg(const Topology& t, const Placement* placement) {
  const Owners own = owners_of(placement);
  Svg s;
  std::vector<int> columns;  // NUMA positions, by socket then id; -1: the devices without one
  for (size_t i = 0; i < t.numa_nodes.size(); ++i) columns.push_back(static_cast<int>(i));
  std::stable_sort(columns.begin(), columns.end(), [&](int a, int b) { return t.numa_nodes[a].socket < t.numa_nodes[b].socket; });
  const bool loose = std::any_of(t.gpus.begin(), t.gpus.end(), [](const Gpu& g) { return g.numa < 0; }) ||
                     std::any_of(t.nics.begin(), t.nics.end(), [](const Nic& n) { return n.numa < 0; });
  if (loose || columns.empty()) columns.push_back(-1);
  size_t max_rows = 1, max_devices = 1;
  for (int c : columns) {
    if (c >= 0) max_rows = std::max(max_rows, (t.numa_nodes[c].cores.size() + kCols - 1) / kCols);
    const int numa = c >= 0 ? t.numa_nodes[c].id : -1;
    size_t n = 0;
    for (const auto& g : t.gpus) n += g.numa == numa;
    for (const auto& nic : t.nics) n += nic.numa == numa;
    max_devices = std::max(max_devices, n);
  }
  const double top = 40, cores_h = max_rows * kCell, devices_y = top + 40 + cores_h + 12;
  const double column_h = devices_y - top + max_devices * (kBoxH + 6) + 8;
  std::map<int, Pos> gpu_at;  // GPU index -> the middle of its box's bottom edge
  std::map<std::string, Pos> nic_at;
  std::map<int, Pos> gpu_side, gpu_right;  // the middle of its box's left and right edges
  std::map<int, size_t> gpu_column;
  for (size_t k = 0; k < columns.size(); ++k) {
    const double x = kMargin + k * (kColumnW + kMargin);
    const int c = columns[k];
    const int numa = c >= 0 ? t.numa_nodes[c].id : -1;
    s.rect(x, top, kColumnW, column_h, c >= 0 ? "#f4f6f8" : "#fbfbfb", "#8a96a3");
    if (c >= 0) {
      const NumaNode& n = t.numa_nodes[c];
      s.text(x + 8, top + 16, "Socket " + std::to_string(n.socket) + " · NUMA " + std::to_string(n.id), 12, " font-weight=\"bold\"");
      s.text(x + 8, top + 31, std::to_string(n.cores.size()) + " cores" + (n.memory_mb ? " · " + num(n.memory_mb / 1024.0) + " GB" : ""), 10);
      for (size_t i = 0; i < n.cores.size(); ++i) {
        const Core& core = n.cores[i];
        int task = -1;
        for (int pu : core.pus)
          if (own.cpu.count(pu)) task = own.cpu.at(pu);
        const double cx = x + 12 + (i % kCols) * kCell, cy = top + 40 + (i / kCols) * kCell;
        s.rect(cx, cy, kCell - 2, kCell - 2, colour(task), "#5b6770", 0.5);
        s.text(cx + 2, cy + 10, std::to_string(core.logical), 7, task >= 0 ? " fill=\"white\"" : " fill=\"#5b6770\"");
      }
    } else {
      s.text(x + 8, top + 16, "no NUMA node", 12, " font-weight=\"bold\"");
    }
    double y = devices_y;
    for (const auto& g : t.gpus) {
      if (g.numa != numa) continue;
      const int task = own.gpu.count(g.index) ? own.gpu.at(g.index) : -1;
      s.rect(x + 8, y, kColumnW - 16, kBoxH, task >= 0 ? colour(task) : "#e3f1e0", "#3a7d2c", task >= 0 ? 2.5 : 1);
      const std::string fg = task >= 0 ? " fill=\"white\"" : "";
      s.text(x + 14, y + 15, "GPU " + std::to_string(g.index) + " " + g.cls + (g.memory_mb ? " " + num(g.memory_mb / 1024.0) + " GB" : ""),
             11, " font-weight=\"bold\"" + fg);
      s.text(x + 14, y + 30, task >= 0 ? "task " + std::to_string(task) : g.pci, 9, fg);
      gpu_at[g.index] = {x + kColumnW / 2.0, y + kBoxH};
      gpu_side[g.index] = {x + 8, y + kBoxH / 2.0};
      gpu_right[g.index] = {x + kColumnW - 8, y + kBoxH / 2.0};
      gpu_column[g.index] = k;
      y += kBoxH + 6;
    }
    for (const auto& nic : t.nics) {
      if (nic.numa != numa) continue;
      const int task = own.nic.count(nic.name) ? own.nic.at(nic.name) : -1;
      s.rect(x + 8, y, kColumnW - 16, kBoxH - 10, "#e8eefb", task >= 0 ? colour(task) : "#34589c", task >= 0 ? 2.5 : 1);
      s.text(x + 14, y + 18, "NIC " + nic.name + (task >= 0 ? "  · task " + std::to_string(task) : ""), 11);
      nic_at[nic.name] = {x + 8, y + (kBoxH - 10) / 2.0};
      y += kBoxH + 6;
    }
  }
  // NVLinks: arcs below the columns (one bar for an NVSwitch), as thick as their links.
  double bottom = top + column_h + 10;
  const size_t g = t.gpus.size();
  if (t.is_nvswitch() && g > 1) {
    s.rect(kMargin, bottom + 8, columns.size() * (kColumnW + kMargin) - kMargin, 14, "#3a7d2c", "#3a7d2c");
    s.text(kMargin + 6, bottom + 19, "NVSwitch: every GPU pair " + path_word(t.gpu_paths[0][1]), 10, " fill=\"white\"");
    bottom += 30;
  } else {  // beside the boxes: arcs on the right within a column, lines across the gap between columns
    for (size_t i = 0; i < g; ++i)
      for (size_t j = i + 1; j < g; ++j) {
        const Path& p = t.gpu_paths[i][j];
        if (p.kind != PathKind::kNVLink) continue;
        int a = t.gpus[i].index, b = t.gpus[j].index;
        if (gpu_column[a] > gpu_column[b]) std::swap(a, b);
        const std::string title = "GPU " + std::to_string(a) + " - GPU " + std::to_string(b) + ": " + path_word(p);
        if (gpu_column[a] == gpu_column[b])
          s.arc(gpu_right[a], gpu_right[b], 8 + std::abs(gpu_right[b].y - gpu_right[a].y) / 6, "#3a7d2c", 1 + p.nvlinks, title);
        else
          s.line(gpu_right[a], gpu_side[b], "#3a7d2c", 1 + p.nvlinks, title);
      }
    bottom += 16;
  }
  // A NIC's path to the GPUs it is nearest (PIX, PXB): dashed.
  for (size_t i = 0; i < g; ++i)
    for (size_t k = 0; k < t.nics.size(); ++k) {
      const Path& p = t.gpu_nic_paths[i][k];
      if (p.kind != PathKind::kPIX && p.kind != PathKind::kPXB) continue;
      s.curve(gpu_side[t.gpus[i].index], nic_at[t.nics[k].name], "#34589c",
              "GPU " + std::to_string(t.gpus[i].index) + " - NIC " + t.nics[k].name + ": " + path_word(p));
    }
  std::string title = "loom-topo: " + (t.host.empty() ? std::string("node") : t.host);
  if (placement) {
    std::string ring;
    for (int gi : placement->ring.gpus) ring += (ring.empty() ? "" : " → ") + std::to_string(gi);
    s.text(kMargin, bottom + 4, std::to_string(placement->tasks.size()) + " tasks (mode " + bind_mode_word(placement->mode) + ")" +
                                    (ring.empty() ? std::string() : "; ring order: GPU " + ring), 12, " font-weight=\"bold\"");
    for (size_t k = 0; k < placement->tasks.size(); ++k) {
      const TaskPlacement& tp = placement->tasks[k];
      std::string gpus;
      for (int gi : tp.gpus) gpus += (gpus.empty() ? "GPU " : ",") + std::to_string(gi);
      const double y = bottom + 22 + 16 * static_cast<double>(k);
      s.rect(kMargin, y - 10, 12, 12, colour(static_cast<int>(k)), "#333");
      s.text(kMargin + 18, y, "task " + std::to_string(k) + ": " + (gpus.empty() ? "no GPU" : gpus) + ", CPUs " +
                                  format_cpu_list(tp.cpus) + (tp.nic.empty() ? "" : ", NIC " + tp.nic + " (" + tp.nic_path + ")"), 11);
    }
    bottom += 30 + 16 * static_cast<double>(placement->tasks.size());
  }
  s.text(kMargin, 24, title + " · " + std::to_string(t.total_cpus()) + " CPUs, " + std::to_string(g) + " GPUs, " +
                          std::to_string(t.nics.size()) + " NICs", 14, " font-weight=\"bold\"");
  return s.str(std::max(760.0, kMargin + columns.size() * (kColumnW + kMargin) + 0.0), bottom + 10, title);
}

}  // namespace loom::topo
