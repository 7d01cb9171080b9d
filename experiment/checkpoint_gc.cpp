#include "tessera/experiment/checkpoint_gc.h"

#include <algorithm>
#include <optional>
#include <set>

namespace tessera::experiment {

namespace {

std::optional<double> metric_of(const CheckpointRecord& c, const std::string& metric) {
  if (!c.metrics.is_object() || !c.metrics.contains(metric) || !c.metrics[metric].is_number())
    return std::nullopt;
  return c.metrics[metric].get<double>();
}

// The first `n` of `list` by metric, best first (checkpoints without one are never best).
void keep_best(std::vector<const CheckpointRecord*> list, int64_t n, const std::string& metric,
               bool smaller, std::set<std::string>& keep) {
  std::erase_if(list, [&](const CheckpointRecord* c) { return !metric_of(*c, metric); });
  std::stable_sort(list.begin(), list.end(), [&](auto* a, auto* b) {
    const double x = *metric_of(*a, metric), y = *metric_of(*b, metric);
    return smaller ? x < y : x > y;
  });
  for (size_t i = 0; i < list.size() && static_cast<int64_t>(i) < n; ++i)
    keep.insert(list[i]->uuid);
}

}  // namespace

std::vector<std::string> checkpoints_to_delete(const std::vector<TrialCheckpoints>& trials,
                                               const trial::ExperimentConfig& config) {
  const auto& st = config.checkpoint_storage;
  const std::string& metric = config.searcher.metric;
  const bool smaller = config.searcher.smaller_is_better;
  std::set<std::string> keep;
  std::vector<const CheckpointRecord*> all;
  for (const TrialCheckpoints& t : trials) {
    std::vector<const CheckpointRecord*> mine;
    for (const CheckpointRecord& c : t.checkpoints) mine.push_back(&c), all.push_back(&c);
    std::stable_sort(mine.begin(), mine.end(),
                     [](auto* a, auto* b) { return a->batches > b->batches; });
    for (size_t i = 0; i < mine.size() && static_cast<int64_t>(i) < st.save_trial_latest; ++i)
      keep.insert(mine[i]->uuid);
    keep_best(mine, st.save_trial_best, metric, smaller, keep);
  }
  keep_best(all, st.save_experiment_best, metric, smaller, keep);
  std::vector<std::string> out;
  for (const TrialCheckpoints& t : trials)
    if (t.ended)
      for (const CheckpointRecord& c : t.checkpoints)
        if (!keep.count(c.uuid)) out.push_back(c.uuid);
  return out;
}

}  // namespace tessera::experiment
