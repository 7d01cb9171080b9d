// Custom reducers: per-slot values gathered as JSON text, reduced on every rank.
#include "tessera/trial/metric_reducer.h"

#include "tessera/trial/reducer.h"

namespace tessera::trial {

nlohmann::json SimpleReducer::cross_slot_reduce(const std::vector<nlohmann::json>& per_slot) {
  // Undo the sharding: the slots' i-th values in rank order, for i = 0, 1, ...
  std::vector<nlohmann::json> flat;
  size_t longest = 0;
  for (const auto& s : per_slot) longest = std::max(longest, s.size());
  for (size_t i = 0; i < longest; ++i)
    for (const auto& s : per_slot)
      if (i < s.size()) flat.push_back(s[i]);
  return fn_(flat);
}

std::shared_ptr<SimpleReducer> ReducerContext::wrap_reducer(SimpleReducer::Fn fn,
                                                            std::optional<std::string> name,
                                                            bool for_training,
                                                            bool for_validation) {
  auto r = std::make_shared<SimpleReducer>(std::move(fn));
  add(r, std::move(name), for_training, for_validation);
  return r;
}

void ReducerContext::add(std::shared_ptr<MetricReducer> reducer, std::optional<std::string> name,
                         bool for_training, bool for_validation) {
  TS_CHECK(reducer, "wrap_reducer: the reducer is null");
  if (name)
    for (const Wrapped& w : reducers_)
      TS_CHECK(w.name != name, "wrap_reducer: a reducer named '", *name, "' is already registered");
  reducers_.push_back({std::move(reducer), std::move(name), for_training, for_validation});
}

void ReducerContext::reset_reducers() {
  for (Wrapped& w : reducers_) w.reducer->reset();
}

nlohmann::json ReducerContext::reduce_metrics(parallel::ProcessGroup& group, bool for_training) {
  nlohmann::json metrics = nlohmann::json::object();
  for (size_t i = 0; i < reducers_.size(); ++i) {
    Wrapped& w = reducers_[i];
    if (!(for_training ? w.for_training : w.for_validation)) continue;
    const std::string which =
        w.name ? "reducer '" + *w.name + "'" : "reducer #" + std::to_string(i) + " (unnamed)";
    std::vector<nlohmann::json> slots;
    for (const std::string& s : all_gather_strings(group, w.reducer->per_slot_reduce().dump()))
      slots.push_back(nlohmann::json::parse(s));
    const nlohmann::json value = w.reducer->cross_slot_reduce(slots);
    if (w.name) {
      TS_CHECK(!value.is_object(), which,
               ": cross_slot_reduce returned an object of metrics, "
               "but the reducer was wrapped with a name (wrap it without one to return several)");
      metrics[*w.name] = value;
    } else {
      TS_CHECK(value.is_object(), which,
               ": cross_slot_reduce must return an object of metric "
               "names to values when the reducer is wrapped without a name, got ",
               value.dump());
      for (const auto& [k, v] : value.items()) metrics[k] = v;
    }
  }
  return metrics;
}

}  // namespace tessera::trial
