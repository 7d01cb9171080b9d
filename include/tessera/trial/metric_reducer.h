// Custom metric reducers, as Determined's (pytorch.MetricReducer and
// context.wrap_reducer): a reducer gathers values on each slot during a training or
// validation workload, per_slot_reduce() condenses them, and cross_slot_reduce() turns every
// slot's condensed value (in rank order) into the metric. Values cross ranks as JSON, the C++
// stand-in for Python's picklable objects.
//
//   struct MeanReducer : trial::MetricReducer {
//     double sum = 0; int64_t count = 0;
//     void update(double v) { sum += v; ++count; }
//     void reset() override { sum = 0; count = 0; }
//     nlohmann::json per_slot_reduce() override { return {sum, count}; }
//     nlohmann::json cross_slot_reduce(const std::vector<nlohmann::json>& slots) override {
//       double s = 0, n = 0;
//       for (const auto& x : slots) s += x[0].get<double>(), n += x[1].get<double>();
//       return s / n;
//     }
//   };
//   auto mean = reducers.wrap_reducer(std::make_shared<MeanReducer>(), "my_mean");
#pragma once
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/parallel/process_group.h"

namespace tessera::trial {

class MetricReducer {
 public:
  virtual ~MetricReducer() = default;
  // Before every training or validation workload.
  virtual void reset() = 0;
  // This slot's contribution, after the workload.
  virtual nlohmann::json per_slot_reduce() = 0;
  // Every slot's contribution, in rank order: the metric (one value when the reducer was
  // wrapped with a name, else an object of metric names to values).
  virtual nlohmann::json cross_slot_reduce(const std::vector<nlohmann::json>& per_slot) = 0;
};

// The simple API: update() buffers values; the function gets them flattened back into the
// order they had before sharding (slot values interleaved: slot 0's first, slot 1's first,
// ...; exact when update() is called once per batch).
class SimpleReducer : public MetricReducer {
 public:
  using Fn = std::function<nlohmann::json(const std::vector<nlohmann::json>& values)>;
  explicit SimpleReducer(Fn fn) : fn_(std::move(fn)) {}
  void update(nlohmann::json value) { values_.push_back(std::move(value)); }
  void reset() override { values_.clear(); }
  nlohmann::json per_slot_reduce() override { return values_; }
  nlohmann::json cross_slot_reduce(const std::vector<nlohmann::json>& per_slot) override;

 private:
  Fn fn_;
  std::vector<nlohmann::json> values_;
};

// The reducers a trial registered, and their reduction at the end of a workload.
class ReducerContext {
 public:
  // name: the metric's name, or nullopt for a reducer that returns an object of metrics.
  template <class R>
  std::shared_ptr<R> wrap_reducer(std::shared_ptr<R> reducer,
                                  std::optional<std::string> name = std::nullopt,
                                  bool for_training = true, bool for_validation = true) {
    add(reducer, std::move(name), for_training, for_validation);
    return reducer;
  }
  std::shared_ptr<SimpleReducer> wrap_reducer(SimpleReducer::Fn fn,
                                              std::optional<std::string> name = std::nullopt,
                                              bool for_training = true, bool for_validation = true);
  void reset_reducers();
  // The metrics of the reducers registered for this kind of workload; every rank calls it
  // (the per-slot values are gathered), every rank gets the result.
  nlohmann::json reduce_metrics(parallel::ProcessGroup& group, bool for_training);

 private:
  struct Wrapped {
    std::shared_ptr<MetricReducer> reducer;
    std::optional<std::string> name;
    bool for_training, for_validation;
  };
  void add(std::shared_ptr<MetricReducer> reducer, std::optional<std::string> name,
           bool for_training, bool for_validation);
  std::vector<Wrapped> reducers_;
};

}  // namespace tessera::trial
