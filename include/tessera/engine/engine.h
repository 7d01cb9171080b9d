// The training engine, DeepSpeed's user model in C++:
//
//   auto engine = tessera::engine::initialize(model, config);
//   for (...) {
//     Tensor loss = engine->forward(batch);  // the model is an nn::LossModel<Batch>
//     engine->backward(loss);             // scales for accumulation (and fp16), accumulates
//     engine->step();                     // updates only at the accumulation boundary
//   }
//   engine->save_checkpoint("ckpt", "step100", client_state);
#pragma once
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <typeinfo>

#include "tessera/autograd/split_backward.h"
#include "tessera/engine/checkpoint_files.h"
#include "tessera/engine/checkpoint_state.h"
#include "tessera/engine/curriculum_learning.h"
#include "tessera/engine/engine_timers.h"
#include "tessera/engine/loss_scaler.h"
#include "tessera/engine/monitor.h"
#include "tessera/engine/trace_recorder.h"
#include "tessera/io/data_loader.h"
#include "tessera/io/train_config.h"
#include "tessera/nn/flops_profiler.h"
#include "tessera/nn/loss_model.h"
#include "tessera/nn/module.h"
#include "tessera/nn/progressive_layer_drop.h"
#include "tessera/nn/random_ltd.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/fp8_layers.h"
#include "tessera/parallel/grad_buckets.h"
#include "tessera/parallel/moe.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::engine {

// A checkpoint's HF model config (built-in models), beside engine.json in the tag directory.
inline constexpr const char* kModelConfigFile = "model_config.json";

struct StepStats {
  bool stepped = false;    // an optimizer update happened (false off-boundary or on overflow)
  bool overflow = false;   // fp16: inf/NaN gradients, step skipped
  double grad_norm = 0.0;  // before clipping (0 unless clipping or asked)
  double lr = 0.0;
  double loss_scale = 1.0;
};

// DeepSpeed's backward keyword arguments.
struct BackwardOptions {
  bool retain_graph = false;  // keep the graph for another backward through it
  bool scale_wrt_gas = true;  // divide the loss by gradient_accumulation_steps
  // false: this backward does not reduce gradients across ranks, even at the boundary
  // (DeepSpeed's older keyword, today's no_sync); not with ZeRO stage 2/3.
  bool allreduce_gradients = true;
};

// What load_checkpoint restores (DeepSpeed's keyword arguments, same defaults).
struct LoadCheckpointOptions {
  // Every parameter must be in the checkpoint and every saved weight a parameter; false
  // skips both (not with ZeRO, whose partitions need every parameter).
  bool load_module_strict = true;
  // false: the optimizer keeps its current state (a fresh engine's: no moments, step 0);
  // the float32 masters still come from the checkpoint.
  bool load_optimizer_states = true;
  // false: the schedule keeps its position (a fresh engine's: step 0).
  bool load_lr_scheduler_states = true;
  // true: weights only (warm start): steps, schedule, loss scaler, RNG and optimizer state
  // stay as they are.
  bool load_module_only = false;
};

// DeepSpeed's (load_path, client_state).
struct LoadedCheckpoint {
  std::string path;  // the tag directory loaded
  nlohmann::json client_state;
};

// DeepSpeed's initialize keyword arguments. Precedence as in DeepSpeed: a client optimizer
// replaces the config's "optimizer" section (a warning says so when both are given), a client
// schedule the config's "scheduler".
struct InitializeOptions {
  // A client optimizer object over the model's parameters (its groups, their lr and weight
  // decay are the parameter groups). Used as it is in float32 at stage 0; with mixed precision
  // or ZeRO the engine rebuilds it (Optimizer::rebuild) over the tensors it updates.
  std::unique_ptr<optim::Optimizer> optimizer;
  // Or DeepSpeed's callable form: builds the optimizer over the groups the engine hands it.
  optim::OptimizerFactory optimizer_factory;
  // DeepSpeed's model_parameters as groups with their own lr / weight decay, by parameter
  // name (for the config's optimizer or the factory). Empty: every parameter, decayed as the
  // config's weight_decay_1d says. A parameter in no group is not trained.
  std::vector<optim::ParamGroupSpec> model_parameters;
  // A client LR schedule (lr(step) for every group). Without one and without a config
  // "scheduler", each group keeps its own lr.
  std::unique_ptr<optim::LRSchedule> lr_scheduler;
  // The data-parallel group (default: the job's world).
  std::shared_ptr<parallel::ProcessGroup> group;
  // The tensor-parallel group of a model built with parallel/'s tensor-parallel layers (e.g.
  // models::GPT2LMHeadModel over a tensor-parallel group, or a pipeline stage's, 3D): the global
  // gradient norm then sums the shards over it and counts replicated parameters once; ZeRO
  // partitions each rank's shards; checkpoints keep a file per tensor-parallel rank with how they
  // merge.
  std::shared_ptr<parallel::ProcessGroup> tensor_parallel_group;
  // The model is one stage of a pipeline (engine::PipelineEngine builds this): the global
  // gradient norm sums the stages' squares over this group; the job's lead rank is stage 0's.
  std::shared_ptr<parallel::ProcessGroup> pipeline_group;
  // How checkpoints keep the weights and optimizer state (null: the engine's own files;
  // engine::PipelineEngine's stages: one file pair per layer, see checkpoint_files.h).
  std::shared_ptr<CheckpointFiles> checkpoint_files;
};

// DeepSpeed's lr_kwargs of step(): last_batch_iteration moves the schedule to that iteration
// (the next step then uses the lr that follows it).
struct LrKwargs {
  std::optional<int64_t> last_batch_iteration;
};

// On N ranks (mpirun), every rank builds the same model and engine over the world group:
// plain data parallelism averages gradients in buckets during backward; ZeRO stages 1-3
// partition optimizer state, gradients and parameters (zero_optimization.stage).
class Engine {
 public:
  Engine(nn::Module& model, io::TrainConfig config, InitializeOptions options);
  // group: the data-parallel group (default: the job's world).
  Engine(nn::Module& model, io::TrainConfig config,
         std::shared_ptr<parallel::ProcessGroup> group = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // DeepSpeed's engine(batch): the model's loss on the batch. The model implements
  // nn::LossModel<Batch> for the batch type it is given (the built-in models take
  // models::Batch); the batch is moved to the model's device when it can be, and on N ranks
  // weighted by its share of the global batch's loss terms (see nn/loss_model.h), so the
  // ranks' losses average to the global batch's.
  template <class Batch>
  Tensor forward(const Batch& batch) {
    auto* model = dynamic_cast<nn::LossModel<Batch>*>(&model_);
    if (!model) fail_not_loss_model(typeid(Batch));
    // flops_profiler: the profile step's training forwards are counted (rank 0), and its phases
    // timed; an evaluation run at that step is not part of the step.
    const bool profiling = flops_profiler_ && model_.is_training() &&
                           global_steps_ == config_.flops_profiler.profile_step;
    if (profiling) begin_profiled_forward();
    begin_forward();  // (before the timer: it may start a trace, which turns the timers on)
    const auto started = timers_.start();
    int64_t terms = 0;
    double weight = 0.0;  // 0: the model's own mean is already the right share
    if constexpr (nn::CountedBatch<Batch>) {
      terms = batch.loss_terms();
      weight = loss_weight(terms);
    }
    Tensor loss;
    const int64_t held = allocated_bytes();
    if constexpr (nn::DeviceMovableBatch<Batch> || nn::WeightedBatch<Batch>) {
      Batch local = batch;
      if constexpr (nn::DeviceMovableBatch<Batch>) local = batch.to(device());
      if constexpr (nn::WeightedBatch<Batch>) local.target_weight = weight;
      nn::ModuleScope scope(model_);
      loss = model->loss(local);
    } else {
      nn::ModuleScope scope(model_);
      loss = model->loss(batch);
    }
    if constexpr (nn::CountedBatch<Batch> && !nn::WeightedBatch<Batch>)
      if (weight != 0.0) loss = scaled(loss, weight * static_cast<double>(terms));
    timers_.stop(EngineTimers::Forward, started);
    if (model_.is_training() && loss.requires_grad())
      activation_bytes_ = std::max(activation_bytes_, allocated_bytes() - held);
    if (profiling) flops_profiler_->stop_profile();
    return loss.requires_grad() ? track_direct_backward(loss) : loss;
  }
  // The data-parallel weight of a batch with `terms` loss terms (nn/loss_model.h): N / (every
  // rank's terms), or 0 when the ranks hold equal numbers. Collective over the group (one
  // all-reduce); forward() applies it itself, a pipeline's last stage through its labels.
  double loss_weight(int64_t terms);
  // DeepSpeed's deepspeed_io: a DataLoader of `dataset` for this rank: micro-batches of
  // train_micro_batch_size_per_gpu (or batch_size), this rank's slice of each global batch,
  // shuffled with seed 0 + epoch for training (in order when !train, as DeepSpeed's eval
  // route), drop_last from the config's dataloader_drop_last.
  template <class Item, class Batch>
  io::DataLoader<Item, Batch> deepspeed_io(std::shared_ptr<const io::Dataset<Item>> dataset,
                                           typename io::DataLoader<Item, Batch>::Collate collate,
                                           bool train = true,
                                           std::optional<int64_t> batch_size = std::nullopt) {
    io::DataLoaderOptions o;
    o.batch_size = batch_size.value_or(config_.micro_batch_size);
    o.shuffle = train;
    o.rank = rank();
    o.world_size = world_size();
    o.drop_last = config_.dataloader_drop_last;
    return io::DataLoader<Item, Batch>(std::move(dataset), o, std::move(collate));
  }
  // DeepSpeed's backward(loss, retain_graph=False, scale_wrt_gas=True): loss /
  // gradient_accumulation_steps (when scale_wrt_gas) times the fp16 loss scale, then
  // backward; gradients are reduced across ranks when the micro-batch is a boundary (ZeRO-2/3:
  // every micro-batch). Returns the loss divided by the accumulation steps, as DeepSpeed.
  Tensor backward(const Tensor& loss, const BackwardOptions& options = {});
  // A backward the caller runs (`pass`: a pipeline stage's, from its outputs with the next
  // stage's gradients, or a zero-bubble schedule's deferred weight pass), counted, timed and
  // reduced across data-parallel ranks at the boundary as backward(loss) is; `what` names it
  // in the warning about a second backward before step().
  void reduced_backward_pass(const char* what, const std::function<void()>& pass);
  // A backward pass that touches no parameter's gradient and reduces nothing (a zero-bubble
  // schedule's input-gradient pass).
  template <class Pass>
  auto unreduced_backward_pass(Pass&& pass) {
    finish_direct_backward();
    return pass();
  }
  // What backward(loss) multiplies the loss by: the fp16 loss scale over the accumulation
  // steps (scale() applies the same factor).
  double loss_gradient_factor() const;
  // DeepSpeed's scale(loss) for a direct backward. A loss from forward() may be differentiated
  // directly, with engine.backward's results:
  //   engine->scale(engine->forward(batch)).backward();  engine->step();
  // scale() multiplies by the fp16 loss scale / gradient_accumulation_steps (without scale(),
  // the division by the accumulation steps happens as the gradient enters forward's loss); the
  // reduction across ranks finishes in step(). fp16 requires scale() (an error says so).
  Tensor scale(const Tensor& loss);
  // Called after every micro-batch's backward, as in DeepSpeed. At the boundary: unscale,
  // overflow check, clip, optimizer step, scheduler step, zero grads.
  StepStats step(const LrKwargs& lr_kwargs = {});
  // DeepSpeed's: whether the current micro-batch (the one whose backward comes next or has
  // just run, until step()) ends an accumulation window: (micro_steps + 1) % gas == 0, unless
  // set_gradient_accumulation_boundary has said otherwise.
  bool is_gradient_accumulation_boundary() const;
  // Overrides the count (DeepSpeed's): false before the first backwards of a window, true
  // before its last, then one step() updates. Stays in force until set again.
  void set_gradient_accumulation_boundary(bool is_boundary) { boundary_override_ = is_boundary; }
  // A batch run without forward() (engine::PipelineEngine's stages): starts the trace when
  // the step is in the trace window; trace_phase records one of its phases.
  void begin_batch_without_forward() { begin_forward(); }
  void trace_phase(const std::string& name, EngineTimers::Clock::time_point start,
                   EngineTimers::Clock::time_point end) {
    if (trace_ && trace_->recording()) trace_->phase(name.c_str(), start, end);
  }
  // Drops every gradient accumulated so far in this window (model, ZeRO partitions).
  void zero_grad();
  // The model's training mode (dropout on) or evaluation mode (DeepSpeed's engine.train/eval).
  void train(bool on = true) { model_.train(on); }
  void eval() { model_.train(false); }
  // The lr of each of the optimizer's parameter groups for the next step (DeepSpeed's list).
  std::vector<double> get_lr() const;
  // The gradient norm of the last step (before clipping, unscaled); nullopt before any step or
  // when that step did not compute one (stage 0 without fp16 or clipping), as in DeepSpeed.
  std::optional<double> get_global_grad_norm() const { return global_grad_norm_; }
  // flops_profiler: the figures and report of the profiled step, once it has run (rank 0).
  const std::optional<nn::ModelProfile>& flops_profile() const { return flops_profile_; }

  int64_t global_steps() const { return global_steps_; }
  // DeepSpeed's legacy curriculum_learning: the difficulty (the sequence length) the training
  // forwards of global step `step` see (DeepSpeed's curriculum_seqlen argument); nullopt
  // without the section. A program's own loop cuts its batches to it.
  std::optional<int64_t> curriculum_seqlen(int64_t step);
  std::optional<int64_t> curriculum_seqlen() { return curriculum_seqlen(global_steps_); }
  // schedule_type "custom": the difficulty for the step DeepSpeed passes to
  // update_difficulty (global step + 1), as set_custom_curriculum_learning_schedule.
  void set_custom_curriculum_schedule(std::function<int64_t(int64_t)> schedule);
  // progressive_layer_drop: the state the model's layers read (null without the section); the
  // engine moves it to each training forward. theta() is DeepSpeed's get_pld_theta().
  std::shared_ptr<nn::ProgressiveLayerDrop> progressive_layer_drop() const { return layer_drop_; }
  // data_efficiency.data_routing.random_ltd: the token-drop state the model's layers read (null
  // without it); the engine moves it to each training forward.
  std::shared_ptr<nn::RandomLayerTokenDrop> random_layer_token_drop() const { return token_drop_; }
  // DeepSpeed's global_samples: samples trained (global steps * train_batch_size), the x axis
  // of the Train/Samples/* monitor events.
  int64_t global_samples() const { return global_steps_ * config_.train_batch_size; }
  // MoE: the last step's load-balancing loss (its layers' l_aux summed, the mean over its
  // micro-batches and ranks); NaN without MoE layers. The expert groups (null: none).
  double moe_aux_loss() const { return last_moe_aux_loss_; }
  parallel::ProcessGroup* expert_parallel_group() const { return expert_group_.get(); }
  parallel::ProcessGroup* expert_data_parallel_group() const { return expert_data_group_.get(); }
  // DeepSpeed's monitor.write_events: the config's monitors (tensorboard, csv_monitor) on rank
  // 0; no-op elsewhere or when none is enabled. The engine itself writes Train/Samples/lr and,
  // with fp16, Train/Samples/loss_scale after every optimizer step, and
  // Train/Samples/train_loss (the step's backward(loss) losses averaged over its micro-batches
  // and the data-parallel ranks) whenever backward(loss) saw them: a hand-written loop gets it.
  void write_events(const std::vector<MonitorEvent>& events) { monitor_->write_events(events); }
  // Whether the last optimizer step wrote Train/Samples/train_loss itself (a Trainer then
  // does not write it again).
  bool wrote_train_loss() const { return wrote_train_loss_; }
  MonitorMaster& monitor() { return *monitor_; }
  int64_t micro_steps() const { return micro_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // The lr of the next step (the schedule's; without one, the first group's).
  double lr() const;
  double loss_scale() const { return scaler_.scale(); }
  optim::Optimizer& optimizer() { return zero_ ? zero_->optimizer() : *optimizer_; }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }
  parallel::ProcessGroup& group() { return *group_; }
  // The rank that prints and writes the job's monitors: data-parallel rank 0 and, with tensor
  // parallelism, tensor-parallel rank 0; in a pipeline, stage 0.
  bool is_lead() const {
    return group_->rank() == 0 && (!tp_group_ || tp_group_->rank() == 0) &&
           (!pipe_group_ || pipe_group_->rank() == 0);
  }
  // The tensor-parallel group (null without tensor parallelism).
  parallel::ProcessGroup* tensor_parallel_group() { return tp_group_.get(); }
  // The pipeline group of a stage's engine (null outside a pipeline).
  parallel::ProcessGroup* pipeline_group() { return pipe_group_.get(); }
  int zero_stage() const { return zero_ ? zero_->stage() : 0; }
  parallel::ZeroOptimizer* zero_optimizer() { return zero_.get(); }  // null at stage 0
  // Bytes of parameters, gradients and optimizer state this rank holds (see docs/parallelism.md).
  parallel::MemoryStats memory() const;
  // Activation memory: the most bytes a training forward left allocated on the model's device
  // (what the graph keeps for backward, the loss included), over the forwards so far.
  int64_t activation_bytes() const { return activation_bytes_; }
  // The model's device: its first parameter's (the CPU when it has none).
  Device device();
  const io::TrainConfig& config() const { return config_; }
  nn::Module& module() { return model_; }

  // DeepSpeed's save_checkpoint(save_dir, tag=None, client_state={}, save_latest=True).
  // Writes DIR/TAG/{model.safetensors, optimizer.safetensors, engine.json} (ZeRO: one
  // zero_rank<R>.safetensors per rank with its shards instead of optimizer.safetensors) into
  // a temporary directory renamed into place, then (save_latest) DIR/latest; a crash at any
  // point leaves the previous checkpoint loadable. Collective: every rank calls it. An empty
  // tag is "global_step<N>". client_state (rank 0's) is stored verbatim and returned by
  // load_checkpoint. extra_files (rank 0's): name (may hold a subdirectory) -> contents,
  // written into the tag directory with the rest, e.g. the tokenizer the model was trained
  // with.
  void save_checkpoint(const std::string& dir, const std::string& tag = "",
                       const nlohmann::json& client_state = {}, bool save_latest = true,
                       const std::map<std::string, std::string>& extra_files = {});
  // DeepSpeed's load_checkpoint(load_dir, tag=None, ...): the tag `latest` names when tag is
  // empty. By default restores weights, optimizer state, schedule position, steps, loss
  // scaler and the default RNG. A checkpoint saved at any ZeRO stage and data-parallel size
  // loads at any other.
  LoadedCheckpoint load_checkpoint(const std::string& dir, const std::string& tag = "",
                                   const LoadCheckpointOptions& options = {});
  // DeepSpeed's save_16bit_model: the model's weights in the dtype it computes in (bf16/fp16
  // with mixed precision, else float32), Tessera's parameter names, one safetensors file
  // DIR/FILE written by rank 0. Collective. ZeRO-3 gathers the parameters when
  // zero_optimization.stage3_gather_16bit_weights_on_model_save is true; otherwise, as in
  // DeepSpeed, nothing is written and it returns false.
  bool save_16bit_model(const std::string& dir, const std::string& file = "model.safetensors");
  // What the optimizer updates, whole over the data-parallel replicas, by the model's
  // parameter names: the float32 masters with mixed precision (else the parameters), and the
  // optimizer's state ("<param>.<slot>", "step"). With ZeRO, gathered from every replica's
  // partitions: collective over the data-parallel group. (For CheckpointFiles of one's own.)
  RankCheckpointState training_state();
  // Sets them from whole tensors by parameter name (a name not in `weights` keeps its value;
  // ZeRO: every parameter must be there) and, given `optimizer_state`, the optimizer's
  // state. `checkpoint` names the source in errors.
  void load_training_state(const std::map<std::string, Tensor>& weights,
                           const std::map<std::string, Tensor>* optimizer_state,
                           const std::string& checkpoint);
  // The optimizer's state each rank keeps its own of (1-bit Adam's compression errors, 0/1
  // Adam's parameters between reconciliations): this rank writes its file in `dir` (none when
  // it has no such state), and reads it back (and rank 0's, which says the rank count that
  // saved it). For CheckpointFiles of one's own; the engine's files do it themselves.
  void write_optimizer_rank_state(const std::filesystem::path& dir);
  void load_optimizer_rank_state(const std::filesystem::path& dir);

 private:
  void sync_master_to_model();
  std::vector<Tensor> master_params();
  void setup_parallel(std::vector<optim::ParamGroup> groups, const optim::OptimizerFactory& make);
  // MoE expert parallelism: finds the expert parameters and their groups, refuses what it
  // does not combine with (errors name the config key).
  void setup_experts();
  bool is_expert(const Tensor* slot) const;
  void note_moe_forward();  // after each backward: the MoE layers' last routing
  void add_moe_events(std::vector<MonitorEvent>& events);  // at a step: their means
  // Moves this rank's expert entries out of a checkpoint's state into its expert files
  // (written by the first rank holding those experts).
  void write_expert_files(const std::filesystem::path& dir, std::map<std::string, Tensor>& weights,
                          std::map<std::string, Tensor>& optimizer);
  // ZeRO: takes the experts' shards out of this rank's `shard` state and writes them whole
  // (gathered over their replicas, a collective) in the expert files.
  void write_zero_expert_files(const std::filesystem::path& dir,
                               std::map<std::string, Tensor>& shard);
  // Drops a loaded state's experts this rank does not hold (saved at another ep_size).
  void keep_own_experts(std::map<std::string, Tensor>& weights,
                        std::map<std::string, Tensor>& optimizer);
  // Rank 0's parameters everywhere (experts: from their expert-data-parallel rank 0).
  void broadcast_initial_parameters();
  void setup_tensor_parallel(std::shared_ptr<parallel::ProcessGroup> tp, bool pipeline);
  // The global L2 norm of the holders' gradients: with tensor parallelism the shards'
  // squares summed over the group, replicated parameters counted once.
  double global_grad_norm(const std::vector<Tensor>& holders);
  // The step's gradient norm (unscaled, over every rank that holds a part) into `st` and
  // get_global_grad_norm(); the factor gradient_clipping multiplies the gradients by (1: none,
  // or an overflow, whose step is skipped). ZeRO and plain steps share it.
  double clip_factor(StepStats& st, double grad_norm);
  // A barrier over every rank of the job (data x tensor parallel).
  void job_barrier();
  // "model.safetensors", or with tensor parallelism "model_tp<r>.safetensors".
  int tp_file_rank() const;  // checkpoint files' tensor-parallel rank (-1: none)
  // The optimizer's groups by parameter name (params empty): the client object's, the
  // client's model_parameters, or the default decay split.
  std::vector<optim::ParamGroup> resolve_groups(const InitializeOptions& options);
  // Stage 0: the optimizer over the model's parameters (or their float32 masters).
  void build_optimizer(InitializeOptions& options, std::vector<optim::ParamGroup> groups);
  StepStats apply_step(StepStats st);
  // This rank's part of a checkpoint, written into the temporary directory `tmp`.
  void write_checkpoint_files(const std::filesystem::path& tmp, const nlohmann::json& client_state,
                              const std::map<std::string, std::string>& extra_files);
  // Whether every rank's optimizer parameters (the float32 masters) are finite.
  bool masters_finite();
  void check_overflow_explained();  // throws when the loss scale cannot explain an overflow
  // Before a forward: ZeRO-3 gathers on use in eval mode.
  void begin_forward();
  static Tensor scaled(const Tensor& loss, double factor);
  [[noreturn]] void fail_not_loss_model(const std::type_info& batch) const;
  // forward()'s loss passes through a node that, when a direct loss.backward() reaches it,
  // divides by the accumulation steps and starts the reduction (finished by step()).
  Tensor track_direct_backward(const Tensor& loss);
  // Returns whether scale() has applied the factor to this loss.
  bool begin_direct_backward();
  void finish_direct_backward();
  void begin_reduction(bool allreduce);
  // A backward pass (`pass`) between begin_reduction and end_reduction, timed (backward(loss)
  // and reduced_backward_pass share it).
  void reduced_backward(bool allreduce, const std::function<void()>& pass);
  void end_reduction();
  // Counts backwards since step() and warns once at the second.
  void count_backward(const char* what);
  // After an optimizer step: wall_clock_breakdown's events and line, memory_breakdown's line.
  void report_breakdowns();
  // flops_profiler: before each forward of the profile step; after its optimizer step, the
  // report (stdout or flops_profiler.output_file).
  void begin_profiled_forward();
  void report_flops_profile();
  // Timers run when wall_clock_breakdown asks, or while the profiler or a trace needs them.
  void update_forced_timers();
  void start_trace();
  void check_weight_names(const std::string& checkpoint,
                          const std::map<std::string, Tensor>& weights);
  // Steps, schedule position (when `schedule`), loss scaler and RNG from engine.json.
  void restore_engine_state(const nlohmann::json& state, bool schedule);
  // The tag directory's weights (into the masters and the model) and, when `load_optimizer`,
  // its optimizer state; `strict`: no parameter missing, no saved weight that is not one.
  void load_weights_and_optimizer(const std::filesystem::path& dir, const nlohmann::json& state,
                                  bool strict, bool load_optimizer);

  nn::Module& model_;
  io::TrainConfig config_;
  DType compute_dtype_ = DType::Float32;
  // With fp16/bf16 the optimizer updates float32 master copies; the model holds low precision.
  std::vector<std::pair<Tensor*, Tensor>> master_;  // (model slot, float32 master)
  std::unique_ptr<optim::Optimizer> optimizer_;     // stage 0 (ZeRO owns its own)
  std::shared_ptr<parallel::ProcessGroup> group_;
  std::shared_ptr<parallel::ProcessGroup> tp_group_;    // null without tensor parallelism
  std::vector<Tensor> tp_shards_;                       // the parameters tp_group_ shards
  std::shared_ptr<parallel::ProcessGroup> pipe_group_;  // null outside a pipeline
  std::shared_ptr<CheckpointFiles> checkpoint_files_;   // null: the engine's own
  std::unique_ptr<parallel::ZeroOptimizer> zero_;
  std::unique_ptr<parallel::GradBuckets> dp_buckets_;  // stage 0 on more than one rank
  // MoE with ep_size > 1 (engine_experts.cpp): this rank's expert parameters, reduced over the
  // ranks holding the same experts; their gradient squares meet over the expert group.
  std::vector<Tensor*> expert_slots_;
  std::shared_ptr<parallel::ProcessGroup> expert_group_, expert_data_group_;
  std::unique_ptr<parallel::GradBuckets> expert_buckets_;
  // Every MoE layer's routing over the step's forwards, for the monitors.
  struct MoEStats {
    std::string path;
    parallel::MoE* layer;
    parallel::MoE::Stats sum;
    int64_t forwards = 0;
  };
  std::vector<MoEStats> moe_stats_;
  double last_moe_aux_loss_ = std::numeric_limits<double>::quiet_NaN();
  std::unique_ptr<optim::LRSchedule> schedule_;
  LossScaler scaler_;
  int64_t global_steps_ = 0, micro_steps_ = 0, skipped_steps_ = 0;
  int64_t activation_bytes_ = 0;
  int64_t allocated_bytes();   // on the model's device, by its allocator
  int64_t schedule_step_ = 0;  // DeepSpeed does not advance the schedule on skipped steps
  double post_scale_ = 1.0;    // ZeRO: averages the summed gradient partitions
  bool warned_min_scale_ = false;
  int64_t overflows_at_min_scale_ = 0;  // consecutive, at a scale that cannot shrink further
  // backward(loss)'s losses since the last step, for Train/Samples/train_loss (when monitored).
  double step_loss_sum_ = 0.0;
  int64_t step_losses_ = 0;
  bool wrote_train_loss_ = false;
  bool monitored() const { return config_.any_monitor_enabled(); }
  std::optional<bool> boundary_override_;  // set_gradient_accumulation_boundary
  bool zero_unused_grads_ = false;         // one process's boundary backward (end_reduction)
  int64_t backwards_since_step_ = 0;
  bool warned_backward_twice_ = false;
  std::optional<double> global_grad_norm_;
  std::unique_ptr<MonitorMaster> monitor_;
  EngineTimers timers_;
  std::unique_ptr<nn::FlopsProfiler> flops_profiler_;  // rank 0, when enabled
  int64_t profiled_forwards_ = 0;
  std::optional<nn::ModelProfile> flops_profile_;
  std::unique_ptr<TraceRecorder> trace_;             // the trace section, every rank
  std::unique_ptr<CurriculumScheduler> curriculum_;  // curriculum_learning
  // data_efficiency.data_sampling's clustering metrics (their difficulties in the monitors)
  std::vector<std::pair<std::string, CurriculumScheduler>> sampling_difficulties_;
  std::shared_ptr<nn::ProgressiveLayerDrop> layer_drop_;  // progressive_layer_drop
  std::shared_ptr<nn::RandomLayerTokenDrop> token_drop_;  // data_efficiency's random_ltd
  // fp8 (engine_fp8.cpp): the model's FP8 layers (a pipeline stage's: under the whole model's
  // names; a stage may hold none); their scales move after each step.
  parallel::Fp8Layers fp8_layers_;
  std::vector<bool> fp8_expert_;  // per FP8 layer: a MoE expert's (its amaxes meet over replicas)
  bool fp8_ = false;              // the job trains in FP8
  void setup_fp8();
  void update_fp8_scales();
  // Every layer's scales and histories by path (a pipeline's stages' gathered: collective).
  nlohmann::json fp8_state();
  void load_fp8_state(const nlohmann::json& engine_json, const std::string& where);
  // After a step: the schedules' values for the step that ran (when monitored).
  void add_schedule_events(std::vector<MonitorEvent>& events);
  void build_training_schedules();     // curriculum, data sampling's metrics, PLD, random-LTD
  EngineTimers::Window timer_sums_{};  // since the last printed line
  bool in_engine_backward_ = false;
  bool direct_backward_pending_ = false;
  bool scale_expected_ = false;  // scale() came before a direct backward
  // Lets a loss's graph find out that its engine has been destroyed.
  std::shared_ptr<Engine*> self_ = std::make_shared<Engine*>(this);
};

// DIR/TAG, or with no tag DIR/<the tag DIR/latest names>; errors say what is wrong with
// `latest` (missing, empty, naming a missing tag).
std::string checkpoint_tag_dir(const std::string& dir, const std::string& tag = "");

// DeepSpeed's deepspeed.initialize: the engine with the client's optimizer and schedule, or
// the ones the config names.
std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config,
                                   InitializeOptions options);
std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config,
                                   std::shared_ptr<parallel::ProcessGroup> group = nullptr);
// The optimizer the config names, over the given groups.
std::unique_ptr<optim::Optimizer> make_optimizer(const io::TrainConfig& config,
                                                 std::vector<optim::ParamGroup> groups);

// The schedule the config names (ConstantLR without one). optimizer_lr: the lr schedules
// warm up to by default (the config's optimizer lr, or the client optimizer's).
std::unique_ptr<optim::LRSchedule> make_schedule(const io::TrainConfig& config,
                                                 std::optional<double> optimizer_lr = {});

}  // namespace tessera::engine
