#include "tessera/parallel/pipeline_config.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/pipe_schedule_registry.h"

namespace tessera::parallel {

void PipelineConfig::parse(io::config::Section& s, PipelineConfig& p) {
  using io::config::json;
  s.notes(
      {{"", "pipeline parallelism: the model's layers cut into stages"},
       {"stages", "pipeline stages (the job's ranks: stages x data-parallel x tensor-parallel)"},
       {"partition",
        "how layers are balanced over stages: by parameters, uniformly, or the "
        "layers whose type matches REGEX"},
       {"seed_layers",
        "each layer's initial weights from its own seed (any stage count "
        "draws the same weights)"},
       {"activation_checkpoint_interval",
        "layers per activation checkpoint in each stage (0: none)"},
       {"schedule", "the pipeline schedule (`tessera pipeline-schedules`)"},
       {"virtual_stages", "model chunks per stage (0: the schedule's default)"}});
  const std::string stages_default = std::to_string(p.stages);
  if (const json& v = s.raw("stages", "integer or \"auto\"", stages_default); !v.is_null()) {
    if (v.is_string()) {
      TS_CHECK(v.get<std::string>() == "auto", s.source(), ": '", s.key("stages"),
               "' must be a positive integer or \"auto\", found ", v.dump());
      p.stages = 1;  // DeepSpeed's "auto": the module decides; the built-in models: one stage
    } else {
      s.get_min<int64_t>("stages", p.stages, 1, "a positive integer or \"auto\"");
    }
  }
  s.get("partition", p.partition);
  if (p.partition == "best") p.partition = "parameters";
  s.expect(
      "partition",
      p.partition == "parameters" || p.partition == "uniform" || p.partition.rfind("type:", 0) == 0,
      p.partition, "\"parameters\", \"best\", \"uniform\" or \"type:REGEX\"");
  s.get("seed_layers", p.seed_layers);
  s.get_min<int64_t>("activation_checkpoint_interval", p.activation_checkpoint_interval, 0,
                     ">= 0 (0 = off)");
  s.ignored<bool>("pipe_partitioned", "activations go whole from stage to stage");
  s.ignored<bool>("grad_partitioned", "gradients go whole from stage to stage");
  // The schedule's name and Megatron's virtual pipeline stages (model chunks per stage) are
  // checked against the pipeline schedule registry by check_pipeline_schedule, the section's
  // check (run after the whole file is read).
  s.get("schedule", p.schedule);
  s.get_min<int64_t>("virtual_stages", p.virtual_stages, 1, "a positive integer");
}

const PipelineConfig& pipeline_config(const io::TrainConfig& cfg) {
  return cfg.section<PipelineConfig>();
}
PipelineConfig& pipeline_config(io::TrainConfig& cfg) {
  return cfg.section<PipelineConfig>();
}

void refuse_pipeline_stages(const io::TrainConfig& cfg, const std::string& key,
                            const std::string& why) {
  const int64_t stages = pipeline_config(cfg).stages;
  TS_CHECK(stages == 1, cfg.source, ": '", key,
           "' needs a model without pipeline stages (pipeline.stages is ", stages, "): ", why);
}

namespace {
const io::RegisterConfigSection<PipelineConfig> kPipelineSection{"pipeline",
                                                                 check_pipeline_schedule};
}  // namespace

}  // namespace tessera::parallel
