// gp.hpp — a Gaussian process over the unit cube: Matérn 5/2 kernel with one length scale per
// dimension (ARD), signal and noise variances fitted by maximising the log marginal likelihood
// (NLopt, BOBYQA from several starts), Cholesky solves with Eigen. Targets are standardised, then
// warped by a Yeo-Johnson power transform whose exponent maximises their normal likelihood (as
// HEBO does: a loss with a long tail of bad values, Rosenbrock's, no longer flattens the model
// near the optimum), then standardised again; predictions are in those units.
#pragma once

#include <Eigen/Dense>

#include <random>

namespace loom::sweep {

class GaussianProcess {
 public:
  // Fits the hyperparameters (fit_hyper) or keeps the last ones, then factorises.
  void fit(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, bool fit_hyper, std::mt19937_64& rng);
  // Mean and variance at x; with grads, their derivatives in x.
  void predict(const Eigen::VectorXd& x, double& mean, double& var, Eigen::VectorXd* dmean = nullptr,
               Eigen::VectorXd* dvar = nullptr) const;
  // The joint posterior of the function (without noise) at the rows of P: mean and covariance.
  void joint(const Eigen::MatrixXd& P, Eigen::VectorXd& mean, Eigen::MatrixXd& cov) const;
  // Targets in standardised units (what predict's mean is in).
  double standardise(double y) const { return (warp((y - y_mean_) / y_std_) - w_mean_) / w_std_; }
  double log_marginal_likelihood() const { return lml_; }
  const Eigen::VectorXd& length_scales() const { return len_; }
  double warp_exponent() const { return lambda_; }

 private:
  double warp(double z) const;              // Yeo-Johnson with lambda_
  void fit_warp(const Eigen::VectorXd& z);  // lambda_, w_mean_, w_std_ from standardised targets
  double kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const;
  double factorise(const Eigen::VectorXd& theta);  // sets the hyperparameters, returns the LML
  Eigen::VectorXd theta() const;                    // the hyperparameters as factorise takes them
  void fit_hyperparameters(std::mt19937_64& rng);

  Eigen::MatrixXd X_;
  Eigen::VectorXd y_;  // standardised
  double y_mean_ = 0, y_std_ = 1;
  double lambda_ = 1, w_mean_ = 0, w_std_ = 1;  // lambda 1: no warp
  Eigen::VectorXd len_;
  double sf2_ = 1, sn2_ = 1e-4;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;
  double lml_ = 0;
  bool have_hyper_ = false;
};

}  // namespace loom::sweep
