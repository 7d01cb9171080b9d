// DeepSpeed's legacy "curriculum_learning" section: training starts on short sequences and
// lengthens them on a schedule (Li et al., "The Stability-Efficiency Dilemma", 2021). The
// engine owns the schedule; each training forward of global step s sees the difficulty
// DeepSpeed's engine.forward sets, update_difficulty(s + 1), and the built-in models' batches
// are cut to that many tokens (launch/train_data.h). Evaluation sees whole sequences.
//
//   "curriculum_learning": {"enabled": true, "curriculum_type": "seqlen",
//     "min_difficulty": 8, "max_difficulty": 1024, "schedule_type": "fixed_linear",
//     "schedule_config": {"total_curriculum_step": 15000, "difficulty_step": 8}}
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/io/config_section.h"
#include "tessera/nn/capped_schedule.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::engine {

struct CurriculumLearningConfig {
  bool enabled = false;
  std::string curriculum_type = "seqlen";  // the only type DeepSpeed's engine acts on
  int64_t min_difficulty = 0, max_difficulty = 0;
  std::string schedule_type;  // fixed_linear, fixed_root, fixed_discrete, custom
  // schedule_config: fixed_linear and fixed_root's
  int64_t total_curriculum_step = 0, difficulty_step = 0;
  double root_degree = 0;  // fixed_root's
  // fixed_discrete's: difficulty[i] up to global step max_step[i], the last one after
  std::vector<int64_t> difficulty, max_step;

  static void parse(io::config::Section& s, CurriculumLearningConfig& out);
  // The schedule's keys (min_difficulty, max_difficulty, schedule_type, schedule_config) of
  // `s`, checked when `on`; errors say they are required "with `what`". (The data-efficiency
  // sampler's metrics have the same keys.)
  static void parse_schedule(io::config::Section& s, CurriculumLearningConfig& out, bool on,
                             const std::string& what);
};

// The config's curriculum_learning section (its defaults when the file has none).
const CurriculumLearningConfig& curriculum_learning_config(const io::TrainConfig& cfg);

// DeepSpeed's CurriculumScheduler (runtime/data_pipeline/curriculum_scheduler.py), as its
// engine drives it: the difficulty only moves while it is below max_difficulty, so it stays
// at the maximum once reached. difficulty_for_step() replays those updates from step 0, so any
// step (a resumed run's first) gets what a straight run had.
class CurriculumScheduler {
 public:
  explicit CurriculumScheduler(CurriculumLearningConfig config);
  // schedule_type "custom": difficulty = schedule(global step given to update_difficulty).
  void set_custom_schedule(std::function<int64_t(int64_t)> schedule);
  // The difficulty the training forwards of `global_step` (0-based) see.
  int64_t difficulty_for_step(int64_t global_step);
  // DeepSpeed's get_difficulty(global_steps): the schedule's value, before the max rule.
  int64_t scheduled(int64_t global_steps) const;
  const CurriculumLearningConfig& config() const { return config_; }

 private:
  CurriculumLearningConfig config_;
  std::function<int64_t(int64_t)> custom_;
  nn::CappedScheduleReplay replay_;  // DeepSpeed's update_difficulty(1), (2), ...
};

}  // namespace tessera::engine
