// DeepSpeed's "pipeline" section (deepspeed/runtime/config.py get_pipeline_config) with
// Tessera's schedule key.
#include "config_sections.h"

namespace tessera::io::config {

void parse_pipeline(Section s, TrainConfig& c) {
  auto& p = c.pipeline;
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
  // checked against the pipeline schedule registry by parallel::check_pipeline_schedule, which
  // parse() runs with the other registered checks.
  s.get("schedule", p.schedule);
  s.get_min<int64_t>("virtual_stages", p.virtual_stages, 1, "a positive integer");
  s.note("virtual_stages", "model chunks per stage (0: the schedule's default)");
  s.warn_unknown();
}

}  // namespace tessera::io::config
