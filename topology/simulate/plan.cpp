// plan.cpp — `loom-topo plan --cluster CLUSTER.yaml (--params N | --n-layer L --n-embd E
// [--n-head H] [--context T] [--vocab V]) --global-batch B [--mfu F] [--format text|json]`:
// before a job starts, whether a model's training fits a mix of GPUs, per ZeRO level and
// recompute/offload choice, the batch shares Loom's balancer would give each class, and the
// step time the simulator predicts. The formulas and constants are in doc/plan.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "simulate.hpp"

namespace loom::topo::sim {
namespace {

using json = nlohmann::ordered_json;

constexpr double kPcieGBps = 12;                // host <-> GPU, one direction (PCIe 4 x16 sustained)
constexpr double kHostGBps = 20;                // the host's memory bandwidth one rank's CPU Adam gets
constexpr double kHostAdamBytes = 28;           // bytes an Adam step touches per parameter on the host

struct ClassInfo {
  std::string name;
  int gpus = 0;
  double capacity = 0, weight = 0;
};

// The GPU classes of the cluster, by class and memory ("a100", or "a100-80gb" beside "a100-40gb").
std::vector<ClassInfo> classes_of(const Cluster& c) {
  std::map<std::string, std::set<double>> sizes;
  for (const auto& t : c.types) sizes[t.topo.gpus.front().cls].insert(t.gpu_memory_gb);
  std::vector<ClassInfo> out;
  for (int n = 0; n < c.nodes(); ++n) {
    const NodeType& t = c.type(n);
    const std::string cls = t.topo.gpus.front().cls;
    if (!(t.gpu_memory_gb > 0))
      throw Error("GPU class " + cls + " (shape " + t.shape + ") has no memory given: add gpu_memory_gb to its nodes entry");
    const std::string name = sizes[cls].size() > 1 ? cls + "-" + std::to_string(static_cast<int>(t.gpu_memory_gb)) + "gb" : cls;
    auto it = std::find_if(out.begin(), out.end(), [&](const ClassInfo& k) { return k.name == name; });
    if (it == out.end()) it = out.insert(out.end(), {name, 0, t.gpu_memory_gb * 1073741824.0, device_weight(cls)});
    it->gpus += static_cast<int>(t.topo.gpus.size());
  }
  return out;
}

Allocation all_gpus(const Cluster& c) {
  Allocation a;
  for (int n = 0; n < c.nodes(); ++n) {
    NodeGpus ng{n, {}};
    for (const auto& g : c.topo(n).gpus) ng.gpus.push_back(g.index);
    a.push_back(ng);
  }
  return a;
}

// Activation bytes of one sequence in 16-bit training (Korthikanti et al. 2022, no tensor
// parallelism: s h (34 + 5 a s / h) a layer), plus the fp32 logits and their gradient. With
// recompute each layer keeps its input (2 s h) and one layer's activations live at a time.
// --precision fp32 keeps every activation in 4 bytes: twice the 16-bit figure.
double activation_per_sample(const PlanModel& m, bool recompute) {
  if (m.layers == 0) return 0;
  const double s = m.context, h = m.embd, a = m.heads, L = m.layers, V = m.vocab, x = m.fp32 ? 2 : 1;
  const double layer = x * s * h * (34 + 5 * a * s / h), logits = 8 * s * V;
  return (recompute ? L * x * 2 * s * h + layer : L * layer) + logits;
}

}  // namespace

PlanOption plan_option(const Cluster& c, const PlanModel& m, const Model& net, int zero, bool recompute, bool offload, int scale) {
  const std::vector<ClassInfo> classes = classes_of(c);
  double ranks = 0, speed = 0;
  for (const auto& k : classes) ranks += k.gpus * scale, speed += k.gpus * scale * k.weight;
  const double psi = m.params;
  PlanOption o;
  o.zero = zero, o.recompute = recompute, o.offload = offload, o.fits = true;
  // Mixed-precision Adam (ZeRO's accounting): 16-bit parameters and gradients, fp32 master
  // weights and two moments (12 bytes a parameter); each ZeRO level shards one more of them.
  // fp32: 4-byte parameters and gradients, the parameters their own masters (8 bytes of moments).
  const double word = m.fp32 ? 4 : 2, state = m.fp32 ? 8 : 12;
  const double param = zero >= 3 ? word * psi / ranks : word * psi;
  const double grad = zero >= 2 ? word * psi / ranks : word * psi;
  const double optim = zero >= 1 ? state * psi / ranks : state * psi;
  const double gathered = zero >= 3 && m.layers ? 2 * word * 12.0 * m.embd * m.embd : 0;  // this layer's and the prefetched one's
  const double reserve = m.reserve_gb * 1073741824.0;
  const double per_sample = activation_per_sample(m, recompute);
  double slowest = 0;
  const double flops = (recompute ? 8 : 6) * psi * static_cast<double>(m.global_batch) * m.context;
  for (const auto& k : classes) {
    PlanClass pc;
    pc.cls = k.name, pc.gpus = k.gpus * scale, pc.capacity_bytes = k.capacity;
    pc.share = k.weight / speed;  // of the global batch, per GPU of this class
    const double samples = std::ceil(pc.share * m.global_batch);
    pc.param_bytes = param + gathered, pc.grad_bytes = grad, pc.optimizer_bytes = offload ? 0 : optim;
    pc.host_bytes = offload ? optim : 0;
    pc.activation_bytes = samples * per_sample;
    pc.memory_bytes = pc.param_bytes + pc.grad_bytes + pc.optimizer_bytes + pc.activation_bytes + reserve;
    pc.fits = pc.memory_bytes <= pc.capacity_bytes;
    o.fits = o.fits && pc.fits;
    slowest = std::max(slowest, flops / ranks / (k.weight * 1e12 * m.mfu));  // equal shares wait for it
    o.classes.push_back(pc);
  }
  o.compute_s = flops / (speed * 1e12 * m.mfu);
  // ZeRO-0/1/2 move one allreduce of the 16-bit gradients a step (2 and 1/2 as reduce-scatter
  // plus all-gather); ZeRO-3 all-gathers the parameters twice and reduce-scatters once: 1.5x.
  const double ar = ranks > 1 ? allreduce(c, all_gpus(c), word * psi, net).allreduce_s : 0;
  o.comm_s = zero >= 3 ? 1.5 * ar : ar;
  o.offload_s = offload ? 2 * word * psi / ranks / (kPcieGBps * 1e9) + kHostAdamBytes * psi / ranks / (kHostGBps * 1e9) : 0;
  o.step_s = o.compute_s + o.comm_s + o.offload_s;
  o.step_s_equal = slowest + o.comm_s + o.offload_s;
  return o;
}

UnevenParts uneven_parts(const Cluster& c, const PlanModel& m, const Model& net, bool recompute, bool offload) {
  const PlanOption even = plan_option(c, m, net, 3, recompute, offload);
  double ranks = 0;
  for (const auto& k : even.classes) ranks += k.gpus;
  const double word = m.fp32 ? 4 : 2, state = m.fp32 ? 8 : 12;
  const double sharded = (2 * word + (offload ? 0 : state)) * m.params;  // over every GPU
  std::vector<double> room;  // per GPU of each class: its capacity less all but its part
  double total_room = 0;
  bool positive = true;
  for (const auto& k : even.classes) {
    room.push_back(k.capacity_bytes - (k.memory_bytes - sharded / ranks));
    positive = positive && room.back() > 0;
    total_room += k.gpus * std::max(0.0, room.back());
  }
  UnevenParts u;
  u.fits = positive && total_room >= sharded;
  for (size_t i = 0; i < even.classes.size(); ++i) {
    const double part = positive ? sharded * room[i] / total_room : sharded / ranks;
    u.part_bytes.push_back(part);
    u.memory_bytes.push_back(even.classes[i].memory_bytes - sharded / ranks + part);
  }
  return u;
}

std::vector<PlanOption> plan(const Cluster& c, const PlanModel& m, const Model& net) {
  std::vector<PlanOption> out;
  for (int zero = 0; zero <= 3; ++zero)
    for (bool recompute : {false, true})
      for (bool offload : {false, true}) out.push_back(plan_option(c, m, net, zero, recompute, offload));
  return out;
}

namespace {

double number(const std::string& k, const std::string& v, double lo, double hi) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used != v.size() || !std::isfinite(x) || x < lo || x > hi)
    throw Usage{k + " must be a number from " + json(lo).dump() + " to " + json(hi).dump() + ", not '" + v + "'"};
  return x;
}

struct PlanArgs {
  std::string cluster, format = "text";
  PlanModel m;
};

PlanArgs parse(const std::vector<std::string>& args) {
  PlanArgs a;
  bool context = false, vocab = false;
  for (const auto& [k, v] : options_of(args)) {
    if (k == "--cluster") a.cluster = v;
    else if (k == "--format") a.format = v;
    else if (k == "--params") a.m.params = number(k, v, 1, 1e15);
    else if (k == "--n-layer") a.m.layers = static_cast<int>(number(k, v, 1, 10000));
    else if (k == "--n-embd") a.m.embd = static_cast<int>(number(k, v, 1, 1e6));
    else if (k == "--n-head") a.m.heads = static_cast<int>(number(k, v, 1, 1e5));
    else if (k == "--context") a.m.context = static_cast<int>(number(k, v, 1, 1e7)), context = true;
    else if (k == "--vocab") a.m.vocab = static_cast<int>(number(k, v, 1, 1e8)), vocab = true;
    else if (k == "--global-batch") a.m.global_batch = static_cast<int>(number(k, v, 1, 1e8));
    else if (k == "--mfu") a.m.mfu = number(k, v, 1e-3, 1);
    else if (k == "--reserve-gb") a.m.reserve_gb = number(k, v, 0, 1024);
    else if (k == "--precision") {
      if (v != "mixed" && v != "fp32") throw Usage{"--precision must be mixed or fp32, not '" + v + "'"};
      a.m.fp32 = v == "fp32";
    }
    else throw Usage{"unknown option '" + k + "' of 'plan'"};
  }
  if (a.cluster.empty() || a.m.global_batch == 0) throw Usage{"plan needs --cluster CLUSTER.yaml and --global-batch B"};
  if ((a.m.layers == 0) != (a.m.embd == 0)) throw Usage{"give --n-layer and --n-embd together"};
  if (a.m.layers == 0 && a.m.params == 0) throw Usage{"plan needs the model: --params N, or --n-layer L --n-embd E"};
  if (a.m.layers == 0 && (context || vocab || a.m.heads)) throw Usage{"--n-head, --context and --vocab describe --n-layer/--n-embd's model"};
  if (a.m.layers && !a.m.heads) a.m.heads = std::max(1, a.m.embd / 128);
  if (a.m.params == 0)  // GPT-2's count: 12 L h^2 in the blocks, the embeddings (vocab + positions) x h
    a.m.params = 12.0 * a.m.layers * a.m.embd * a.m.embd + (static_cast<double>(a.m.vocab) + a.m.context) * a.m.embd;
  if (a.format != "text" && a.format != "json") throw Usage{"--format must be text or json"};
  return a;
}

double gb(double bytes) { return bytes / 1073741824.0; }

std::string option_name(const PlanOption& o) {
  std::string s = "ZeRO-" + std::to_string(o.zero);
  if (o.recompute && o.offload) return s + " with recompute and optimizer offload";
  if (o.recompute) return s + " with recompute";
  if (o.offload) return s + " with optimizer offload";
  return s;
}

json option_json(const PlanOption& o) {
  json cls = json::object();
  for (const auto& k : o.classes)
    cls[k.cls] = {{"gpus", k.gpus}, {"memory_bytes", std::llround(k.memory_bytes)}, {"capacity_bytes", std::llround(k.capacity_bytes)},
                  {"fits", k.fits}, {"share", k.share}, {"param_bytes", std::llround(k.param_bytes)},
                  {"grad_bytes", std::llround(k.grad_bytes)}, {"optimizer_bytes", std::llround(k.optimizer_bytes)},
                  {"activation_bytes", std::llround(k.activation_bytes)}, {"host_bytes", std::llround(k.host_bytes)}};
  return {{"zero", o.zero}, {"recompute", o.recompute}, {"offload", o.offload}, {"fits", o.fits}, {"step_s", o.step_s},
          {"step_s_equal_shares", o.step_s_equal}, {"compute_s", o.compute_s}, {"comm_s", o.comm_s}, {"offload_s", o.offload_s},
          {"classes", cls}};
}

// When nothing fits: the roomiest option, what it needs where it does not fit, and how many
// times these GPUs would hold it.
std::string needed(const Cluster& c, const PlanModel& m, const Model& net, const PlanOption& best) {
  std::string s = "fits nowhere: even " + option_name(best) + " needs";
  for (const auto& k : best.classes)
    if (!k.fits) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " %.1f GB on a %s (has %.0f)", gb(k.memory_bytes), k.cls.c_str(), gb(k.capacity_bytes));
      s += buf;
    }
  for (int scale = 2; scale <= 1024; scale *= 2)
    if (plan_option(c, m, net, 3, true, true, scale).fits)
      return s + "; it would fit on " + std::to_string(scale) + "x these GPUs (sharding the model states " + std::to_string(scale) +
             " times finer)";
  return s + "; not even on 1024x these GPUs: the activations of one sequence do not fit (shorten --context)";
}

// What ZeRO-3's uneven parts allow that even ones do not: for each recompute/offload choice,
// whether each fits; for the fastest choice that fits with uneven parts (else with recompute and
// no offload), the largest global batch and the largest model (more layers of the same width;
// --params alone: more parameters) that fit either way.
struct Uneven {
  bool recompute = true, offload = false;
  UnevenParts parts;
  std::vector<json> choices;
  double batch_even = 0, batch_uneven = 0, params_even = 0, params_uneven = 0;
  int layers_even = 0, layers_uneven = 0;
};

// The largest x in [1, hi] for which fits(x) holds (fits holds up to some x, then never), 0 when
// not even at 1: a whole number, or within 0.01% when not `whole`.
template <class F>
double largest(double hi, F fits, bool whole) {
  if (!fits(1.0)) return 0;
  if (fits(hi)) return hi;
  double lo = 1;  // fits(lo), not fits(hi)
  while (whole ? hi - lo > 1 : hi > lo * 1.0001) {
    const double mid = whole ? std::floor((lo + hi) / 2) : std::sqrt(lo * hi);
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

PlanModel with_layers(PlanModel m, int layers) {  // the same width, the other parameters kept
  m.params += 12.0 * m.embd * m.embd * (layers - m.layers);
  m.layers = layers;
  return m;
}

Uneven uneven_summary(const Cluster& c, const PlanModel& m, const Model& net) {
  Uneven u;
  double best = 0;
  for (bool recompute : {false, true})
    for (bool offload : {false, true}) {
      const PlanOption even = plan_option(c, m, net, 3, recompute, offload);
      const UnevenParts parts = uneven_parts(c, m, net, recompute, offload);
      u.choices.push_back({{"recompute", recompute}, {"offload", offload}, {"fits_even", even.fits}, {"fits_uneven", parts.fits}});
      if (parts.fits && (best == 0 || even.step_s < best)) best = even.step_s, u.recompute = recompute, u.offload = offload;
    }
  u.parts = uneven_parts(c, m, net, u.recompute, u.offload);
  auto fits = [&](const PlanModel& x, bool uneven) {
    return uneven ? uneven_parts(c, x, net, u.recompute, u.offload).fits : plan_option(c, x, net, 3, u.recompute, u.offload).fits;
  };
  for (bool uneven : {false, true}) {
    if (m.layers) {  // --params alone counts no activations: any batch fits as well as one
      PlanModel x = m;
      (uneven ? u.batch_uneven : u.batch_even) =
          largest(1e7, [&](double b) { x.global_batch = static_cast<int>(b); return fits(x, uneven); }, true);
      const int layers = static_cast<int>(largest(1e5, [&](double l) { return fits(with_layers(m, static_cast<int>(l)), uneven); }, true));
      (uneven ? u.layers_uneven : u.layers_even) = layers;
      (uneven ? u.params_uneven : u.params_even) = layers ? with_layers(m, layers).params : 0;
    } else {
      PlanModel y = m;
      (uneven ? u.params_uneven : u.params_even) = largest(1e15, [&](double p) { y.params = p; return fits(y, uneven); }, false);
    }
  }
  return u;
}

json uneven_json(const Uneven& u, const std::vector<PlanClass>& classes) {
  json parts = json::object();
  for (size_t i = 0; i < classes.size(); ++i)
    parts[classes[i].cls] = {{"part_bytes", std::llround(u.parts.part_bytes[i])}, {"memory_bytes", std::llround(u.parts.memory_bytes[i])}};
  return {{"choices", u.choices}, {"recompute", u.recompute}, {"offload", u.offload}, {"fits", u.parts.fits}, {"classes", parts},
          {"largest_global_batch", u.layers_even || u.layers_uneven || u.batch_even
                                       ? json{{"even", u.batch_even}, {"uneven", u.batch_uneven}} : json(nullptr)},
          {"largest_params", {{"even", u.params_even}, {"uneven", u.params_uneven}}},
          {"largest_layers", {{"even", u.layers_even}, {"uneven", u.layers_uneven}}}};
}

void print_uneven(const Uneven& u, const std::vector<PlanClass>& classes) {
  std::string name = std::string("ZeRO-3") + (u.recompute ? " with recompute" : "") + (u.offload ? " and optimizer offload" : "");
  std::printf("uneven parts (%s, each GPU's part of the state by the memory its batch share leaves):", name.c_str());
  for (size_t i = 0; i < classes.size(); ++i)
    std::printf(" %s %.1f GB (%.1f GB in all)", classes[i].cls.c_str(), gb(u.parts.part_bytes[i]), gb(u.parts.memory_bytes[i]));
  std::printf("%s\n", u.parts.fits ? "" : ": does not fit");
  for (const auto& x : u.choices)
    if (x["fits_uneven"] != x["fits_even"])
      std::printf("  ZeRO-3%s%s fits only with %s parts\n", x["recompute"].get<bool>() ? " with recompute" : "",
                  x["offload"].get<bool>() ? " and optimizer offload" : "", x["fits_uneven"].get<bool>() ? "uneven" : "even");
  if (u.batch_even || u.batch_uneven) std::printf("  largest global batch: even parts %.0f, uneven %.0f;", u.batch_even, u.batch_uneven);
  std::printf("%slargest model: even parts %.3g parameters", u.batch_even || u.batch_uneven ? " " : "  ", u.params_even);
  if (u.layers_even || u.layers_uneven) std::printf(" (%d layers)", u.layers_even);
  std::printf(", uneven %.3g", u.params_uneven);
  if (u.layers_even || u.layers_uneven) std::printf(" (%d layers)", u.layers_uneven);
  std::printf("\n");
}

}  // namespace

int plan_main(const std::vector<std::string>& args) {
  return run_command([&] {
    const PlanArgs a = parse(args);
    const Cluster c = load_cluster(a.cluster);
    const Model net;
    const std::vector<PlanOption> options = plan(c, a.m, net);
    const PlanOption* best = nullptr;
    for (const auto& o : options)
      if (o.fits && (!best || o.step_s < best->step_s)) best = &o;
    if (a.format == "json") {
      json out = {{"params", a.m.params}, {"global_batch", a.m.global_batch}, {"options", json::array()}};
      for (const auto& o : options) out["options"].push_back(option_json(o));
      out["best"] = best ? json(option_name(*best)) : json(nullptr);
      if (!best) out["needed"] = needed(c, a.m, net, options.back());
      out["uneven"] = uneven_json(uneven_summary(c, a.m, net), options.front().classes);
      std::printf("%s\n", out.dump().c_str());
      return 0;
    }
    std::printf("plan: %.3g parameters", a.m.params);
    if (a.m.layers) std::printf(" (%d layers, %d wide, %d heads, context %d)", a.m.layers, a.m.embd, a.m.heads, a.m.context);
    std::printf(", global batch %d; GPUs:", a.m.global_batch);
    for (const auto& k : options.front().classes) std::printf(" %d %s (%.0f GB)", k.gpus, k.cls.c_str(), gb(k.capacity_bytes));
    std::printf("\n%-45s %5s %9s %9s", "option", "fits", "step s", "equal s");
    for (const auto& k : options.front().classes) std::printf("  %14s", (k.cls + " GB/share").c_str());
    std::printf("\n");
    for (const auto& o : options) {
      std::printf("%-45s %5s %9.3f %9.3f", option_name(o).c_str(), o.fits ? "yes" : "no", o.step_s, o.step_s_equal);
      for (const auto& k : o.classes) std::printf("  %7.1f%s/%.3f", gb(k.memory_bytes), k.fits ? " " : "!", k.share);
      std::printf("\n");
    }
    if (best)
      std::printf("best: %s, %.3f s a step (equal shares %.3f s: %.2fx)\n", option_name(*best).c_str(), best->step_s, best->step_s_equal,
                  best->step_s_equal / best->step_s);
    else
      std::printf("%s\n", needed(c, a.m, net, options.back()).c_str());
    print_uneven(uneven_summary(c, a.m, net), options.front().classes);
    return 0;
  });
}

}  // namespace loom::topo::sim
