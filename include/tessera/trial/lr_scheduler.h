// Learning-rate schedulers a trial wraps (Determined's pytorch.LRScheduler): a scheduler
// with a position that sets its optimizer's lr, stepped by the harness as its StepMode says
// (context.wrap_lr_scheduler), or by the trial itself (MANUAL_STEP).
//
//   auto sched = context.wrap_lr_scheduler(
//       std::make_shared<trial::ScheduledLR>(*opt, std::make_unique<optim::WarmupLR>(...)),
//       trial::StepMode::STEP_EVERY_BATCH);
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/optim/lr_schedule.h"
#include "tessera/optim/optimizer.h"

namespace tessera::trial {

// Determined's LRScheduler.StepMode: when the harness calls step().
enum class StepMode {
  STEP_EVERY_EPOCH = 1,  // after every `frequency` epochs (at the optimizer step ending one)
  STEP_EVERY_BATCH = 2,  // after every `frequency` batches (caught up at optimizer steps)
  MANUAL_STEP = 3,       // never: the trial or a callback steps it
  STEP_EVERY_OPTIMIZER_STEP = 4,  // with the optimizer steps
};
const char* step_mode_name(StepMode mode);

// torch's _LRScheduler: a position (last_epoch) and the optimizer's lr it implies. Saved in
// every checkpoint.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  virtual void step() = 0;
  // The lr of each parameter group after the last step (torch's get_last_lr).
  virtual std::vector<double> get_last_lr() const = 0;
  virtual nlohmann::json state_dict() const = 0;
  virtual void load_state_dict(const nlohmann::json& state) = 0;
};

// An optim::LRSchedule (the lr as a function of the step, as the engine's schedules are)
// driven by step(), as torch's LambdaLR: construction sets the lr of step 0; step() moves to
// the next step and sets its lr on every group.
class ScheduledLR : public LRScheduler {
 public:
  ScheduledLR(optim::Optimizer& optimizer, std::unique_ptr<optim::LRSchedule> schedule);
  void step() override;
  std::vector<double> get_last_lr() const override;
  nlohmann::json state_dict() const override { return {{"last_epoch", last_epoch_}}; }
  void load_state_dict(const nlohmann::json& state) override;
  int64_t last_epoch() const { return last_epoch_; }

 private:
  optim::Optimizer& optimizer_;
  std::unique_ptr<optim::LRSchedule> schedule_;
  int64_t last_epoch_ = 0;
};

// torch.optim.lr_scheduler.ReduceLROnPlateau, with its defaults: step(metric) multiplies every
// group's lr by `factor` (not below min_lr, and only when the change exceeds eps) once the
// metric has not improved for more than `patience` steps, then waits `cooldown` steps.
// Improvement is relative ("rel": better than best * (1 -/+ threshold)) or absolute ("abs").
// step() without a metric is an error: it is stepped by the trial (MANUAL_STEP), typically
// from a callback's on_validation_end.
class ReduceLROnPlateau : public LRScheduler {
 public:
  struct Options {
    std::string mode = "min";  // "min" or "max"
    double factor = 0.1;
    int64_t patience = 10;
    double threshold = 1e-4;
    std::string threshold_mode = "rel";  // "rel" or "abs"
    int64_t cooldown = 0;
    double min_lr = 0.0;
    double eps = 1e-8;
  };
  explicit ReduceLROnPlateau(optim::Optimizer& optimizer) : ReduceLROnPlateau(optimizer, {}) {}
  ReduceLROnPlateau(optim::Optimizer& optimizer, Options options);
  void step(double metric);
  void step() override;  // an error: the metric is needed
  std::vector<double> get_last_lr() const override;
  nlohmann::json state_dict() const override;
  void load_state_dict(const nlohmann::json& state) override;
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

 private:
  bool is_better(double a) const;
  optim::Optimizer& optimizer_;
  Options options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace tessera::trial
