// The training loop, for any model the engine runs (nn::LossModel<Batch>) and any data:
//
//   auto engine = engine::initialize(model, config);
//   io::RepeatingLoader<Example, Rows> train(io::DataLoader<Example, Rows>(dataset, {...},
//   collate)); engine::Trainer<Rows> trainer(*engine, train);          // options from the config
//   trainer.set_eval_data([&] { return std::make_unique<...>(...); });
//   if (resuming) trainer.resume("checkpoints");
//   engine::TrainResult r = trainer.fit();
//
// fit() runs optimizer steps until global step `steps`: every micro-batch forward, backward and
// step (gradient accumulation as the config says), a progress line every steps_per_print
// steps (loss, lr, samples or tokens per second, ETA), Train/Samples/train_loss and
// Eval/val_loss to the engine's monitors (which also get the engine's lr, loss scale and, with
// wall_clock_breakdown, its timers), evaluation every
// eval_interval steps and at the end, checkpoints every checkpoint_interval steps and at the end,
// and on SIGINT/SIGTERM a checkpoint of the last completed step before it returns (a second signal
// stops at once). Checkpoints hold the data position, so resume() continues with the batches a
// straight run would read.
#pragma once
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/batch_source.h"
#include "tessera/parallel/comms_logger.h"

namespace tessera::engine {

struct TrainerOptions {
  int64_t steps = 1000;        // train until this global step
  int64_t eval_interval = 0;   // evaluate every N steps (and always at the end)
  int64_t eval_iters = 20;     // batches per evaluation
  std::string checkpoint_dir;  // with checkpoint_interval: periodic checkpoints
  int64_t checkpoint_interval = 0;
  int64_t keep_last = 0;  // step<N> checkpoints kept in checkpoint_dir (0: all)
  std::string save_dir;   // a checkpoint at the end (and on a signal) also here
  int64_t steps_per_print = 10;
  int64_t tokens_per_sample = 0;  // > 0: progress in tokens/s, else samples/s
  bool handle_signals = true;     // SIGINT/SIGTERM stop with a checkpoint

  // steps, eval_interval, eval_iters, checkpoint_dir/interval, keep_last (train.*) and
  // steps_per_print from the config.
  static TrainerOptions from_config(const io::TrainConfig& config);
};

struct TrainResult {
  int64_t step = 0;                                              // the global step reached
  int64_t steps_run = 0;                                         // optimizer steps this fit() ran
  double train_loss = std::numeric_limits<double>::quiet_NaN();  // the last step's loss, averaged
                                                                 // over micro-batches and ranks
  double val_loss =
      std::numeric_limits<double>::quiet_NaN();  // the last evaluation's (NaN without eval data)
  double seconds = 0.0;                          // training time, evaluation excluded
  double samples_per_s = 0.0, tokens_per_s = 0.0;
  int stop_signal = 0;  // SIGINT/SIGTERM when a signal stopped training, else 0
  std::map<std::string, parallel::CommsLogger::OpStats> comms;  // the training steps' communication
  std::map<std::string, parallel::CommsLogger::OpStats>
      tp_comms;  // ... in the tensor-parallel group
  // MoE: ... in the expert-parallel group (all-to-alls) and the expert-data-parallel group
  // (the experts' gradients), and the last step's load-balancing loss (NaN without MoE).
  std::map<std::string, parallel::CommsLogger::OpStats> ep_comms, expert_dp_comms;
  double moe_aux_loss = std::numeric_limits<double>::quiet_NaN();
};

// What the loop does, whatever the batch type; Trainer<Batch> supplies the data.
class TrainLoop {
 public:
  TrainLoop(Engine& engine, TrainerOptions options);
  virtual ~TrainLoop() = default;

  TrainResult fit();
  // Loads the checkpoint (DIR/TAG; empty tag: DIR/latest) with the data position (a checkpoint
  // without one, e.g. saved by the engine alone, leaves the data where it is, with a warning);
  // returns the client state the client_state hook saved (null when none).
  nlohmann::json resume(const std::string& dir, const std::string& tag = "");
  // A checkpoint tagged step<N> in `dir` (collective), then keep_last.
  void save(const std::string& dir);
  // Mean loss over eval_iters batches of fresh eval data, averaged over ranks (NaN without).
  double evaluate();

  const TrainerOptions& options() const { return options_; }
  Engine& engine() { return engine_; }

  // Hooks, all optional. client_state: saved in each checkpoint (returned by resume);
  // extra_files: written into each checkpoint (name -> contents); sample: text printed at the
  // end of fit() (run by rank 0, or by every rank under ZeRO-3 or tensor parallelism, whose
  // gathers are collective; rank 0 prints it).
  std::function<nlohmann::json()> client_state;
  std::function<std::map<std::string, std::string>()> extra_files;
  std::function<std::string()> sample;

 protected:
  // The next micro-batch's loss (engine.forward on it).
  virtual Tensor forward_next() = 0;
  // The loss of each of `n` batches of fresh evaluation data; empty without eval data.
  virtual std::vector<double> eval_losses(int64_t n) = 0;
  virtual nlohmann::json data_state() const = 0;
  virtual void set_data_state(const nlohmann::json& state) = 0;
  // One optimizer step (gradient_accumulation_steps micro-batches); returns the mean loss
  // over them and the ranks. (A pipeline's trainer runs its engine's train_batch instead.)
  virtual double train_step(StepStats& stats);

 private:
  void print_progress(int64_t step, double loss, const StepStats& stats, double rate, double eta_s);
  void remove_old_checkpoints(const std::string& dir, const std::string& newest) const;
  // CSV monitor, progress line and wall-clock breakdown after a step.
  void report_step(const TrainResult& r, const StepStats& stats);
  // A SIGINT/SIGTERM any rank has received (0: none), agreed by all.
  int agreed_stop_signal();
  // After the loop: the final evaluation, checkpoint and sample, or the stop checkpoint.
  void finish(TrainResult& r);
  // save(dir) unless this step was just saved there.
  void save_once(const std::string& dir);
  // Tokens a sample of `step` trains (tokens_per_sample, or the curriculum's shorter length).
  double tokens_per_sample(int64_t step);

  Engine& engine_;
  TrainerOptions options_;
  bool tty_ = false;
  int start_threads_ = 1;
  std::string last_saved_;  // directory and step of the newest checkpoint fit() wrote
  double tokens_run_ = 0;   // tokens fit() has trained
};

template <class Batch>
class Trainer : public TrainLoop {
 public:
  using EvalData = std::function<std::unique_ptr<io::BatchSource<Batch>>()>;

  Trainer(Engine& engine, io::BatchSource<Batch>& train_data, TrainerOptions options)
      : TrainLoop(engine, std::move(options)), train_data_(train_data) {}
  Trainer(Engine& engine, io::BatchSource<Batch>& train_data)
      : Trainer(engine, train_data, TrainerOptions::from_config(engine.config())) {}

  // Evaluation data: a fresh source for every evaluation, so each one sees the same batches.
  void set_eval_data(EvalData make) { eval_data_ = std::move(make); }

 protected:
  Tensor forward_next() override { return engine().forward(train_data_.next()); }
  std::vector<double> eval_losses(int64_t n) override {
    std::vector<double> out;
    if (!eval_data_) return out;
    auto source = eval_data_();
    NoGradGuard no_grad;
    for (int64_t i = 0; i < n; ++i) out.push_back(engine().forward(source->next()).item());
    return out;
  }
  nlohmann::json data_state() const override { return train_data_.state(); }
  void set_data_state(const nlohmann::json& state) override { train_data_.set_state(state); }

 private:
  io::BatchSource<Batch>& train_data_;
  EvalData eval_data_;
};

}  // namespace tessera::engine
