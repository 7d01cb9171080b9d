// DeepSpeed's data-efficiency sampler (runtime/data_pipeline/data_sampling/data_sampler.py,
// DeepSpeedDataSampler): curriculum learning by metrics of the samples. Each metric's
// difficulty follows its schedule; when a difficulty changes, the samples newly admitted form a
// cluster (value-based: metric in (previous, current]; percentile-based: the next percentiles
// of the samples in the metric's order; with two or more clustering metrics, the samples that
// pass all of them and are in no earlier cluster). Every global batch draws its samples from
// the clusters in proportion to their sizes, reads each cluster in a shuffled order (shuffled
// again once used up), and shuffles the batch.
//
// Tessera's draws are Philox numbers keyed by (seed, step) and (seed, cluster, reshuffle)
// rather than numpy's stream, so any step's state is rebuilt from a few counters: a resumed run
// draws exactly what a straight one does (DeepSpeed saves the wrong generator's state), and
// every rank computes the same global batch without a broadcast. Where DeepSpeed's batch could
// come out short (a cluster smaller than its share), the cluster is reshuffled as often as
// needed, so every batch is full.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/io/indexed_dataset_file.h"

namespace tessera::io {

struct CurriculumMetric {
  std::string name;                      // for messages: "data_sampling...curriculum_metrics.NAME"
  bool percentile = false;               // difficulty_type "percentile" (else "value")
  bool single_cluster = false;           // clustering_type "single_cluster": admits every sample
  int64_t max_difficulty = 0;            // the percentile that means all samples
  IndexedRows index_to_sample;           // rows of sample ids, in the metric's order
  std::vector<int64_t> index_to_metric;  // each row's value (value-based metrics)
};

class CurriculumDataSampler {
 public:
  // `samples`: the dataset's size (ids are checked against it); `global_batch`: micro-batch x
  // data-parallel ranks x gradient accumulation steps.
  CurriculumDataSampler(int64_t samples, std::vector<CurriculumMetric> metrics,
                        int64_t global_batch, uint64_t seed);

  // The next global batch (curriculum step step() + 1), given each metric's difficulty at that
  // step in the metrics' order. An error names the step and the difficulties when no sample is
  // admitted yet.
  std::vector<int64_t> next_global_batch(const std::vector<int64_t>& difficulties);
  int64_t step() const { return step_; }
  // Each cluster's size, in the order they were formed; one cluster's samples, ascending.
  std::vector<int64_t> cluster_sizes() const;
  std::vector<int64_t> cluster_samples(size_t index) const;

  // The position: step, difficulties, and each cluster's difficulties, read position and
  // reshuffle count; set_state rebuilds the clusters from them and refuses a state whose
  // cluster sizes differ (another dataset or other metrics).
  nlohmann::json state() const;
  void set_state(const nlohmann::json& state);

 private:
  struct Cluster {
    std::vector<int64_t> from, to;  // the difficulties before and after it was formed
    std::vector<int64_t> order;     // its samples, shuffled
    int64_t position = 0, shuffles = 0;
  };
  void form_cluster(const std::optional<std::vector<int64_t>>& from,
                    const std::vector<int64_t>& to);
  std::vector<int64_t> admitted(size_t metric, std::optional<int64_t> from, int64_t to) const;
  void shuffle(Cluster& c, size_t index) const;
  std::vector<int64_t> take(size_t index, int64_t count);

  int64_t samples_, global_batch_;
  uint64_t seed_;
  std::vector<CurriculumMetric> metrics_;
  int64_t step_ = 0;
  std::optional<std::vector<int64_t>> difficulties_;  // the last step's
  std::vector<Cluster> clusters_;
};

}  // namespace tessera::io
