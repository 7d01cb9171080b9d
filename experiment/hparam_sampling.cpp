#include "tessera/experiment/hparam_sampling.h"

#include <cmath>
#include <sstream>

#include "tessera/error.h"

namespace tessera::experiment {

double SearchRandom::uniform(double lo, double hi) {
  const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;  // 53 random bits
  return lo + (hi - lo) * u;
}

int64_t SearchRandom::below(int64_t n) {
  TS_CHECK(n >= 1, "SearchRandom::below: n must be >= 1, got ", n);
  // Rejection keeps it exactly uniform.
  const uint64_t range = static_cast<uint64_t>(n), limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do x = engine_();
  while (x >= limit);
  return static_cast<int64_t>(x % range);
}

std::string SearchRandom::state() const {
  std::ostringstream os;
  os << engine_;
  return os.str();
}

void SearchRandom::set_state(const std::string& state) {
  std::istringstream is(state);
  is >> engine_;
  TS_CHECK(!is.fail(), "SearchRandom: not a saved generator state");
}

nlohmann::json sample_hparams(const HParams& hparams, SearchRandom& random) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, h] : hparams) {
    using T = trial::Hyperparameter;
    switch (h.type) {
      case T::Const:
        out[name] = h.val;
        break;
      case T::Int: {
        const auto lo = static_cast<int64_t>(h.minval), hi = static_cast<int64_t>(h.maxval);
        out[name] = lo + random.below(hi - lo + 1);
        break;
      }
      case T::Double:
        out[name] = random.uniform(h.minval, h.maxval);
        break;
      case T::Log:
        out[name] = std::pow(h.base, random.uniform(h.minval, h.maxval));
        break;
      case T::Categorical:
        out[name] = h.vals[static_cast<size_t>(random.below(static_cast<int64_t>(h.vals.size())))];
        break;
    }
  }
  return out;
}

namespace {

// How many values hyperparameter `h` takes on the grid.
int64_t axis_size(const std::string& name, const trial::Hyperparameter& h) {
  using T = trial::Hyperparameter;
  if (h.type == T::Const) return 1;
  if (h.type == T::Categorical) return static_cast<int64_t>(h.vals.size());
  TS_CHECK(h.count && *h.count >= 1, "grid search: hyperparameter '", name,
           "' needs a 'count' (how many grid points over its range)");
  if (h.type != T::Int) return *h.count;
  // (the config holds int ranges within +-2^53: no overflow)
  const auto lo = static_cast<int64_t>(h.minval), hi = static_cast<int64_t>(h.maxval);
  return std::min(*h.count, hi - lo + 1);
}

// The values hyperparameter `h` takes on the grid.
std::vector<nlohmann::json> grid_axis(const std::string& name, const trial::Hyperparameter& h) {
  using T = trial::Hyperparameter;
  if (h.type == T::Const) return {h.val};
  if (h.type == T::Categorical) return h.vals;
  const int64_t count = axis_size(name, h);
  std::vector<nlohmann::json> axis;
  if (h.type == T::Int) {
    const auto lo = static_cast<int64_t>(h.minval), hi = static_cast<int64_t>(h.maxval);
    if (count == 1) return {static_cast<int64_t>(std::round((lo + hi) / 2.0))};
    for (int64_t i = 0; i < count; ++i)
      axis.push_back(static_cast<int64_t>(
          std::round(static_cast<double>(lo) +
                     static_cast<double>(i * (hi - lo)) / static_cast<double>(count - 1))));
    return axis;
  }
  auto point = [&](int64_t i) {
    return count == 1 ? (h.minval + h.maxval) / 2.0
                      : h.minval + static_cast<double>(i) * (h.maxval - h.minval) /
                                       static_cast<double>(count - 1);
  };
  for (int64_t i = 0; i < count; ++i)
    axis.push_back(h.type == T::Log ? std::pow(h.base, point(i)) : point(i));
  return axis;
}

}  // namespace

int64_t grid_point_count(const HParams& hparams, int64_t max_points) {
  int64_t points = 1;
  for (const auto& [name, h] : hparams) {
    const int64_t n = axis_size(name, h);
    TS_CHECK(!__builtin_mul_overflow(points, n, &points) && points <= max_points,
             "grid search: the grid has more than ", max_points,
             " points (searcher.max_grid_points) once hyperparameter '", name, "' (", n,
             " values) is added; lower the counts, or raise searcher.max_grid_points");
  }
  return points;
}

std::vector<nlohmann::json> hparam_grid(const HParams& hparams, int64_t max_points) {
  grid_point_count(hparams, max_points);  // before building any
  std::vector<nlohmann::json> points{nlohmann::json::object()};
  // The first name varies slowest (Determined's cartesian product of axes in name order).
  for (auto it = hparams.rbegin(); it != hparams.rend(); ++it) {
    const std::vector<nlohmann::json> axis = grid_axis(it->first, it->second);
    std::vector<nlohmann::json> next;
    for (const nlohmann::json& v : axis)
      for (const nlohmann::json& p : points) {
        nlohmann::json q = p;
        q[it->first] = v;
        next.push_back(std::move(q));
      }
    points = std::move(next);
  }
  return points;
}

}  // namespace tessera::experiment
