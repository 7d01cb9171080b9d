#include "tessera/trial/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/error.h"
#include "tessera/io/json_fields.h"

namespace tessera::trial {

const char* step_mode_name(StepMode mode) {
  switch (mode) {
    case StepMode::STEP_EVERY_EPOCH:
      return "STEP_EVERY_EPOCH";
    case StepMode::STEP_EVERY_BATCH:
      return "STEP_EVERY_BATCH";
    case StepMode::MANUAL_STEP:
      return "MANUAL_STEP";
    case StepMode::STEP_EVERY_OPTIMIZER_STEP:
      return "STEP_EVERY_OPTIMIZER_STEP";
  }
  return "?";
}

namespace {

std::vector<double> group_lrs(const optim::Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const auto& g : optimizer.groups()) lrs.push_back(g.lr);
  return lrs;
}

}  // namespace

ScheduledLR::ScheduledLR(optim::Optimizer& optimizer, std::unique_ptr<optim::LRSchedule> schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  TS_CHECK(schedule_, "ScheduledLR: no schedule");
  optimizer_.set_lr(schedule_->lr(0));
}

void ScheduledLR::step() {
  optimizer_.set_lr(schedule_->lr(++last_epoch_));
}

std::vector<double> ScheduledLR::get_last_lr() const {
  return group_lrs(optimizer_);
}

void ScheduledLR::load_state_dict(const nlohmann::json& state) {
  const io::JsonFields f(state, "ScheduledLR state");
  last_epoch_ = f.integer("last_epoch");
  TS_CHECK(last_epoch_ >= 0, "ScheduledLR state: last_epoch ", last_epoch_, " < 0");
  optimizer_.set_lr(schedule_->lr(last_epoch_));
}

ReduceLROnPlateau::ReduceLROnPlateau(optim::Optimizer& optimizer, Options options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const Options& o = options_;
  TS_CHECK(o.mode == "min" || o.mode == "max", "ReduceLROnPlateau: mode '", o.mode,
           "' is not min or max");
  TS_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs",
           "ReduceLROnPlateau: threshold_mode '", o.threshold_mode, "' is not rel or abs");
  TS_CHECK(o.factor < 1.0, "ReduceLROnPlateau: factor ", o.factor, " must be < 1.0");
  TS_CHECK(o.patience >= 0 && o.cooldown >= 0,
           "ReduceLROnPlateau: patience and cooldown must be >= 0");
  best_ = o.mode == "min" ? std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::infinity();
}

bool ReduceLROnPlateau::is_better(double a) const {
  const Options& o = options_;
  if (o.mode == "min")
    return o.threshold_mode == "rel" ? a < best_ * (1.0 - o.threshold) : a < best_ - o.threshold;
  return o.threshold_mode == "rel" ? a > best_ * (1.0 + o.threshold) : a > best_ + o.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // no bad epochs counted in cooldown
  }
  if (num_bad_epochs_ > options_.patience) {
    for (auto& g : optimizer_.groups()) {
      const double reduced = std::max(g.lr * options_.factor, options_.min_lr);
      if (g.lr - reduced > options_.eps) g.lr = reduced;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

void ReduceLROnPlateau::step() {
  fail(
      "ReduceLROnPlateau: step() needs the metric, step(metric); wrap it with "
      "StepMode::MANUAL_STEP and step it from a callback's on_validation_end");
}

std::vector<double> ReduceLROnPlateau::get_last_lr() const {
  return group_lrs(optimizer_);
}

nlohmann::json ReduceLROnPlateau::state_dict() const {
  // best may be +-inf before the first step: JSON has no infinity, so it is stored as null.
  return {{"best", std::isfinite(best_) ? nlohmann::json(best_) : nlohmann::json()},
          {"num_bad_epochs", num_bad_epochs_},
          {"cooldown_counter", cooldown_counter_},
          {"last_epoch", last_epoch_},
          {"lrs", get_last_lr()}};
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& state) {
  const io::JsonFields f(state, "ReduceLROnPlateau state");
  if (!state.at("best").is_null()) best_ = state.at("best").get<double>();
  num_bad_epochs_ = f.integer("num_bad_epochs");
  cooldown_counter_ = f.integer("cooldown_counter");
  last_epoch_ = f.integer("last_epoch");
  const auto lrs = state.at("lrs").get<std::vector<double>>();
  auto& groups = optimizer_.groups();
  TS_CHECK(lrs.size() == groups.size(), "ReduceLROnPlateau state: ", lrs.size(),
           " learning rates for ", groups.size(), " parameter groups");
  for (size_t i = 0; i < lrs.size(); ++i) groups[i].lr = lrs[i];
}

}  // namespace tessera::trial
