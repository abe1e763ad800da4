// gp.cpp — the Gaussian process of gp.hpp.
#include "gp.hpp"

#include <nlopt.hpp>

#include <cmath>
#include <limits>
#include <vector>

namespace loom::sweep {
namespace {

const double kSqrt5 = std::sqrt(5.0);
// Bounds of the hyperparameters on the log scale: length scales, signal and noise variance.
const double kLogLenLo = std::log(0.01), kLogLenHi = std::log(20.0);
const double kLogSfLo = std::log(0.05), kLogSfHi = std::log(20.0);
const double kLogSnLo = std::log(1e-6), kLogSnHi = std::log(0.5);

double yeo_johnson(double z, double lambda) {
  if (z >= 0) return std::abs(lambda) < 1e-9 ? std::log1p(z) : (std::pow(1 + z, lambda) - 1) / lambda;
  return std::abs(lambda - 2) < 1e-9 ? -std::log1p(-z) : -(std::pow(1 - z, 2 - lambda) - 1) / (2 - lambda);
}

double mean_and_std(const Eigen::VectorXd& v, double& mean) {
  mean = v.mean();
  const double var = v.size() > 1 ? (v.array() - mean).square().sum() / static_cast<double>(v.size() - 1) : 0;
  return var > 1e-300 ? std::sqrt(var) : 1;
}

// A Gamma(3, 6) prior on each length scale (mode 1/3 of the unit cube; BoTorch's SingleTaskGP
// before 0.12), as a density of log l. With the likelihood alone, a dozen points chose some
// scales of 0.02 and others of 20: a model that is sure of nothing between its points, whose
// largest variance, and so its proposals, went to the corners.
double log_length_prior(const double* log_len, unsigned d) {
  double lp = 0;
  for (unsigned i = 0; i < d; ++i) lp += 3 * log_len[i] - 6 * std::exp(log_len[i]);
  return lp;
}

}  // namespace

double GaussianProcess::warp(double z) const { return yeo_johnson(z, lambda_); }

void GaussianProcess::fit_warp(const Eigen::VectorXd& z) {
  // The profile log-likelihood of a normal fit to the transformed targets, on a grid of lambda.
  double best = -std::numeric_limits<double>::infinity();
  lambda_ = 1;
  for (double lambda = -2; z.size() >= 3 && lambda <= 2.0001; lambda += 0.05) {
    Eigen::VectorXd t(z.size());
    double jacobian = 0;
    for (Eigen::Index i = 0; i < z.size(); ++i) {
      t(i) = yeo_johnson(z(i), lambda);
      jacobian += (z(i) >= 0 ? 1 : -1) * std::log1p(std::abs(z(i)));
    }
    double m = 0;
    const double ll = -static_cast<double>(z.size()) * std::log(mean_and_std(t, m)) + (lambda - 1) * jacobian;
    if (ll > best) best = ll, lambda_ = lambda;
  }
  Eigen::VectorXd t(z.size());
  for (Eigen::Index i = 0; i < z.size(); ++i) t(i) = warp(z(i));
  w_std_ = mean_and_std(t, w_mean_);
}

double GaussianProcess::kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const {
  const double r = ((a - b).array() / len_.array()).matrix().norm();
  return sf2_ * (1 + kSqrt5 * r + 5 * r * r / 3) * std::exp(-kSqrt5 * r);
}

double GaussianProcess::factorise(const Eigen::VectorXd& theta) {
  const Eigen::Index d = X_.cols(), n = X_.rows();
  len_ = theta.head(d).array().exp();
  sf2_ = std::exp(theta(d));
  sn2_ = std::exp(theta(d + 1));
  Eigen::MatrixXd K(n, n);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j <= i; ++j) K(i, j) = K(j, i) = kernel(X_.row(i).transpose(), X_.row(j).transpose());
  K.diagonal().array() += sn2_ + 1e-9;
  llt_.compute(K);
  if (llt_.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  alpha_ = llt_.solve(y_);
  const Eigen::MatrixXd L = llt_.matrixL();
  const double logdet = 2 * L.diagonal().array().log().sum();
  return -0.5 * y_.dot(alpha_) - 0.5 * logdet - 0.5 * static_cast<double>(n) * std::log(2 * M_PI);
}

void GaussianProcess::fit_hyperparameters(std::mt19937_64& rng) {
  const unsigned d = static_cast<unsigned>(X_.cols());
  std::vector<double> lo(d + 2, kLogLenLo), hi(d + 2, kLogLenHi);
  lo[d] = kLogSfLo, hi[d] = kLogSfHi, lo[d + 1] = kLogSnLo, hi[d + 1] = kLogSnHi;
  nlopt::opt opt(nlopt::LN_BOBYQA, d + 2);
  opt.set_lower_bounds(lo);
  opt.set_upper_bounds(hi);
  opt.set_maxeval(150 * (d + 2));
  opt.set_xtol_rel(1e-4);
  auto objective = [](unsigned n, const double* x, double*, void* self) {
    auto* gp = static_cast<GaussianProcess*>(self);
    const double lml = gp->factorise(Eigen::Map<const Eigen::VectorXd>(x, n));
    return std::isfinite(lml) ? -(lml + log_length_prior(x, n - 2)) : 1e30;
  };
  opt.set_min_objective(objective, this);
  // Starts: the previous fit (when there is one), a neutral guess, and random points.
  std::vector<std::vector<double>> starts;
  if (have_hyper_) {
    std::vector<double> prev(d + 2);
    for (unsigned i = 0; i < d; ++i) prev[i] = std::log(len_(i));
    prev[d] = std::log(sf2_), prev[d + 1] = std::log(sn2_);
    starts.push_back(prev);
  }
  std::vector<double> neutral(d + 2, std::log(0.3));
  neutral[d] = 0, neutral[d + 1] = std::log(1e-3);
  starts.push_back(neutral);
  for (int k = 0; k < 3; ++k) {
    std::vector<double> s(d + 2);
    for (unsigned i = 0; i < d + 2; ++i) s[i] = std::uniform_real_distribution<double>(lo[i], hi[i])(rng);
    starts.push_back(s);
  }
  double best = std::numeric_limits<double>::infinity();
  std::vector<double> best_x = starts.front();
  for (auto& x : starts) {
    double f = 0;
    try {
      opt.optimize(x, f);
    } catch (const std::exception&) {
      f = objective(d + 2, x.data(), nullptr, this);  // a stopped run keeps its last point
    }
    if (f < best) best = f, best_x = x;
  }
  lml_ = factorise(Eigen::Map<const Eigen::VectorXd>(best_x.data(), d + 2));
  have_hyper_ = true;
}

void GaussianProcess::fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, bool fit_hyper, std::mt19937_64& rng) {
  X_ = X;
  y_std_ = mean_and_std(y, y_mean_);
  if (fit_hyper || !have_hyper_) fit_warp((y.array() - y_mean_) / y_std_);
  y_.resize(y.size());
  for (Eigen::Index i = 0; i < y.size(); ++i) y_(i) = standardise(y(i));
  if (fit_hyper || !have_hyper_) {
    fit_hyperparameters(rng);
    return;
  }
  lml_ = factorise(theta());
}

Eigen::VectorXd GaussianProcess::theta() const {
  const Eigen::Index d = len_.size();
  Eigen::VectorXd t(d + 2);
  t.head(d) = len_.array().log();
  t(d) = std::log(sf2_), t(d + 1) = std::log(sn2_);
  return t;
}

void GaussianProcess::joint(const Eigen::MatrixXd& P, Eigen::VectorXd& mean, Eigen::MatrixXd& cov) const {
  const Eigen::Index m = P.rows(), n = X_.rows();
  Eigen::MatrixXd Ks(n, m);  // k(X_i, P_j)
  for (Eigen::Index j = 0; j < m; ++j)
    for (Eigen::Index i = 0; i < n; ++i) Ks(i, j) = kernel(X_.row(i).transpose(), P.row(j).transpose());
  mean = Ks.transpose() * alpha_;
  const Eigen::MatrixXd V = llt_.matrixL().solve(Ks);
  cov.resize(m, m);
  for (Eigen::Index i = 0; i < m; ++i)
    for (Eigen::Index j = 0; j <= i; ++j)
      cov(i, j) = cov(j, i) = kernel(P.row(i).transpose(), P.row(j).transpose()) - V.col(i).dot(V.col(j));
}

void GaussianProcess::predict(const Eigen::VectorXd& x, double& mean, double& var, Eigen::VectorXd* dmean,
                              Eigen::VectorXd* dvar) const {
  const Eigen::Index n = X_.rows(), d = X_.cols();
  Eigen::VectorXd k(n);
  Eigen::MatrixXd dk(n, d);  // d k(x, X_i) / d x
  const Eigen::ArrayXd inv_l2 = len_.array().square().inverse();
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::ArrayXd diff = x.array() - X_.row(i).transpose().array();
    const double r = std::sqrt((diff.square() * inv_l2).sum());
    const double e = std::exp(-kSqrt5 * r);
    k(i) = sf2_ * (1 + kSqrt5 * r + 5 * r * r / 3) * e;
    // dk/dx = -(5/3) sf2 (1 + sqrt5 r) e^{-sqrt5 r} (x - x_i) / l^2: smooth at r = 0.
    dk.row(i) = (-(5.0 / 3.0) * sf2_ * (1 + kSqrt5 * r) * e * diff * inv_l2).matrix().transpose();
  }
  mean = k.dot(alpha_);
  const Eigen::VectorXd v = llt_.solve(k);
  var = std::max(1e-12, sf2_ - k.dot(v));
  if (dmean) *dmean = dk.transpose() * alpha_;
  if (dvar) *dvar = -2 * dk.transpose() * v;
}

}  // namespace loom::sweep
