// Determined's metric reduction (determined/pytorch/_reducer.py, _metric_utils.py) over the
// process group: per-slot values travel as JSON text.
#include "tessera/trial/reducer.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/ops.h"

namespace tessera::trial {

const char* reducer_name(Reducer r) {
  switch (r) {
    case Reducer::AVG:
      return "AVG";
    case Reducer::SUM:
      return "SUM";
    case Reducer::MAX:
      return "MAX";
    case Reducer::MIN:
      return "MIN";
  }
  return "?";
}

double reduce_values(Reducer r, const std::vector<double>& values,
                     const std::vector<int64_t>& weights, const std::string& what) {
  TS_CHECK(!values.empty(), "reducer ", reducer_name(r), " of '", what, "': no values to reduce");
  switch (r) {
    case Reducer::AVG: {
      TS_CHECK(weights.empty() || weights.size() == values.size(), "reducer AVG of '", what,
               "': ", values.size(), " values but ", weights.size(), " weights");
      double sum = 0, total = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        const double w = weights.empty() ? 1.0 : static_cast<double>(weights[i]);
        sum += w * values[i];
        total += w;
      }
      TS_CHECK(total > 0, "reducer AVG of '", what, "': the weights sum to ", total);
      return sum / total;
    }
    case Reducer::SUM: {
      double sum = 0;
      for (double v : values) sum += v;
      return sum;
    }
    case Reducer::MAX:
      return *std::max_element(values.begin(), values.end());
    case Reducer::MIN:
      return *std::min_element(values.begin(), values.end());
  }
  return 0;
}

std::vector<std::string> all_gather_strings(parallel::ProcessGroup& group,
                                            const std::string& text) {
  const int world = group.size();
  if (world == 1) return {text};
  // Lengths first, then every rank's bytes padded to the longest (one int64 per byte: the
  // groups move tensors, and metrics are small).
  Tensor length = from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1});
  Tensor lengths = Tensor::empty({world}, DType::Int64);
  group.all_gather(lengths, length);
  const std::vector<int64_t> n = lengths.to_int_vector();
  const int64_t longest = std::max<int64_t>(1, *std::max_element(n.begin(), n.end()));
  std::vector<int64_t> mine(static_cast<size_t>(longest), 0);
  for (size_t i = 0; i < text.size(); ++i) mine[i] = static_cast<unsigned char>(text[i]);
  Tensor all = Tensor::empty({world * longest}, DType::Int64);
  group.all_gather(all, from_vector(mine, {longest}));
  const std::vector<int64_t> bytes = all.to_int_vector();
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    std::string s(static_cast<size_t>(n[r]), '\0');
    for (int64_t i = 0; i < n[r]; ++i) s[i] = static_cast<char>(bytes[r * longest + i]);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {
// The reducer of each metric name (the one given for all, or a map's entry).
using ReducerOf = std::function<Reducer(const std::string& name)>;

Metrics reduce_batch_metrics_with(parallel::ProcessGroup& group,
                                  const std::vector<Metrics>& batches,
                                  const ReducerOf& reducer_of) {
  // This slot's reduction of its batches.
  Metrics mine;
  if (!batches.empty()) {
    for (const Metrics& b : batches) {
      TS_CHECK(b.size() == batches[0].size() &&
                   std::equal(b.begin(), b.end(), batches[0].begin(),
                              [](const auto& x, const auto& y) { return x.first == y.first; }),
               "evaluate_batch: metric names must match across all batches of data");
    }
    for (const auto& [name, first] : batches[0]) {
      std::vector<double> values;
      for (const Metrics& b : batches) values.push_back(b.at(name));
      mine[name] = reduce_values(reducer_of(name), values, {}, name);
    }
  }
  if (group.size() == 1) return mine;
  // The slots' results and batch counts, then their reduction; every rank computes it (a
  // slot without batches learns the names from the others).
  const nlohmann::json slot{{"metrics", mine}, {"batches", batches.size()}};
  std::vector<Metrics> slots;
  std::vector<int64_t> counts;
  for (const std::string& s : all_gather_strings(group, slot.dump())) {
    const nlohmann::json j = nlohmann::json::parse(s);
    if (j.at("batches").get<int64_t>() == 0) continue;  // a slot with nothing to report
    slots.push_back(j.at("metrics").get<Metrics>());
    counts.push_back(j.at("batches").get<int64_t>());
  }
  Metrics out;
  if (slots.empty()) return out;
  for (const auto& [name, v] : slots[0]) {
    std::vector<double> values;
    for (const Metrics& m : slots) {
      TS_CHECK(m.count(name), "evaluate_batch: metric '", name, "' is missing on some slots");
      values.push_back(m.at(name));
    }
    out[name] = reduce_values(reducer_of(name), values, counts, name);
  }
  return out;
}
}  // namespace

Metrics reduce_batch_metrics(parallel::ProcessGroup& group, const std::vector<Metrics>& batches,
                             const std::map<std::string, Reducer>& reducers) {
  return reduce_batch_metrics_with(group, batches, [&](const std::string& name) {
    auto it = reducers.find(name);
    TS_CHECK(it != reducers.end(), "evaluation reducer: no reducer for metric '", name,
             "' (give one reducer for all metrics or one for every metric)");
    return it->second;
  });
}

Metrics reduce_batch_metrics(parallel::ProcessGroup& group, const std::vector<Metrics>& batches,
                             Reducer all) {
  return reduce_batch_metrics_with(group, batches, [all](const std::string&) { return all; });
}

std::vector<Metrics> average_training_metrics(parallel::ProcessGroup& group,
                                              const std::vector<Metrics>& batches) {
  if (group.size() == 1) return batches;
  std::vector<std::vector<Metrics>> slots;
  size_t n = 0;
  for (const std::string& s : all_gather_strings(group, nlohmann::json(batches).dump())) {
    slots.push_back(nlohmann::json::parse(s).get<std::vector<Metrics>>());
    n = std::max(n, slots.back().size());
  }
  for (const auto& s : slots)  // a slot that reports nothing is left out
    TS_CHECK(s.empty() || s.size() == n,
             "training metrics: slots ran different numbers of "
             "batches (",
             s.size(), " and ", n, ")");
  std::vector<Metrics> out(n);
  for (size_t i = 0; i < n; ++i) {
    std::map<std::string, std::pair<double, int>> sums;
    for (const auto& s : slots)
      if (!s.empty())
        for (const auto& [name, v] : s[i]) sums[name].first += v, ++sums[name].second;
    for (const auto& [name, sum] : sums) out[i][name] = sum.first / sum.second;
  }
  return out;
}

}  // namespace tessera::trial
