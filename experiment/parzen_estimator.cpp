#include "tessera/experiment/parzen_estimator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/error.h"

namespace tessera::experiment {

namespace {

double normal_cdf(double z) {
  return 0.5 * std::erfc(-z / std::sqrt(2.0));
}

// Index drawn by weight (weights sum to 1).
size_t draw(const std::vector<double>& weights, SearchRandom& random) {
  const double u = random.uniform(0.0, 1.0);
  double acc = 0.0;
  for (size_t i = 0; i < weights.size(); ++i)
    if (u < (acc += weights[i])) return i;
  return weights.size() - 1;
}

}  // namespace

ParzenEstimator::ParzenEstimator(const std::vector<double>& observations, double low, double high,
                                 double prior_weight)
    : low_(low), high_(high) {
  TS_CHECK(high > low, "ParzenEstimator: empty range [", low, ", ", high, "]");
  const double range = high - low;
  std::vector<double> sorted = observations;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const double left = i == 0 ? low : sorted[i - 1];
    const double right = i + 1 == sorted.size() ? high : sorted[i + 1];
    mus_.push_back(sorted[i]);
    sigmas_.push_back(std::max(sorted[i] - left, right - sorted[i]));
    weights_.push_back(1.0);
  }
  mus_.push_back(0.5 * (low + high));  // the prior
  sigmas_.push_back(range);
  weights_.push_back(prior_weight);
  const double min_sigma = range / std::min(100.0, 1.0 + static_cast<double>(mus_.size()));
  for (double& s : sigmas_) s = std::clamp(s, min_sigma, range);
  double total = 0.0;
  for (double w : weights_) total += w;
  for (double& w : weights_) w /= total;
}

double ParzenEstimator::log_pdf(double x) const {
  double p = 0.0;
  for (size_t i = 0; i < mus_.size(); ++i) {
    const double s = sigmas_[i], z = (x - mus_[i]) / s;
    const double mass = normal_cdf((high_ - mus_[i]) / s) - normal_cdf((low_ - mus_[i]) / s);
    p += weights_[i] * std::exp(-0.5 * z * z) / (s * std::sqrt(2.0 * M_PI) * mass);
  }
  return p > 0 ? std::log(p) : -std::numeric_limits<double>::infinity();
}

double ParzenEstimator::sample(SearchRandom& random) const {
  const size_t k = draw(weights_, random);
  // A normal draw (Box-Muller on the stream's uniforms) kept if inside the range.
  for (int tries = 0; tries < 100; ++tries) {
    const double u1 = 1.0 - random.uniform(0.0, 1.0), u2 = random.uniform(0.0, 1.0);
    const double x =
        mus_[k] + sigmas_[k] * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    if (x >= low_ && x <= high_) return x;
  }
  return std::clamp(mus_[k], low_, high_);
}

CategoricalEstimator::CategoricalEstimator(const std::vector<int64_t>& observations,
                                           int64_t choices, double prior_weight) {
  TS_CHECK(choices >= 1, "CategoricalEstimator: no choices");
  weights_.assign(static_cast<size_t>(choices), prior_weight / static_cast<double>(choices));
  for (int64_t c : observations) weights_.at(static_cast<size_t>(c)) += 1.0;
  double total = 0.0;
  for (double w : weights_) total += w;
  for (double& w : weights_) w /= total;
}

double CategoricalEstimator::log_pmf(int64_t choice) const {
  return std::log(weights_.at(static_cast<size_t>(choice)));
}

int64_t CategoricalEstimator::sample(SearchRandom& random) const {
  return static_cast<int64_t>(draw(weights_, random));
}

}  // namespace tessera::experiment
