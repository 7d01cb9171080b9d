// Difficulty metrics of a causal LM's training windows (token_windows.h: window i is tokens
// [i * block, i * block + block + 1)) for the data-efficiency sampler
// (curriculum_data_sampler.h), computed once per corpus and block size and cached beside the
// token cache in DeepSpeed's data-analyzer format (indexed_dataset_file.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/io/indexed_dataset_file.h"
#include "tessera/io/token_data.h"

namespace tessera::io {

// DeepSpeed's two indexes of one metric: index_to_sample's row r holds the samples whose value
// is index_to_metric[r], rows in ascending value, samples ascending within a row.
struct MetricIndex {
  IndexedRows index_to_sample;
  std::vector<int64_t> index_to_metric;
};

// The metric names Tessera computes itself ("vocabularyrarity").
const std::vector<std::string>& built_in_window_metrics();

// vocabularyrarity (DeepSpeed's data-efficiency paper): for each window, floor of the sum over
// its `block` input tokens of -ln(count(token) / tokens), counts over the whole split; rarer
// words make a harder window. Summed in token order in float64 (the same on every machine).
std::vector<int64_t> vocabulary_rarity(const TokenFile& tokens, int64_t block);

// A data-analyzer index_to_metric file at PREFIX: its rows' values, one a row (another count
// is an error naming `what` and the row).
std::vector<int64_t> read_metric_values(const std::string& prefix, const std::string& what);

// Groups per-sample values into the two indexes.
MetricIndex index_by_value(const std::vector<int64_t>& values);

// The built-in metric `name` of `tokens`' windows of `block`: read from
// DIR/<name>-block<block>_index_to_{sample,metric}.{bin,idx} when there, else computed and
// written there (atomically; where DIR cannot be written, a warning says so and the metric is
// computed for this run only).
MetricIndex cached_window_metric(const std::string& dir, const std::string& name,
                                 const TokenFile& tokens, int64_t block);

}  // namespace tessera::io
