// propose.cpp — random search and Bayesian optimisation proposals (propose.hpp).
#include "propose.hpp"

#include <nlopt.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gp.hpp"

namespace loom::sweep {
namespace {

const double kXi = 0.01;  // exploration margin, in standardised units

bool near_any(const std::vector<double>& u, const std::vector<std::vector<double>>& pts) {
  for (const auto& p : pts) {
    double d = 0;
    for (size_t i = 0; i < u.size(); ++i) d = std::max(d, std::abs(u[i] - p[i]));
    if (d < 1e-6) return true;
  }
  return false;
}

struct EiObjective {
  const GaussianProcess* gp;
  double best;
};

double ei_objective(unsigned n, const double* x, double* grad, void* data) {
  const auto* o = static_cast<const EiObjective*>(data);
  const Eigen::Map<const Eigen::VectorXd> xv(x, n);
  double mean = 0, var = 0, d_mean = 0, d_sd = 0;
  Eigen::VectorXd dm, dv;
  o->gp->predict(xv, mean, var, grad ? &dm : nullptr, grad ? &dv : nullptr);
  const double ei = expected_improvement(mean, var, o->best, kXi, &d_mean, &d_sd);
  if (grad) {
    const double sd = std::sqrt(var);
    const Eigen::VectorXd g = d_mean * dm + d_sd * dv / (2 * sd);
    for (unsigned i = 0; i < n; ++i) grad[i] = g(i);
  }
  return ei;
}

}  // namespace

double expected_improvement(double mean, double var, double best, double xi, double* d_mean, double* d_sd) {
  const double sd = std::sqrt(std::max(var, 1e-12));
  const double imp = best - mean - xi;
  const double z = imp / sd;
  const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI);
  if (d_mean) *d_mean = -cdf;
  if (d_sd) *d_sd = pdf;
  return imp * cdf + sd * pdf;
}

Proposer::Proposer(const Space& space, bool bayes, int init_trials, unsigned long seed)
    : space_(space), bayes_(bayes), init_(static_cast<size_t>(init_trials)), rng_(seed) {}

std::vector<double> Proposer::random_point() {
  std::vector<double> u(space_.dims());
  for (auto& x : u) x = std::uniform_real_distribution<double>(0, 1)(rng_);
  return space_.snap(u);
}

std::vector<std::vector<double>> Proposer::propose(const History& h, size_t count) {
  std::vector<std::vector<double>> out;
  // The first init_ trials (done or pending) are random, for both methods, from the same seed.
  while (out.size() < count && (!bayes_ || h.done.size() + h.pending.size() + out.size() < init_ || h.done.size() < 2))
    out.push_back(random_point());
  if (out.size() == count) return out;
  History with_out = h;
  with_out.pending.insert(with_out.pending.end(), out.begin(), out.end());
  auto more = propose_bayes(with_out, count - out.size());
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

std::vector<std::vector<double>> Proposer::propose_bayes(const History& h, size_t count) {
  const size_t d = space_.dims();
  std::vector<std::vector<double>> X = h.done;
  std::vector<double> y = h.value;
  GaussianProcess gp;
  auto fit = [&](bool hyper) {
    Eigen::MatrixXd Xm(X.size(), d);
    for (size_t i = 0; i < X.size(); ++i) Xm.row(i) = Eigen::Map<const Eigen::VectorXd>(X[i].data(), d);
    gp.fit(Xm, Eigen::Map<const Eigen::VectorXd>(y.data(), y.size()), hyper, rng_);
  };
  fit(true);  // hyperparameters from the real results only
  const double liar = *std::min_element(h.value.begin(), h.value.end());
  std::vector<std::vector<double>> taken = h.done;
  for (const auto& p : h.pending) X.push_back(p), y.push_back(liar), taken.push_back(p);
  if (!h.pending.empty()) fit(false);

  std::vector<std::vector<double>> out;
  nlopt::opt opt(nlopt::LD_LBFGS, static_cast<unsigned>(d));
  opt.set_lower_bounds(std::vector<double>(d, 0.0));
  opt.set_upper_bounds(std::vector<double>(d, 1.0));
  opt.set_maxeval(200);
  opt.set_ftol_rel(1e-8);
  while (out.size() < count) {
    EiObjective obj{&gp, gp.standardise(liar)};
    opt.set_max_objective(ei_objective, &obj);
    // Starts: the best of many random points, plus a few random ones.
    const size_t n_cand = 500 * d + 500;
    std::vector<std::pair<double, std::vector<double>>> cand;
    for (size_t i = 0; i < n_cand; ++i) {
      std::vector<double> u(d);
      for (auto& x : u) x = std::uniform_real_distribution<double>(0, 1)(rng_);
      cand.emplace_back(ei_objective(static_cast<unsigned>(d), u.data(), nullptr, &obj), u);
    }
    std::partial_sort(cand.begin(), cand.begin() + 5, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
    std::vector<double> best_u;
    double best_ei = -1;
    for (size_t s = 0; s < 8; ++s) {
      std::vector<double> u = cand[s < 5 ? s : 5 + (rng_() % (cand.size() - 5))].second;
      double ei = 0;
      try {
        opt.optimize(u, ei);
      } catch (const std::exception&) {
        ei = ei_objective(static_cast<unsigned>(d), u.data(), nullptr, &obj);
      }
      std::vector<double> snapped = space_.snap(u);
      if (near_any(snapped, taken) || near_any(snapped, out)) continue;
      ei = ei_objective(static_cast<unsigned>(d), snapped.data(), nullptr, &obj);
      if (ei > best_ei) best_ei = ei, best_u = snapped;
    }
    if (best_u.empty()) best_u = random_point();  // every optimum is taken (a small discrete space)
    out.push_back(best_u);
    taken.push_back(best_u), X.push_back(best_u), y.push_back(liar);
    fit(false);
  }
  return out;
}

}  // namespace loom::sweep
