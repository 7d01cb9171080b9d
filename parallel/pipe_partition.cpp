#include "tessera/parallel/pipe_partition.h"

#include <algorithm>
#include <limits>
#include <regex>

#include "tessera/error.h"

namespace tessera::parallel {

std::vector<int64_t> partition_uniform(int64_t items, int64_t parts) {
  TS_CHECK(items >= 0 && parts >= 1, "partition_uniform: ", items, " items into ", parts, " parts");
  std::vector<int64_t> bounds(static_cast<size_t>(parts + 1));
  if (items <= parts) {  // one item per part while they last
    for (int64_t p = 0; p <= parts; ++p) bounds[static_cast<size_t>(p)] = std::min(p, items);
    return bounds;
  }
  const int64_t chunk = items / parts, extra = items - chunk * parts;
  for (int64_t p = 0; p <= parts; ++p)
    bounds[static_cast<size_t>(p)] = p * chunk + std::min(p, extra);
  return bounds;
}

std::vector<int64_t> partition_balanced(const std::vector<double>& weights, int64_t parts) {
  const auto n = static_cast<int64_t>(weights.size());
  TS_CHECK(parts >= 1, "partition_balanced: ", parts, " parts");
  if (n <= parts) return partition_uniform(n, parts);
  constexpr double inf = std::numeric_limits<double>::infinity();
  const auto rows = static_cast<size_t>(n + 1), cols = static_cast<size_t>(parts + 1);
  // best[i][j]: the first i items in j parts, with its largest and smallest part sums.
  std::vector<double> largest(rows * cols, inf), smallest(rows * cols, inf),
      spread(rows * cols, inf);
  std::vector<int64_t> cut(rows * cols, 0);
  std::vector<double> prefix(rows, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[static_cast<size_t>(i + 1)] =
        prefix[static_cast<size_t>(i)] + weights[static_cast<size_t>(i)];
  auto at = [cols](int64_t i, int64_t j) {
    return static_cast<size_t>(i) * cols + static_cast<size_t>(j);
  };
  largest[at(0, 0)] = 0.0;
  spread[at(0, 0)] = 0.0;
  for (int64_t i = 1; i <= n; ++i)
    for (int64_t j = 1; j <= std::min(i, parts); ++j)
      for (int64_t k = 0; k < i; ++k) {
        const double part = prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(k)];
        const double hi = std::max(largest[at(k, j - 1)], part);
        const double lo = std::min(smallest[at(k, j - 1)], part);
        if (spread[at(i, j)] >= hi - lo) {  // ties: the later cut, as DeepSpeed
          spread[at(i, j)] = hi - lo;
          largest[at(i, j)] = hi;
          smallest[at(i, j)] = lo;
          cut[at(i, j)] = k;
        }
      }
  std::vector<int64_t> bounds{n};
  for (int64_t j = parts; j >= 1; --j) bounds.push_back(cut[at(bounds.back(), j)]);
  std::reverse(bounds.begin(), bounds.end());
  return bounds;
}

std::vector<int64_t> check_partition(const std::vector<int64_t>& bounds, int64_t layers,
                                     int64_t stages) {
  TS_CHECK(static_cast<int64_t>(bounds.size()) == stages + 1, "pipeline partition: ", bounds.size(),
           " bounds for ", stages, " stages (expected ", stages + 1, ")");
  TS_CHECK(bounds.front() == 0 && bounds.back() == layers,
           "pipeline partition: bounds must run "
           "from 0 to the ",
           layers, " layers, got ", bounds.front(), " .. ", bounds.back());
  for (size_t i = 1; i < bounds.size(); ++i)
    TS_CHECK(bounds[i] >= bounds[i - 1], "pipeline partition: bounds must not decrease (",
             bounds[i - 1], " then ", bounds[i], ")");
  return bounds;
}

std::vector<int64_t> partition_layers(const std::string& method_in,
                                      const std::vector<LayerInfo>& layers, int64_t stages) {
  TS_CHECK(stages >= 1, "pipeline partition: ", stages, " stages");
  std::string method = method_in;
  std::transform(method.begin(), method.end(), method.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto n = static_cast<int64_t>(layers.size());
  if (method == "uniform") return partition_uniform(n, stages);
  std::vector<double> weights;
  if (method == "parameters") {
    for (const LayerInfo& l : layers) weights.push_back(static_cast<double>(l.parameters));
  } else if (method.rfind("type:", 0) == 0) {
    const std::string pattern = method_in.substr(5);
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::icase);
    } catch (const std::regex_error& e) {
      fail("pipeline partition '", method_in, "': not a regular expression (", e.what(), ")");
    }
    for (const LayerInfo& l : layers) weights.push_back(std::regex_search(l.type_name, re) ? 1 : 0);
    TS_CHECK(std::count(weights.begin(), weights.end(), 1.0) > 0, "pipeline partition '", method_in,
             "' found no layer of that type");
  } else {
    fail("pipeline partition method '", method_in,
         "' is not one of uniform, parameters, type:REGEX (or give explicit bounds)");
  }
  return partition_balanced(weights, stages);
}

}  // namespace tessera::parallel
