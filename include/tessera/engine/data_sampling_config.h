// DeepSpeed's data_efficiency.data_sampling section: curriculum learning by metrics of the
// samples (io/curriculum_data_sampler.h). As in DeepSpeed, curriculum_learning.enabled alone
// switches it on; each metric names its schedule (the legacy curriculum's keys) and either
// DeepSpeed data-analyzer index files or a metric Tessera computes ("vocabularyrarity"), and
// the metrics "seqlen_truncate" / "seqlen_reshape" (single_cluster) set the training sequence
// length as Megatron-DeepSpeed's post-processing does. launch/train_data.h builds the batches.
//
//   "data_efficiency": {"enabled": true, "seed": 1234, "data_sampling": {"enabled": true,
//     "num_epochs": 1, "curriculum_learning": {"enabled": true, "data_cluster_path": "clusters",
//       "curriculum_metrics": {"vocabularyrarity": {"difficulty_type": "percentile",
//         "clustering_type": "schedule_based", "min_difficulty": 1, "max_difficulty": 100,
//         "schedule_type": "fixed_root", "schedule_config": {"total_curriculum_step": 1000,
//           "difficulty_step": 1, "root_degree": 2}}}}}}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/engine/curriculum_learning.h"
#include "tessera/io/config_section.h"

namespace tessera::engine {

struct CurriculumMetricConfig {
  std::string name;
  std::string index_to_sample_path, index_to_metric_path;  // DeepSpeed's data-analyzer files
  std::string difficulty_type;                             // "value" or "percentile"
  std::string clustering_type;                             // "schedule_based" or "single_cluster"
  CurriculumLearningConfig schedule;

  bool sequence_length() const { return name == "seqlen_truncate" || name == "seqlen_reshape"; }
};

struct DataSamplingConfig {
  bool enabled = false;  // data_sampling.enabled (DeepSpeed reads curriculum's switch alone)
  int64_t num_epochs = 1000, num_workers = 0;
  bool pin_memory = false;
  bool curriculum = false;  // curriculum_learning.enabled: the sampler is on
  std::string data_cluster_path;
  std::vector<CurriculumMetricConfig> metrics;

  // The metric that sets the sequence length (seqlen_truncate or seqlen_reshape), if any.
  const CurriculumMetricConfig* sequence_metric() const;
  // Whether any metric clusters the samples (schedule_based).
  bool clusters() const;

  static void parse(io::config::Section& s, DataSamplingConfig& out);
};

}  // namespace tessera::engine
