// DeepSpeed's "pipeline" section (deepspeed/runtime/config.py get_pipeline_config), owned here
// beside the pipeline module and schedules, with Tessera's schedule keys: the models as
// pipelines of `stages` stages (adjacent groups of ranks: rank = (stage x data-parallel size +
// data rank) x autotp_size + tensor rank); "auto" or 1 is no pipeline. partition: "parameters"
// ("best", DeepSpeed's default, means it), "uniform", "type:REGEX". Registered with io's
// config reader, which divides the job's ranks by the stages before it reads the batch triple;
// its check is check_pipeline_schedule (pipe_schedule_registry.h).
//
//   const parallel::PipelineConfig& p = parallel::pipeline_config(cfg);
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "tessera/io/config_section.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::parallel {

struct PipelineConfig {
  int64_t stages = 1;
  std::string partition = "parameters";
  bool seed_layers = false;
  int64_t activation_checkpoint_interval = 0;
  // A registered pipeline schedule and its virtual stages, the model chunks per stage (0: the
  // schedule's default); check_pipeline_schedule checks both and sets the default.
  std::string schedule = "1f1b";
  int64_t virtual_stages = 0;

  static void parse(io::config::Section& s, PipelineConfig& out);
  std::pair<std::string, int64_t> replica_ranks() const { return {"pipeline.stages", stages}; }
};

// The config's pipeline section (its defaults when the file has none).
const PipelineConfig& pipeline_config(const io::TrainConfig& cfg);
PipelineConfig& pipeline_config(io::TrainConfig& cfg);
// For a section that cannot run over pipeline stages: with more than one, an error naming the
// section's `key`, the stage count and `why`.
void refuse_pipeline_stages(const io::TrainConfig& cfg, const std::string& key,
                            const std::string& why);

}  // namespace tessera::parallel
