#include "tessera/engine/data_sampling_config.h"

#include <algorithm>

#include "tessera/io/window_metrics.h"

namespace tessera::engine {

namespace {

void describe_metric(io::config::Section& m) {
  m.notes({{"index_to_sample_path",
            "DeepSpeed's data-analyzer index (PREFIX of .bin/.idx): rows of sample ids in the "
            "metric's order (not needed for vocabularyrarity, which Tessera computes)"},
           {"index_to_metric_path", "the analyzer's value of each row (value-based metrics)"},
           {"difficulty_type", "\"value\" (metric <= difficulty) or \"percentile\""},
           {"clustering_type",
            "\"schedule_based\" (samples admitted by difficulty) or \"single_cluster\" "
            "(seqlen_truncate, seqlen_reshape)"},
           {"min_difficulty", "the first steps' difficulty"},
           {"max_difficulty", "the difficulty once the schedule ends (percentile: all samples)"},
           {"schedule_type", "fixed_linear, fixed_root or fixed_discrete"},
           {"schedule_config", "the schedule's parameters, as curriculum_learning's"}});
}

CurriculumMetricConfig parse_metric(io::config::Section& m, const std::string& name, bool on) {
  describe_metric(m);
  CurriculumMetricConfig c;
  c.name = name;
  m.get("index_to_sample_path", c.index_to_sample_path);
  m.get("index_to_metric_path", c.index_to_metric_path);
  m.get("difficulty_type", c.difficulty_type);
  m.get("clustering_type", c.clustering_type);
  CurriculumLearningConfig::parse_schedule(m, c.schedule, on, "a curriculum metric");
  m.warn_unknown();
  if (!on) return c;
  for (const char* k : {"difficulty_type", "clustering_type"})
    TS_CHECK(m.has(k), m.source(), ": '", m.key(k), "' is required (DeepSpeed requires it too)");
  m.expect("difficulty_type", c.difficulty_type == "value" || c.difficulty_type == "percentile",
           c.difficulty_type, "\"value\" or \"percentile\"");
  m.expect("clustering_type",
           c.clustering_type == "schedule_based" || c.clustering_type == "single_cluster",
           c.clustering_type, "\"schedule_based\" or \"single_cluster\"");
  m.expect("schedule_type", c.schedule.schedule_type != "custom", c.schedule.schedule_type,
           "fixed_linear, fixed_root or fixed_discrete (a custom schedule is C++: give "
           "io::CurriculumDataSampler the difficulties you compute)");
  const bool single = c.clustering_type == "single_cluster";
  if (c.sequence_length()) {
    m.expect("clustering_type", single, c.clustering_type,
             "\"single_cluster\" (" + name + " sets the sequence length; it admits every sample)");
    m.expect("difficulty_type", c.difficulty_type == "value", c.difficulty_type,
             "\"value\" (" + name + "'s difficulty is the sequence length in tokens)");
    return c;
  }
  TS_CHECK(!single, m.source(), ": '", m.key("clustering_type"),
           "' is \"single_cluster\": such a metric admits every sample, and Tessera acts on "
           "the single-cluster metrics seqlen_truncate and seqlen_reshape only");
  const auto& built = io::built_in_window_metrics();
  const bool built_in = std::find(built.begin(), built.end(), name) != built.end();
  if (c.index_to_sample_path.empty()) {
    TS_CHECK(built_in, m.source(), ": '", m.key("index_to_sample_path"), "' is required: '", name,
             "' is not a metric Tessera computes (vocabularyrarity); give DeepSpeed "
             "data-analyzer files for it");
  } else if (c.difficulty_type == "value") {
    TS_CHECK(!c.index_to_metric_path.empty(), m.source(), ": '", m.key("index_to_metric_path"),
             "' is required with index_to_sample_path for difficulty_type \"value\"");
  }
  return c;
}

}  // namespace

const CurriculumMetricConfig* DataSamplingConfig::sequence_metric() const {
  for (const CurriculumMetricConfig& m : metrics)
    if (m.sequence_length()) return &m;
  return nullptr;
}

bool DataSamplingConfig::clusters() const {
  return std::any_of(metrics.begin(), metrics.end(),
                     [](const CurriculumMetricConfig& m) { return !m.sequence_length(); });
}

void DataSamplingConfig::parse(io::config::Section& s, DataSamplingConfig& out) {
  s.notes({{"", "DeepSpeed's data-efficiency sampler: curriculum by metrics of the samples"},
           {"enabled",
            "DeepSpeed's switch of the section (as in DeepSpeed, curriculum_learning.enabled "
            "alone turns the sampler on)"},
           {"num_epochs", "passes over the training windows the run may read (more: an error)"},
           {"num_workers",
            "DeepSpeed's loader processes; Tessera reads windows from its memory-mapped token "
            "cache in the training process, so none are needed (accepted for DeepSpeed configs)"},
           {"pin_memory", "DeepSpeed's pinned batches (accepted; batches are built in-process)"},
           {"curriculum_learning", "the metrics and their schedules"},
           {"dynamic_batching", "DeepSpeed's token-budget batches (not built: true is an error)"}});
  s.get("enabled", out.enabled);
  s.get_min<int64_t>("num_epochs", out.num_epochs, 1, "a positive integer");
  s.get_min<int64_t>("num_workers", out.num_workers, 0, "an integer >= 0");
  s.get("pin_memory", out.pin_memory);
  io::config::Section c = s.sub("curriculum_learning");
  c.notes({{"enabled", "sample by the metrics' difficulties (DeepSpeedDataSampler)"},
           {"data_cluster_path",
            "where DeepSpeed writes its cluster files; Tessera rebuilds clusters in memory "
            "from the checkpoint, so nothing is written there (accepted for DeepSpeed configs)"},
           {"curriculum_metrics",
            "{NAME: {index_to_sample_path, index_to_metric_path, difficulty_type, "
            "clustering_type, min_difficulty, max_difficulty, schedule_type, schedule_config}}: "
            "NAME vocabularyrarity is computed by Tessera, seqlen_truncate and seqlen_reshape "
            "set the sequence length, any other needs DeepSpeed data-analyzer files"}});
  c.get("enabled", out.curriculum);
  c.get("data_cluster_path", out.data_cluster_path);
  const nlohmann::json& metrics = c.raw("curriculum_metrics", "object");
  TS_CHECK(metrics.is_null() || metrics.is_object(), s.source(), ": '", c.key("curriculum_metrics"),
           "' must be an object of metrics, found ", metrics.dump());
  if (out.curriculum)
    TS_CHECK(metrics.is_object() && !metrics.empty(), s.source(), ": '",
             c.key("curriculum_metrics"), "' is required (at least one metric) with '",
             c.key("enabled"), "'");
  if (metrics.is_object()) {
    io::config::Section all = c.sub("curriculum_metrics");
    for (const std::string& name : all.stated_keys()) {
      io::config::Section m = all.sub(name);
      out.metrics.push_back(parse_metric(m, name, out.curriculum));
    }
  }
  c.warn_unknown();
  if (out.curriculum) {
    int sequence = 0;
    for (const CurriculumMetricConfig& m : out.metrics) sequence += m.sequence_length() ? 1 : 0;
    TS_CHECK(sequence <= 1, s.source(), ": '", c.key("curriculum_metrics"),
             "' names both seqlen_truncate and seqlen_reshape; one sets the sequence length");
  }
  io::config::Section d = s.sub("dynamic_batching");
  bool dynamic = false;
  d.get("enabled", dynamic);
  d.note("enabled", "not built: true is an error");
  TS_CHECK(!dynamic, s.source(), ": '", d.key("enabled"),
           "' is true: DeepSpeed's dynamic batching (token-budget batches with lr scaling) is "
           "not built in Tessera yet");
}

}  // namespace tessera::engine
