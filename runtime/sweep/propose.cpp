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
  GaussianProcess gp;
  Eigen::MatrixXd X(h.done.size(), d);
  for (size_t i = 0; i < h.done.size(); ++i) X.row(i) = Eigen::Map<const Eigen::VectorXd>(h.done[i].data(), d);
  gp.fit(X, Eigen::Map<const Eigen::VectorXd>(h.value.data(), h.value.size()), true, rng_);
  const double best = gp.standardise(*std::min_element(h.value.begin(), h.value.end()));
  std::vector<std::vector<double>> taken = h.done, pending = h.pending, out;
  taken.insert(taken.end(), pending.begin(), pending.end());
  while (out.size() < count) {
    std::vector<double> u = pending.empty() ? next_ei(gp, best, taken) : next_qei(gp, best, pending, taken);
    taken.push_back(u), pending.push_back(u), out.push_back(u);
  }
  return out;
}

std::vector<double> Proposer::next_ei(const GaussianProcess& gp, double best, const std::vector<std::vector<double>>& taken) {
  const size_t d = space_.dims();
  EiObjective obj{&gp, best};
  auto ei = [&](const std::vector<double>& u) { return ei_objective(static_cast<unsigned>(d), u.data(), nullptr, &obj); };
  nlopt::opt opt(nlopt::LD_LBFGS, static_cast<unsigned>(d));
  opt.set_max_objective(ei_objective, &obj);
  return maximise(opt, ei, taken);
}

// The expected improvement of the batch: pending points and u, sampled jointly from the posterior
// with fixed normal draws (q-EI as BoTorch estimates it). A point beside a pending one adds little,
// since they would improve together; a point the model is unsure of adds what the batch lacks.
std::vector<double> Proposer::next_qei(const GaussianProcess& gp, double best,
                                       const std::vector<std::vector<double>>& pending,
                                       const std::vector<std::vector<double>>& taken) {
  const size_t d = space_.dims(), m = pending.size() + 1;
  const int kSamples = 256;
  Eigen::MatrixXd Z(m, kSamples);
  std::normal_distribution<double> normal;
  for (Eigen::Index i = 0; i < Z.size(); ++i) Z.data()[i] = normal(rng_);
  Eigen::MatrixXd P(m, d);
  for (size_t i = 0; i + 1 < m; ++i) P.row(i) = Eigen::Map<const Eigen::VectorXd>(pending[i].data(), d);
  auto qei = [&](const std::vector<double>& u) {
    P.row(m - 1) = Eigen::Map<const Eigen::VectorXd>(u.data(), d);
    Eigen::VectorXd mean;
    Eigen::MatrixXd cov;
    gp.joint(P, mean, cov);
    cov.diagonal().array() += 1e-9;
    Eigen::LDLT<Eigen::MatrixXd> ldlt(cov);  // semi-definite when u sits on a pending point
    const Eigen::MatrixXd L = ldlt.transpositionsP().transpose() * Eigen::MatrixXd(ldlt.matrixL()) *
                              ldlt.vectorD().cwiseMax(0).cwiseSqrt().asDiagonal();
    const Eigen::MatrixXd f = (L * Z).colwise() + mean;
    return (best - f.colwise().minCoeff().array()).max(0).mean();
  };
  nlopt::opt opt(nlopt::LN_BOBYQA, static_cast<unsigned>(d));
  opt.set_max_objective(
      [](unsigned n, const double* x, double*, void* f) {
        return (*static_cast<decltype(qei)*>(f))(std::vector<double>(x, x + n));
      },
      &qei);
  return maximise(opt, qei, taken);
}

// Starts: the best of many random points and a few random ones, each polished by `opt`; the best
// polished point that is not taken (snapped onto the space's bins).
template <typename F>
std::vector<double> Proposer::maximise(nlopt::opt& opt, F&& acquisition, const std::vector<std::vector<double>>& taken) {
  const size_t d = space_.dims();
  opt.set_lower_bounds(std::vector<double>(d, 0.0));
  opt.set_upper_bounds(std::vector<double>(d, 1.0));
  opt.set_maxeval(200);
  opt.set_ftol_rel(1e-8);
  const size_t n_cand = 500 * d + 500;
  std::vector<std::pair<double, std::vector<double>>> cand;
  for (size_t i = 0; i < n_cand; ++i) {
    std::vector<double> u(d);
    for (auto& x : u) x = std::uniform_real_distribution<double>(0, 1)(rng_);
    cand.emplace_back(acquisition(u), u);
  }
  std::partial_sort(cand.begin(), cand.begin() + 5, cand.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<double> best_u;
  double best_a = -1;
  for (size_t s = 0; s < 8; ++s) {
    std::vector<double> u = cand[s < 5 ? s : 5 + (rng_() % (cand.size() - 5))].second;
    double a = 0;
    try {
      opt.optimize(u, a);
    } catch (const std::exception&) {  // a stopped run keeps its last point
    }
    std::vector<double> snapped = space_.snap(u);
    if (near_any(snapped, taken)) continue;
    a = acquisition(snapped);
    if (a > best_a) best_a = a, best_u = snapped;
  }
  return best_u.empty() ? random_point() : best_u;  // every optimum is taken (a small discrete space)
}

}  // namespace loom::sweep
