#include "tessera/trial/trial_context.h"

#include <filesystem>

#include "tessera/error.h"
#include "tessera/grad_mode.h"
#include "tessera/parallel/launcher_env.h"
#include "tessera/trial/batch_metrics.h"

namespace tessera::trial {

MetricValue::MetricValue(const Tensor& t) {
  TS_CHECK(t.defined() && t.numel() == 1,
           "trial metrics: a metric tensor must hold one value, got ",
           t.defined() ? t.describe() : std::string("an undefined tensor"));
  value_ = t.item();
}

TrialContext::TrialContext(TrialInfo info) : info_(std::move(info)) {
  TS_CHECK(info_.group, "TrialContext: no process group");
  distributed.rank = info_.group->rank();
  distributed.size = info_.group->size();
  distributed.local_rank = parallel::launcher_local_rank().value_or(distributed.rank);
  distributed.local_size = parallel::launcher_local_size().value_or(distributed.size);
  distributed.cross_size = std::max(1, distributed.size / std::max(1, distributed.local_size));
  distributed.cross_rank = distributed.rank / std::max(1, distributed.local_size);
}

TrialContext::~TrialContext() = default;

void TrialContext::add_model(std::shared_ptr<nn::Module> model) {
  TS_CHECK(model, "context.wrap_model: no model");
  TS_CHECK(!buckets_, "context.wrap_model: models must be wrapped before the first backward");
  models_.push_back(std::move(model));
}

void TrialContext::add_optimizer(std::shared_ptr<optim::Optimizer> optimizer) {
  TS_CHECK(optimizer, "context.wrap_optimizer: no optimizer");
  optimizers_.push_back(std::move(optimizer));
}

void TrialContext::add_lr_scheduler(std::shared_ptr<LRScheduler> scheduler, StepMode mode,
                                    int64_t frequency) {
  TS_CHECK(scheduler, "context.wrap_lr_scheduler: no scheduler");
  TS_CHECK(frequency >= 1, "context.wrap_lr_scheduler: frequency ", frequency, " < 1");
  schedulers_.push_back({std::move(scheduler), mode, frequency});
}

bool TrialContext::should_communicate_and_update() const {
  TS_CHECK(current_batch_idx_, "the trial's training has not started (no current batch)");
  return (*current_batch_idx_ + 1) % info_.config.aggregation_frequency == 0;
}

void TrialContext::backward(const Tensor& loss) {
  TS_CHECK(loss.defined() && loss.numel() == 1, "context.backward: expected a scalar loss, got ",
           loss.defined() ? loss.describe() : std::string("an undefined tensor"));
  TS_CHECK(loss.requires_grad(), "context.backward: the loss ", loss.describe(),
           " does not require grad (computed under NoGradGuard, or from no parameter?)");
  if (distributed.size == 1) {
    loss.backward();
    return;
  }
  if (!buckets_) {
    TS_CHECK(!models_.empty(), "context.backward on ", distributed.size,
             " slots needs the model wrapped (context.wrap_model) to average its gradients");
    std::vector<Tensor*> slots;
    for (const auto& m : models_)
      for (auto& [name, t] : m->named_parameters()) slots.push_back(t);
    parallel::GradBuckets::Options o;
    o.post_scale = 1.0 / distributed.size;  // DistributedDataParallel's average
    buckets_ = std::make_unique<parallel::GradBuckets>(info_.group, slots,
                                                       parallel::GradBuckets::Mode::AllReduce, o);
  }
  buckets_->begin_backward(should_communicate_and_update());
  loss.backward();
  buckets_->end_backward();
}

void TrialContext::step_optimizer(optim::Optimizer& optimizer, const ClipGrads& clip_grads,
                                  bool auto_zero_grads) {
  const int64_t aggregation = info_.config.aggregation_frequency;
  TS_CHECK(aggregation == 1 || auto_zero_grads,
           "context.step_optimizer: with optimizations.aggregation_frequency ", aggregation,
           " > 1, auto_zero_grads must be true");
  if (!should_communicate_and_update()) return;
  std::vector<Tensor> params;
  for (const auto& g : optimizer.groups())
    for (const auto& p : g.params) params.push_back(p);
  if (aggregation > 1) {  // average_aggregated_gradients
    NoGradGuard no_grad;
    for (auto& p : params)
      if (p.grad().defined()) p.grad().mul_(1.0 / static_cast<double>(aggregation));
  }
  if (clip_grads) clip_grads(params);
  optimizer.step();
  if (auto_zero_grads) optimizer.zero_grad();
}

const nlohmann::json& TrialContext::get_hparam(const std::string& name) const {
  auto it = info_.hparams.find(name);
  if (it == info_.hparams.end()) {
    std::string have;
    for (const auto& [k, v] : info_.hparams) have += (have.empty() ? "" : ", ") + k;
    fail("context.get_hparam: no hyperparameter '", name, "' (the experiment has ",
         have.empty() ? std::string("none") : have, ")");
  }
  return it->second;
}

int64_t TrialContext::get_global_batch_size() const {
  if (const int64_t engine = engine_global_batch_size(); engine > 0) return engine;
  auto it = info_.hparams.find("global_batch_size");
  TS_CHECK(it != info_.hparams.end(),
           "the trial needs 'hyperparameters.global_batch_size' in the experiment config "
           "(Determined's required batch size hyperparameter)");
  TS_CHECK(it->second.is_number_integer() && it->second.get<int64_t>() > 0,
           "'hyperparameters.global_batch_size' must be a positive integer, found ",
           it->second.dump());
  return it->second.get<int64_t>();
}

int64_t TrialContext::get_per_slot_batch_size() const {
  const int64_t global = get_global_batch_size();
  TS_CHECK(global % distributed.size == 0, "global_batch_size ", global,
           " does not split evenly over ", distributed.size, " slots (resources.slots_per_trial)");
  return global / distributed.size;
}

int64_t TrialContext::current_train_batch() const {
  TS_CHECK(current_batch_idx_, "context.current_train_batch: training has not started");
  return *current_batch_idx_;
}

int64_t TrialContext::current_train_epoch() const {
  TS_CHECK(epoch_len_, "context.current_train_epoch: the training data loader is not built yet");
  return current_train_batch() / *epoch_len_;
}

bool TrialContext::is_epoch_start() const {
  TS_CHECK(epoch_len_, "context.is_epoch_start: the training data loader is not built yet");
  return current_train_batch() % *epoch_len_ == 0;
}

bool TrialContext::is_epoch_end() const {
  TS_CHECK(epoch_len_, "context.is_epoch_end: the training data loader is not built yet");
  return current_train_batch() % *epoch_len_ == *epoch_len_ - 1;
}

std::string TrialContext::get_tensorboard_path() const {
  const std::filesystem::path base = std::filesystem::path(info_.trial_dir) / "tensorboard";
  return distributed.rank == 0 ? base.string()
                               : (base / ("rank" + std::to_string(distributed.rank))).string();
}

io::EventFileWriter& TrialContext::get_tensorboard_writer() {
  if (!tensorboard_) tensorboard_ = std::make_unique<io::EventFileWriter>(get_tensorboard_path());
  return *tensorboard_;
}

}  // namespace tessera::trial
