// propose.hpp — where to try next: random points, or Bayesian optimisation (a Gaussian
// process on the finished trials, expected improvement maximised by multi-start L-BFGS with
// NLopt; with trials pending, whether proposed in this batch or still running, the batch's
// expected improvement q-EI, estimated from joint posterior samples and maximised by BOBYQA).
#pragma once

#include <nlopt.hpp>

#include <random>
#include <vector>

#include "gp.hpp"
#include "space.hpp"

namespace loom::sweep {

struct History {
  std::vector<std::vector<double>> done;     // unit-cube points of finished trials
  std::vector<double> value;                 // their metric, as a value to minimise
  std::vector<std::vector<double>> pending;  // proposed, not finished
};

class Proposer {
 public:
  Proposer(const Space& space, bool bayes, int init_trials, unsigned long seed);
  // `count` new unit-cube points (snapped onto int and choice bins).
  std::vector<std::vector<double>> propose(const History& h, size_t count);

 private:
  std::vector<double> random_point();
  std::vector<std::vector<double>> propose_bayes(const History& h, size_t count);
  std::vector<double> next_ei(const GaussianProcess& gp, double best, const std::vector<std::vector<double>>& taken);
  std::vector<double> next_qei(const GaussianProcess& gp, double best, const std::vector<std::vector<double>>& pending,
                               const std::vector<std::vector<double>>& taken);
  template <typename F>
  std::vector<double> maximise(nlopt::opt& opt, F&& acquisition, const std::vector<std::vector<double>>& taken);

  const Space& space_;
  bool bayes_;
  size_t init_;
  std::mt19937_64 rng_;
};

// Expected improvement (minimisation) below `best` for a prediction N(mean, var), with an
// exploration margin xi; with grad, dEI/dmean and dEI/dsd.
double expected_improvement(double mean, double var, double best, double xi, double* d_mean = nullptr,
                            double* d_sd = nullptr);

}  // namespace loom::sweep
