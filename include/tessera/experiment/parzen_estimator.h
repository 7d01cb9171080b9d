// The Parzen estimators of Optuna's TPE sampler (univariate, its defaults): a mixture of
// Gaussians truncated to [low, high], one per observation and one for the prior (centred on the
// range, as wide as it), each observation's width the larger distance to its neighbours among
// the sorted observations and the range's ends, clipped to [range / min(100, 1 + kernels),
// range] ("magic clip"); the observations weigh 1 each, the prior `prior_weight`. Categorical:
// each choice's observation count plus prior_weight / choices, normalised.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/experiment/hparam_sampling.h"

namespace tessera::experiment {

class ParzenEstimator {
 public:
  ParzenEstimator(const std::vector<double>& observations, double low, double high,
                  double prior_weight);
  double log_pdf(double x) const;
  double sample(SearchRandom& random) const;  // within [low, high]
  const std::vector<double>& mus() const { return mus_; }
  const std::vector<double>& sigmas() const { return sigmas_; }
  const std::vector<double>& weights() const { return weights_; }

 private:
  double low_, high_;
  std::vector<double> mus_, sigmas_, weights_;  // the prior last
};

class CategoricalEstimator {
 public:
  CategoricalEstimator(const std::vector<int64_t>& observations, int64_t choices,
                       double prior_weight);
  double log_pmf(int64_t choice) const;
  int64_t sample(SearchRandom& random) const;
  const std::vector<double>& weights() const { return weights_; }

 private:
  std::vector<double> weights_;
};

}  // namespace tessera::experiment
