#include "tessera/engine/curriculum_learning.h"

#include <cmath>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/pipeline_config.h"

namespace tessera::engine {

namespace {

// Every key is read, whatever the schedule (the config reference lists them all).
void parse_schedule_config(io::config::Section& sc, CurriculumLearningConfig& out) {
  sc.notes({{"total_curriculum_step",
             "fixed_linear, fixed_root: steps from min_difficulty to max_difficulty"},
            {"difficulty_step", "fixed_linear, fixed_root: each difficulty is a multiple of it"},
            {"root_degree", "fixed_root: the root of the step fraction (2: square root)"},
            {"difficulty", "fixed_discrete: the difficulties in order"},
            {"max_step", "fixed_discrete: the last global step of each difficulty but the last"}});
  sc.get_min<int64_t>("total_curriculum_step", out.total_curriculum_step, 1, "a positive integer");
  sc.get_min<int64_t>("difficulty_step", out.difficulty_step, 1, "a positive integer");
  sc.get("root_degree", out.root_degree);
  sc.expect("root_degree", out.root_degree > 0 || !sc.has("root_degree"), out.root_degree,
            "a positive number");
  const char* expected = "a list of at least 1 non-negative integers";
  out.difficulty = sc.non_negative_integers("difficulty", 1, expected);
  out.max_step = sc.non_negative_integers("max_step", 1, expected);
}

// The keys schedule_type needs, once it is known to be one.
void check_schedule_config(io::config::Section& sc, const CurriculumLearningConfig& out) {
  const std::string& type = out.schedule_type;
  if (type == "fixed_linear" || type == "fixed_root") {
    for (const char* k : {"total_curriculum_step", "difficulty_step"})
      TS_CHECK(sc.has(k), sc.source(), ": '", sc.key(k), "' is required by schedule_type \"", type,
               "\"");
  }
  if (type == "fixed_root")
    TS_CHECK(sc.has("root_degree"), sc.source(), ": '", sc.key("root_degree"),
             "' is required by schedule_type \"fixed_root\"");
  if (type == "fixed_discrete") {
    TS_CHECK(!out.difficulty.empty() && !out.max_step.empty(), sc.source(), ": '",
             sc.key("difficulty"), "' and '", sc.key("max_step"),
             "' are required by schedule_type \"fixed_discrete\"");
    TS_CHECK(out.difficulty.size() == out.max_step.size() + 1, sc.source(), ": '",
             sc.key("difficulty"), "' has ", out.difficulty.size(), " entries and '",
             sc.key("max_step"), "' ", out.max_step.size(),
             ": expected one difficulty more than max steps (the last holds after them)");
    for (int64_t d : out.difficulty)
      TS_CHECK(d >= 1, sc.source(), ": '", sc.key("difficulty"),
               "' has a difficulty of 0: a sequence needs at least one token");
  }
}

// What the section's keys say, for the config reference.
void describe(io::config::Section& s) {
  s.notes({{"",
            "DeepSpeed's legacy curriculum: sequences grow from min_difficulty to "
            "max_difficulty tokens over training (docs/training.md)"},
           {"enabled", "cut the training sequences on the schedule"},
           {"schedule_config", "the schedule's parameters (by schedule_type)"},
           {"curriculum_type", "\"seqlen\": the difficulty is the training sequence length"},
           {"min_difficulty", "the first steps' length"},
           {"max_difficulty", "the length once the schedule ends"},
           {"schedule_type",
            "fixed_linear, fixed_root, fixed_discrete, or custom (C++: "
            "Engine::set_custom_curriculum_schedule)"}});
}

}  // namespace

void CurriculumLearningConfig::parse(io::config::Section& s, CurriculumLearningConfig& out) {
  describe(s);
  s.get("enabled", out.enabled);
  s.get("curriculum_type", out.curriculum_type);
  parse_schedule(s, out, out.enabled, "curriculum_learning");
  if (!out.enabled) return;
  // DeepSpeed's engine cuts sequences for "seqlen" alone; another type would train unchanged.
  s.expect("curriculum_type", out.curriculum_type == "seqlen", out.curriculum_type,
           "\"seqlen\" (the only curriculum DeepSpeed's engine applies)");
}

void CurriculumLearningConfig::parse_schedule(io::config::Section& s, CurriculumLearningConfig& out,
                                              bool on, const std::string& what) {
  s.get("schedule_type", out.schedule_type);
  s.get_min<int64_t>("min_difficulty", out.min_difficulty, 1, "a positive integer");
  s.get_min<int64_t>("max_difficulty", out.max_difficulty, 1, "a positive integer");
  io::config::Section sc = s.sub("schedule_config");
  parse_schedule_config(sc, out);
  if (!on) return;
  for (const char* k : {"min_difficulty", "max_difficulty", "schedule_type"})
    TS_CHECK(s.has(k), s.source(), ": '", s.key(k), "' is required with ", what);
  s.expect("max_difficulty", out.max_difficulty >= out.min_difficulty, out.max_difficulty,
           "at least min_difficulty (" + std::to_string(out.min_difficulty) + ")");
  const std::string& t = out.schedule_type;
  s.expect("schedule_type",
           t == "fixed_linear" || t == "fixed_root" || t == "fixed_discrete" || t == "custom", t,
           "one of \"fixed_linear\", \"fixed_root\", \"fixed_discrete\", \"custom\"");
  check_schedule_config(sc, out);
  // The first step's difficulty, rounded down to a multiple of difficulty_step, must not be 0
  // (the schedule only grows after it).
  if (t == "fixed_linear" || t == "fixed_root") {
    const int64_t first = CurriculumScheduler(out).scheduled(1);
    TS_CHECK(first >= 1, s.source(), ": '", sc.key("difficulty_step"), "' is ", out.difficulty_step,
             ": the first step's difficulty (from min_difficulty ", out.min_difficulty,
             ") rounds down to a multiple of it, 0");
  }
}

const CurriculumLearningConfig& curriculum_learning_config(const io::TrainConfig& cfg) {
  return cfg.section<CurriculumLearningConfig>();
}

CurriculumScheduler::CurriculumScheduler(CurriculumLearningConfig config)
    : config_(std::move(config)),
      replay_(config_.min_difficulty, config_.max_difficulty, /*first=*/1) {}

void CurriculumScheduler::set_custom_schedule(std::function<int64_t(int64_t)> schedule) {
  custom_ = std::move(schedule);
}

int64_t CurriculumScheduler::scheduled(int64_t global_steps) const {
  const CurriculumLearningConfig& c = config_;
  if (c.schedule_type == "fixed_discrete") {
    for (size_t i = 0; i < c.max_step.size(); ++i)
      if (global_steps <= c.max_step[i]) return c.difficulty[i];
    return c.difficulty.back();
  }
  if (c.schedule_type == "custom") {
    TS_CHECK(custom_,
             "curriculum_learning.schedule_type is \"custom\" but no schedule was set: "
             "call Engine::set_custom_curriculum_schedule before training");
    return custom_(global_steps);
  }
  // fixed_linear is fixed_root of degree 1.
  return nn::fixed_root_schedule(global_steps, c.total_curriculum_step,
                                 c.schedule_type == "fixed_root" ? c.root_degree : 1.0,
                                 c.min_difficulty, c.max_difficulty, c.difficulty_step);
}

int64_t CurriculumScheduler::difficulty_for_step(int64_t global_step) {
  TS_CHECK(global_step >= 0, "curriculum_learning: global step ", global_step, " is negative");
  // engine.forward's update_difficulty(global_steps + 1)
  return replay_.value_after(global_step + 1, [this](int64_t t) { return scheduled(t); });
}

namespace {

// DeepSpeed's pipeline engine never passes curriculum_seqlen (engine.py: "difficult to inject
// argument in forward pass"); a pipeline's stages exchange fixed shapes, so it is refused.
void check_curriculum_learning(io::TrainConfig& cfg) {
  if (!curriculum_learning_config(cfg).enabled) return;
  parallel::refuse_pipeline_stages(cfg, "curriculum_learning",
                                   "the stages exchange fixed shapes, and DeepSpeed's pipeline "
                                   "engine does not apply the curriculum either");
}

const io::RegisterConfigSection<CurriculumLearningConfig> kCurriculumLearningSection{
    "curriculum_learning", check_curriculum_learning};

}  // namespace

}  // namespace tessera::engine
