// The engine's training schedules beside the lr: DeepSpeed's legacy curriculum, progressive
// layer drop and random-LTD (curriculum_learning.h, nn/progressive_layer_drop.h,
// nn/random_ltd.h).
#include "tessera/engine/engine.h"

namespace tessera::engine {

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
  if (layer_drop_)
    events.push_back({"Train/Samples/pld_theta", layer_drop_->theta_at(ran), global_samples()});
  if (token_drop_)
    events.push_back({"Train/Samples/random_ltd_reserved_length",
                      static_cast<double>(token_drop_->reserved_length_for_step(ran)),
                      global_samples()});
}

}  // namespace tessera::engine
