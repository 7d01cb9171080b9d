// Determined's metric reduction for trials (determined.pytorch.Reducer and _reduce_metrics):
// how evaluate_batch metrics and training metrics become one value per name across the batches
// of a workload and the slots (ranks) of a trial.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/parallel/process_group.h"

namespace tessera::trial {

enum class Reducer { AVG, SUM, MAX, MIN };
const char* reducer_name(Reducer r);

// Determined's _simple_reduce_metrics: AVG is the mean, weighted by `weights` when given (one
// per value); SUM, MAX, MIN. Errors name `what` (the metric) when there is nothing to reduce or
// the weights do not match.
double reduce_values(Reducer r, const std::vector<double>& values,
                     const std::vector<int64_t>& weights = {}, const std::string& what = "metric");

using Metrics = std::map<std::string, double>;

// evaluate_batch metrics, as Determined reduces them: each slot reduces its own batches'
// values (AVG: their plain mean), then the slots' results are reduced again, AVG weighted by
// each slot's number of batches (slots that evaluated no batch are left out). Every metric
// needs a reducer: `reducers` names one per metric, or `all` serves every metric. All ranks
// return the result. Batches must report the same metric names.
Metrics reduce_batch_metrics(parallel::ProcessGroup& group, const std::vector<Metrics>& batches,
                             const std::map<std::string, Reducer>& reducers);
Metrics reduce_batch_metrics(parallel::ProcessGroup& group, const std::vector<Metrics>& batches,
                             Reducer all = Reducer::AVG);

// Training metrics across slots, as Determined averages them: batch i's metric is the mean of
// the slots' values for batch i (slots run the same number of batches; a slot that reports
// none, as a DeepSpeedTrial rank whose ModelParallelUnit says should_report_metrics = false,
// is left out). Every rank gets the result.
std::vector<Metrics> average_training_metrics(parallel::ProcessGroup& group,
                                              const std::vector<Metrics>& batches);

// Every rank's `text`, in rank order (the transport of per-slot values).
std::vector<std::string> all_gather_strings(parallel::ProcessGroup& group, const std::string& text);

}  // namespace tessera::trial
