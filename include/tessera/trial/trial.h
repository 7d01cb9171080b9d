// Determined's trial classes in C++: PyTorchTrial (trial::Trial) and DeepSpeedTrial. A trial
// says how to build its model and data (constructor and build_*_data_loader), what one
// training batch and one evaluation batch do; the harness (trial::run, trial_harness.h) runs
// the loop, validation, checkpoints, metrics and preemption.
#pragma once
#include <concepts>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "tessera/engine/engine.h"
#include "tessera/trial/batch_metrics.h"
#include "tessera/trial/callback.h"
#include "tessera/trial/data_loader.h"
#include "tessera/trial/reducer.h"
#include "tessera/trial/trial_context.h"

namespace tessera::trial {

// evaluation_reducer(): one reducer for every metric, or one per metric name.
using EvaluationReducer = std::variant<Reducer, std::map<std::string, Reducer>>;
using Callbacks = std::map<std::string, std::shared_ptr<PyTorchCallback>>;

// Determined's data_length: the records in a batch (its first dimension).
template <class Batch>
int64_t default_batch_length(const Batch& batch) {
  if constexpr (std::is_base_of_v<TensorBase, Batch>) {
    return batch.dim() > 0 ? batch.size(0) : 1;
  } else if constexpr (requires {
                         { batch.size() } -> std::convertible_to<int64_t>;
                       }) {
    return static_cast<int64_t>(batch.size());
  } else if constexpr (requires { batch.input_ids.size(0); }) {
    return batch.input_ids.size(0);
  } else if constexpr (requires { batch.x.size(0); }) {
    return batch.x.size(0);
  } else {
    fail("get_batch_length: override it for this batch type (the records in a batch)");
  }
}

// What PyTorchTrial and DeepSpeedTrial share: the data loaders, full-dataset evaluation, the
// reducer, callbacks, batch length and extra checkpoint state of the trial's own.
template <class BatchT, class ContextT>
class TrialBase {
 public:
  using Batch = BatchT;
  using Context = ContextT;
  explicit TrialBase(Context& context) : context(context) {}
  virtual ~TrialBase() = default;

  virtual DataLoader<Batch> build_training_data_loader() = 0;
  virtual DataLoader<Batch> build_validation_data_loader() = 0;
  virtual nlohmann::json evaluate_full_dataset(SlotLoader<Batch>& /*loader*/) {
    evaluate_full_dataset_defined_ = false;
    return nlohmann::json::object();
  }
  virtual EvaluationReducer evaluation_reducer() { return Reducer::AVG; }
  virtual Callbacks build_callbacks() { return {}; }
  virtual int64_t get_batch_length(const Batch& batch) { return default_batch_length(batch); }
  // Extra state of the trial's own, written into / read from each checkpoint directory (the
  // chief writes; every slot reads).
  virtual void save(Context& /*context*/, const std::string& /*path*/) {}
  virtual void load(Context& /*context*/, const std::string& /*path*/) {}

  // Cleared by the default evaluate_batch / evaluate_full_dataset: the harness learns which
  // one the trial defines (C++ cannot ask whether a virtual is overridden).
  bool evaluate_batch_defined_ = true, evaluate_full_dataset_defined_ = true;

 protected:
  Context& context;
};

// Determined's PyTorchTrial. Define evaluate_batch (evaluated on every slot, reduced by
// evaluation_reducer) or evaluate_full_dataset (run by the chief over the whole validation
// set), not both.
template <class BatchT>
class Trial : public TrialBase<BatchT, TrialContext> {
 public:
  using TrialBase<BatchT, TrialContext>::TrialBase;
  // One batch: forward, context.backward, context.step_optimizer; the loss or named metrics.
  virtual BatchMetrics train_batch(const BatchT& batch, int64_t epoch_idx, int64_t batch_idx) = 0;
  virtual BatchMetrics evaluate_batch(const BatchT& /*batch*/, int64_t /*batch_idx*/) {
    this->evaluate_batch_defined_ = false;
    return Metrics{};
  }
};

// Determined's ModelParallelUnit: which data-parallel slot this rank is, and whether it
// builds data loaders and reports metrics (under tensor or pipeline parallelism only some
// ranks do).
struct ModelParallelUnit {
  int data_parallel_rank = 0;
  int data_parallel_world_size = 1;
  bool should_report_metrics = true;
  bool should_build_data_loader = true;
};

// Determined's DeepSpeedTrialContext: the TrialContext plus the engines a trial wraps.
class DeepSpeedTrialContext : public TrialContext {
 public:
  explicit DeepSpeedTrialContext(TrialInfo info);
  // The engine the trial trains with (engine::initialize's): saved and restored in every
  // checkpoint (engine.save_checkpoint), its train_batch_size is the trial's global batch.
  std::shared_ptr<engine::Engine> wrap_model_engine(std::shared_ptr<engine::Engine> engine);
  void set_mpu(ModelParallelUnit mpu);
  const ModelParallelUnit& mpu() const { return mpu_; }
  // The engine's train_micro_batch_size_per_gpu and gradient_accumulation_steps.
  int64_t get_train_micro_batch_size_per_gpu() const;
  int64_t get_num_micro_batches_per_slot() const;
  int64_t get_data_parallel_world_size() const { return mpu_.data_parallel_world_size; }
  int64_t get_data_parallel_rank() const { return mpu_.data_parallel_rank; }
  // train_batch pulls every micro-batch of a batch itself (called once per batch, not once
  // per micro-batch).
  void disable_auto_grad_accumulation() { manual_grad_accumulation_ = true; }
  bool manual_grad_accumulation() const { return manual_grad_accumulation_; }
  // A hyperparameter-driven engine config: the base config file's values overwritten by
  // `overrides` (overwrite_deepspeed_config), parsed as a TrainConfig.
  io::TrainConfig deepspeed_config(const std::string& base_path,
                                   const nlohmann::json& overrides) const;
  const std::vector<std::shared_ptr<engine::Engine>>& engines() const { return engines_; }

 protected:
  int64_t engine_global_batch_size() const override;

 private:
  std::vector<std::shared_ptr<engine::Engine>> engines_;
  ModelParallelUnit mpu_;
  bool manual_grad_accumulation_ = false;
};

// Determined's DeepSpeedTrial: train_batch and evaluate_batch pull micro-batches from an
// iterator; by default the harness calls train_batch gradient_accumulation_steps times per
// batch, each pulling one micro-batch and calling the engine's forward, backward and step.
template <class BatchT>
class DeepSpeedTrial : public TrialBase<BatchT, DeepSpeedTrialContext> {
 public:
  using TrialBase<BatchT, DeepSpeedTrialContext>::TrialBase;
  virtual BatchMetrics train_batch(DataLoaderIterator<BatchT>& iter, int64_t epoch_idx,
                                   int64_t batch_idx) = 0;
  virtual BatchMetrics evaluate_batch(DataLoaderIterator<BatchT>& /*iter*/, int64_t /*batch_idx*/) {
    this->evaluate_batch_defined_ = false;
    return Metrics{};
  }
};

}  // namespace tessera::trial
