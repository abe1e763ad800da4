// gp.hpp — a Gaussian process over the unit cube: Matérn 5/2 kernel with one length scale per
// dimension (ARD), signal and noise variances fitted by maximising the log marginal likelihood
// (NLopt, BOBYQA from several starts), Cholesky solves with Eigen. Targets are standardised
// inside; predictions are in the standardised units.
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
  // Targets in standardised units (what predict's mean is in).
  double standardise(double y) const { return (y - y_mean_) / y_std_; }
  double log_marginal_likelihood() const { return lml_; }
  const Eigen::VectorXd& length_scales() const { return len_; }

 private:
  double kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b) const;
  double factorise(const Eigen::VectorXd& theta);  // sets the hyperparameters, returns the LML
  void fit_hyperparameters(std::mt19937_64& rng);

  Eigen::MatrixXd X_;
  Eigen::VectorXd y_;  // standardised
  double y_mean_ = 0, y_std_ = 1;
  Eigen::VectorXd len_;
  double sf2_ = 1, sn2_ = 1e-4;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;
  double lml_ = 0;
  bool have_hyper_ = false;
};

}  // namespace loom::sweep
