// TrialRunnerFor<T>: the harness's typed side for a trial class T (a trial::Trial<Batch> or a
// trial::DeepSpeedTrial<Batch>): data loaders, the batch loop body, evaluation.
#pragma once
#include <memory>
#include <optional>
#include <type_traits>

#include "tessera/grad_mode.h"
#include "tessera/trial/trial.h"
#include "tessera/trial/trial_harness.h"

namespace tessera::trial {

template <class T>
class TrialRunnerFor : public TrialRunner {
 public:
  using Batch = typename T::Batch;
  static constexpr bool kDeepSpeed = std::is_base_of_v<DeepSpeedTrial<Batch>, T>;
  using Context = typename T::Context;

  TrialRunnerFor(T& trial, Context& context)
      : trial_(trial), context_(context), callbacks_(trial.build_callbacks()) {}

  Callbacks& callbacks() override { return callbacks_; }

  void build_data_loaders() override {
    int rank = context_.distributed.rank, world = context_.distributed.size;
    if constexpr (kDeepSpeed) {
      if (!context_.mpu().should_build_data_loader) return;
      rank = context_.mpu().data_parallel_rank;
      world = context_.mpu().data_parallel_world_size;
    }
    train_ = trial_.build_training_data_loader().build(rank, world);
    validation_ = std::make_unique<DataLoader<Batch>>(trial_.build_validation_data_loader());
  }

  int64_t local_epoch_length() override {
    if (!train_) return 0;
    return train_->size() / micro_batches_per_call();
  }

  void train_batch(int64_t epoch_idx, int64_t batch_idx, std::vector<Metrics>& metrics,
                   int64_t& records) override {
    if constexpr (kDeepSpeed) {
      const int64_t calls =
          context_.manual_grad_accumulation() ? 1 : context_.get_num_micro_batches_per_slot();
      CountingIterator it(train_.get(), trial_, records);
      for (int64_t i = 0; i < calls; ++i) {
        BatchMetrics m = trial_.train_batch(it, epoch_idx, batch_idx);
        if (context_.mpu().should_report_metrics) metrics.push_back(std::move(m.values));
      }
    } else {
      std::optional<Batch> b = train_->next();
      if (!b) b = train_->next();  // the next epoch
      TS_CHECK(b, "the training data loader yields no batches");
      records += trial_.get_batch_length(*b);
      metrics.push_back(trial_.train_batch(context_.to_device(*b), epoch_idx, batch_idx).values);
    }
  }

  Evaluation evaluate() override {
    Evaluation e;
    e.reducer = trial_.evaluation_reducer();
    NoGradGuard no_grad;
    if (!full_dataset_) {
      auto loader = validation_ ? validation_->build(slot_rank(), slot_world()) : nullptr;
      evaluate_batches(loader.get(), e);
      if (trial_.evaluate_batch_defined_) return e;
      full_dataset_ = true;
      e.batch_metrics.clear();
      e.records = 0;
    }
    e.full_dataset = true;
    if (context_.distributed.is_chief()) {
      auto loader = validation_->build(0, 1);
      e.metrics = trial_.evaluate_full_dataset(*loader);
      TS_CHECK(trial_.evaluate_full_dataset_defined_,
               "the trial defines neither evaluate_batch() nor evaluate_full_dataset(); define "
               "one (evaluate_batch is evaluated on every slot)");
      TS_CHECK(e.metrics.is_object(),
               "evaluate_full_dataset must return an object of metric "
               "names to values, got ",
               e.metrics.dump());
    }
    return e;
  }

  nlohmann::json data_state() const override { return train_ ? train_->state() : nlohmann::json(); }
  void set_data_state(const nlohmann::json& state) override {
    if (train_ && !state.is_null()) train_->set_state(state);
  }
  void save_user_state(const std::string& dir) override { trial_.save(context_, dir); }
  void load_user_state(const std::string& dir) override { trial_.load(context_, dir); }
  bool reports_metrics() const override {
    if constexpr (kDeepSpeed) return context_.mpu().should_report_metrics;
    return true;
  }

 private:
  // Counts the records of the micro-batches a DeepSpeedTrial pulls.
  class CountingIterator : public DataLoaderIterator<Batch> {
   public:
    CountingIterator(SlotLoader<Batch>* loader, T& trial, int64_t& records, bool repeat = true)
        : DataLoaderIterator<Batch>(loader, repeat), trial_(trial), records_(records) {}
    Batch next() override {
      Batch b = DataLoaderIterator<Batch>::next();
      records_ += trial_.get_batch_length(b);
      return b;
    }

   private:
    T& trial_;
    int64_t& records_;
  };

  int64_t micro_batches_per_call() const {
    if constexpr (kDeepSpeed)
      if (!context_.manual_grad_accumulation()) return context_.get_num_micro_batches_per_slot();
    return 1;
  }
  int slot_rank() const {
    if constexpr (kDeepSpeed) return context_.mpu().data_parallel_rank;
    return context_.distributed.rank;
  }
  int slot_world() const {
    if constexpr (kDeepSpeed) return context_.mpu().data_parallel_world_size;
    return context_.distributed.size;
  }

  void evaluate_batches(SlotLoader<Batch>* loader, Evaluation& e) {
    if constexpr (kDeepSpeed) {
      const bool builds = context_.mpu().should_build_data_loader;
      const int64_t n = builds && loader ? loader->size() : 0;
      CountingIterator it(loader, trial_, e.records, false);
      for (int64_t i = 0; i < n; ++i) {
        BatchMetrics m = trial_.evaluate_batch(it, i);
        if (!trial_.evaluate_batch_defined_) return;
        if (context_.mpu().should_report_metrics) e.batch_metrics.push_back(std::move(m.values));
      }
    } else {
      int64_t i = 0;
      while (auto b = loader->next()) {
        e.records += trial_.get_batch_length(*b);
        BatchMetrics m = trial_.evaluate_batch(context_.to_device(*b), i++);
        if (!trial_.evaluate_batch_defined_) return;
        e.batch_metrics.push_back(std::move(m.values));
      }
    }
  }

  T& trial_;
  Context& context_;
  Callbacks callbacks_;
  std::unique_ptr<SlotLoader<Batch>> train_;
  std::unique_ptr<DataLoader<Batch>> validation_;
  bool full_dataset_ = false;
};

}  // namespace tessera::trial
