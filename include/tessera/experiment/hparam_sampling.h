// Hyperparameter samples, as Determined's searchers draw them: a random sample of every
// hyperparameter (int uniform in [minval, maxval], double uniform, log base^uniform exponent,
// categorical uniform over vals, const its value) and the grid (count points over each range,
// every categorical value, the cartesian product of the axes in name order). A sample is a JSON
// object keyed by the (dotted) hyperparameter names. The random stream is a 64-bit Mersenne
// Twister, whose sequence the C++ standard fixes, turned into numbers here (not by the
// library's distributions, which differ between implementations): the same seed gives the same
// samples everywhere.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tessera/trial/experiment_config.h"

namespace tessera::experiment {

using HParams = std::map<std::string, trial::Hyperparameter>;

class SearchRandom {
 public:
  explicit SearchRandom(uint64_t seed = 0) : engine_(seed) {}
  double uniform(double lo, double hi);  // [lo, hi)
  int64_t below(int64_t n);              // [0, n)
  std::string state() const;             // to snapshot and restore
  void set_state(const std::string& state);

 private:
  std::mt19937_64 engine_;
};

nlohmann::json sample_hparams(const HParams& hparams, SearchRandom& random);
// Every grid point; int/double/log hyperparameters need `count` (an error names the one that
// has none). An int axis has at most maxval - minval + 1 points.
std::vector<nlohmann::json> hparam_grid(const HParams& hparams, int64_t max_points = 100000);
// The number of grid points, counted without building them; more than max_points (the config's
// searcher.max_grid_points) is an error that says how many there would be.
int64_t grid_point_count(const HParams& hparams, int64_t max_points);

}  // namespace tessera::experiment
