// Determined's PyTorchTrialContext in C++: what a trial gets in its constructor to build its
// model, optimizer and data (hyperparameters, batch sizes, the slot it runs on) and to train
// (wrap_model / wrap_optimizer / wrap_lr_scheduler, backward, step_optimizer), plus the
// harness's view of where training is (current batch, epoch start/end, stop requests).
//
//   struct MyTrial : trial::Trial<Rows> {
//     explicit MyTrial(trial::TrialContext& c) : Trial(c) {
//       model = c.wrap_model(std::make_shared<Net>());
//       opt = c.wrap_optimizer(std::make_shared<optim::SGD>(groups, c.get_hparam("lr")));
//     }
//     trial::BatchMetrics train_batch(const Rows& b, int64_t, int64_t) override {
//       Tensor loss = model->loss(b);
//       context.backward(loss);
//       context.step_optimizer(*opt);
//       return loss;
//     }
//   };
//
// On N slots (mpirun -np N) every slot runs the same trial on its share of each global batch;
// backward averages the gradients across slots (as DistributedDataParallel), so N slots
// train the model one slot trains with the same global batch.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/io/event_file_writer.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/grad_buckets.h"
#include "tessera/parallel/process_group.h"
#include "tessera/trial/experiment_config.h"
#include "tessera/trial/lr_scheduler.h"
#include "tessera/trial/metric_reducer.h"

namespace tessera::trial {

// Determined's context.distributed.
struct DistributedContext {
  int rank = 0, size = 1;              // this slot among the trial's slots
  int local_rank = 0, local_size = 1;  // among the slots on this machine
  int cross_rank = 0, cross_size = 1;  // this machine among the trial's machines
  int get_rank() const { return rank; }
  int get_size() const { return size; }
  int get_local_rank() const { return local_rank; }
  bool is_chief() const { return rank == 0; }
};

// What the harness knows before the trial exists.
struct TrialInfo {
  ExperimentConfig config;
  std::map<std::string, nlohmann::json> hparams;
  int64_t trial_id = 1;
  // The experiment's identity (the runner's, for a trial of an experiment; "" for a trial run
  // on its own). With trial_id and the hyperparameters it decides which checkpoints are this
  // trial's to resume.
  std::string experiment_uuid;
  uint64_t trial_seed = 0;
  std::string trial_dir;  // checkpoints, metrics and TensorBoard events of this trial
  std::shared_ptr<parallel::ProcessGroup> group;
  Device device = Device::cpu();
};

class TrialHarness;

class TrialContext {
 public:
  explicit TrialContext(TrialInfo info);
  virtual ~TrialContext();
  TrialContext(const TrialContext&) = delete;
  TrialContext& operator=(const TrialContext&) = delete;

  // The model the trial trains: its parameters are synchronised across slots before training,
  // its gradients averaged by backward(), its weights saved in checkpoints (in wrap order).
  template <class M>
  std::shared_ptr<M> wrap_model(std::shared_ptr<M> model) {
    add_model(model);
    return model;
  }
  // An optimizer whose state is saved in checkpoints; step it with step_optimizer().
  template <class O>
  std::shared_ptr<O> wrap_optimizer(std::shared_ptr<O> optimizer) {
    add_optimizer(optimizer);
    return optimizer;
  }
  // A scheduler the harness steps as `mode` says, every `frequency` batches or epochs; its
  // state is saved in checkpoints.
  template <class S>
  std::shared_ptr<S> wrap_lr_scheduler(std::shared_ptr<S> scheduler, StepMode mode,
                                       int64_t frequency = 1) {
    add_lr_scheduler(scheduler, mode, frequency);
    return scheduler;
  }
  // Custom metric reducers (see metric_reducer.h).
  template <class R>
  std::shared_ptr<R> wrap_reducer(std::shared_ptr<R> reducer,
                                  std::optional<std::string> name = std::nullopt,
                                  bool for_training = true, bool for_validation = true) {
    return reducers_.wrap_reducer(std::move(reducer), std::move(name), for_training,
                                  for_validation);
  }
  std::shared_ptr<SimpleReducer> wrap_reducer(SimpleReducer::Fn fn,
                                              std::optional<std::string> name = std::nullopt,
                                              bool for_training = true,
                                              bool for_validation = true) {
    return reducers_.wrap_reducer(std::move(fn), std::move(name), for_training, for_validation);
  }

  // loss.backward(), averaging the gradients across slots on the batches that end an
  // aggregation window (optimizations.aggregation_frequency); the others only accumulate.
  void backward(const Tensor& loss);
  // The optimizer's step on the batches that end an aggregation window (a no-op on the
  // others): gradients divided by aggregation_frequency (average_aggregated_gradients),
  // clip_grads(parameters) when given, step, and zero_grad when auto_zero_grads.
  using ClipGrads = std::function<void(const std::vector<Tensor>& params)>;
  void step_optimizer(optim::Optimizer& optimizer, const ClipGrads& clip_grads = {},
                      bool auto_zero_grads = true);

  // A hyperparameter's value (its constant, or the searcher's choice); an error names the
  // hyperparameters there are.
  const nlohmann::json& get_hparam(const std::string& name) const;
  const std::map<std::string, nlohmann::json>& get_hparams() const { return info_.hparams; }
  // hyperparameters.global_batch_size, split evenly over the slots.
  int64_t get_global_batch_size() const;
  int64_t get_per_slot_batch_size() const;
  const ExperimentConfig& get_experiment_config() const { return info_.config; }
  const nlohmann::json& get_data_config() const { return info_.config.data; }
  int64_t get_trial_id() const { return info_.trial_id; }
  uint64_t get_trial_seed() const { return info_.trial_seed; }
  // The batch training (re)started from: 0, or the checkpoint's.
  int64_t get_initial_batch() const { return initial_batch_; }

  DistributedContext distributed;
  Device device() const { return info_.device; }
  // The batch on this trial's device (a Tensor, or a batch type with to(Device)).
  template <class B>
  B to_device(const B& batch) const {
    if constexpr (requires { batch.to(info_.device); }) return batch.to(info_.device);
    return batch;
  }

  // Where training is: the index of the batch being trained (from 0 across epochs), its epoch,
  // and whether it opens or closes one. Errors before training starts.
  int64_t current_train_batch() const;
  int64_t current_train_epoch() const;
  bool is_epoch_start() const;
  bool is_epoch_end() const;

  // A stop request ends training after this batch (at the end of an aggregation window),
  // with a checkpoint, as SIGTERM does: the trial exits STOPPED and resumes when run again.
  bool get_stop_requested() const { return stop_requested_; }
  void set_stop_requested(bool stop) { stop_requested_ = stop; }

  // This slot's TensorBoard event writer (rank 0: TRIAL_DIR/tensorboard, where the harness
  // writes its metrics too; rank r: TRIAL_DIR/tensorboard/rank<r>), created on first use.
  io::EventFileWriter& get_tensorboard_writer();
  std::string get_tensorboard_path() const;

  const std::vector<std::shared_ptr<nn::Module>>& models() const { return models_; }
  const std::vector<std::shared_ptr<optim::Optimizer>>& optimizers() const { return optimizers_; }
  parallel::ProcessGroup& group() { return *info_.group; }
  std::shared_ptr<parallel::ProcessGroup> group_ptr() const { return info_.group; }
  const TrialInfo& info() const { return info_; }

 protected:
  friend class TrialHarness;
  struct WrappedScheduler {
    std::shared_ptr<LRScheduler> scheduler;
    StepMode mode;
    int64_t frequency;
  };
  void add_model(std::shared_ptr<nn::Module> model);
  void add_optimizer(std::shared_ptr<optim::Optimizer> optimizer);
  void add_lr_scheduler(std::shared_ptr<LRScheduler> scheduler, StepMode mode, int64_t frequency);
  // Whether the current batch ends an aggregation window (Determined's
  // _should_communicate_and_update).
  bool should_communicate_and_update() const;
  // The global batch size when the trial does not take it from hyperparameters (DeepSpeed
  // trials: the engine's train_batch_size); 0: from hyperparameters.
  virtual int64_t engine_global_batch_size() const { return 0; }

  TrialInfo info_;
  ReducerContext reducers_;
  std::vector<std::shared_ptr<nn::Module>> models_;
  std::vector<std::shared_ptr<optim::Optimizer>> optimizers_;
  std::vector<WrappedScheduler> schedulers_;
  std::unique_ptr<parallel::GradBuckets> buckets_;  // N slots: built by the first backward
  std::unique_ptr<io::EventFileWriter> tensorboard_;
  std::optional<int64_t> current_batch_idx_, epoch_len_;
  int64_t initial_batch_ = 0;
  bool stop_requested_ = false;
};

}  // namespace tessera::trial
