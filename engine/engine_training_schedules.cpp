// The engine's training schedules beside the lr: DeepSpeed's legacy curriculum, progressive
// layer drop and random-LTD (curriculum_learning.h, nn/progressive_layer_drop.h,
// nn/random_ltd.h).
#include "tessera/engine/data_efficiency_config.h"
#include "tessera/engine/engine.h"
#include "tessera/engine/progressive_layer_drop_config.h"

namespace tessera::engine {

void Engine::build_training_schedules() {
  const DataSamplingConfig& sampling = data_efficiency_config(config_).data_sampling;
  if (curriculum_learning_config(config_).enabled) {
    curriculum_ = std::make_unique<CurriculumScheduler>(curriculum_learning_config(config_));
  } else if (const CurriculumMetricConfig* m = sampling.sequence_metric();
             sampling.curriculum && m && m->name == "seqlen_truncate") {
    // (the sampler's length metric cuts samples as the legacy curriculum does)
    curriculum_ = std::make_unique<CurriculumScheduler>(m->schedule);
  }
  if (sampling.curriculum)
    for (const CurriculumMetricConfig& m : sampling.metrics)
      if (!m.sequence_length()) sampling_difficulties_.emplace_back(m.name, m.schedule);
  if (const ProgressiveLayerDropConfig& pld = progressive_layer_drop_config(config_); pld.enabled)
    layer_drop_ = std::make_shared<nn::ProgressiveLayerDrop>(pld.options, config_.train.seed);
  if (const DataEfficiencyConfig& de = data_efficiency_config(config_); de.random_ltd)
    token_drop_ = std::make_shared<nn::RandomLayerTokenDrop>(de.random_ltd_options,
                                                             static_cast<uint64_t>(de.seed));
}

std::optional<int64_t> Engine::curriculum_seqlen(int64_t step) {
  if (!curriculum_) return std::nullopt;
  return curriculum_->difficulty_for_step(step);
}

void Engine::set_custom_curriculum_schedule(std::function<int64_t(int64_t)> schedule) {
  TS_CHECK(curriculum_ && curriculum_->config().schedule_type == "custom",
           "engine.set_custom_curriculum_schedule: the config's curriculum_learning is ",
           curriculum_ ? "\"" + curriculum_->config().schedule_type + "\"" : std::string("off"),
           "; a custom schedule needs \"schedule_type\": \"custom\"");
  curriculum_->set_custom_schedule(std::move(schedule));
}

void Engine::add_schedule_events(std::vector<MonitorEvent>& events) {
  const int64_t ran = global_steps_ - 1;  // the step just taken
  if (curriculum_)
    events.push_back({"Train/Samples/curriculum_seqlen",
                      static_cast<double>(curriculum_->difficulty_for_step(ran)),
                      global_samples()});
  for (auto& [name, scheduler] : sampling_difficulties_)
    events.push_back({"Train/Samples/curriculum_difficulty_" + name,
                      static_cast<double>(scheduler.difficulty_for_step(ran)), global_samples()});
  if (layer_drop_)
    events.push_back({"Train/Samples/pld_theta", layer_drop_->theta_at(ran), global_samples()});
  if (token_drop_)
    events.push_back({"Train/Samples/random_ltd_reserved_length",
                      static_cast<double>(token_drop_->reserved_length_for_step(ran)),
                      global_samples()});
}

}  // namespace tessera::engine
