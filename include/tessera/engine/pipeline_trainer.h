// engine::Trainer's loop for a pipeline: each optimizer step is one PipelineEngine::train_batch
// and each evaluation one eval_batch of eval_iters micro-batches; progress, monitors,
// evaluation, checkpoints and signals as the Trainer's (trainer.h), through the stage's
// Engine.
//
//   engine::PipelineTrainer<Rows> trainer(*pipe, train, [](const Rows& r) {
//     return engine::PipeMicroBatch{{r.x}, {r.y}};
//   });
//   trainer.fit();
//
// The data source is read only on the stages that need data (the first and the last), one
// batch per micro-batch.
#pragma once
#include <cmath>
#include <functional>
#include <memory>

#include "tessera/engine/pipeline_engine.h"
#include "tessera/engine/trainer.h"

namespace tessera::engine {

template <class Batch>
class PipelineTrainer : public TrainLoop {
 public:
  using ToMicroBatch = std::function<PipeMicroBatch(const Batch&)>;
  using EvalData = std::function<std::unique_ptr<io::BatchSource<Batch>>()>;

  PipelineTrainer(PipelineEngine& pipe, io::BatchSource<Batch>& train_data, ToMicroBatch convert,
                  TrainerOptions options)
      : TrainLoop(pipe.stage_engine(), std::move(options)),
        pipe_(pipe),
        train_data_(train_data),
        convert_(std::move(convert)) {}

  void set_eval_data(EvalData make) { eval_data_ = std::move(make); }

 protected:
  double train_step(StepStats& stats) override {
    const double loss = pipe_.train_batch([&] { return convert_(train_data_.next()); });
    stats = pipe_.last_step();
    TS_CHECK(std::isfinite(loss) || engine().config().fp16.enabled, "trainer: the loss is ", loss,
             " at step ", engine().global_steps(), "; lower the learning rate or check the data");
    return loss;
  }
  Tensor forward_next() override {
    fail("PipelineTrainer: a pipeline's micro-batches run in train_batch");
  }
  std::vector<double> eval_losses(int64_t n) override {
    if (!eval_data_) return {};
    auto source = eval_data_();
    return {pipe_.eval_batch([&] { return convert_(source->next()); }, n)};
  }
  nlohmann::json data_state() const override { return train_data_.state(); }
  void set_data_state(const nlohmann::json& state) override { train_data_.set_state(state); }

 private:
  PipelineEngine& pipe_;
  io::BatchSource<Batch>& train_data_;
  ToMicroBatch convert_;
  EvalData eval_data_;
};

}  // namespace tessera::engine
