// DeepSpeed's PipelineEngine in C++: trains a PipelineModule over a pipeline group by running
// a schedule's instruction stream (tessera/parallel/pipe_schedule.h) on each stage.
//
//   // DeepSpeed's initialize(model=PipelineModule, config=...): the config's optimizer,
//   // schedule, precision, clipping, monitors and checkpoints, one stage's Engine each.
//   auto pipe = engine::initialize(model, config, {.topology = topo});
//   double loss = pipe->train_batch(next_micro_batch);  // mean over the config's
//                                                      // gradient_accumulation_steps
//   // Or with a client optimizer and no config:
//   engine::PipelineEngine pipe(model, pipe_group, std::move(optimizer), {.micro_batches = 8});
//
// `next_micro_batch` is called only on the stages that need data (the first: inputs; the
// last: labels), once per micro-batch. Activations go forward and gradients back as
// point-to-point messages whose shapes and dtypes are exchanged once, on the first batch, and
// cached (DeepSpeed's behaviour: every batch must have the shapes of the first). Each
// micro-batch's loss is scaled by 1 / micro_batches before its backward (engine.backward), so
// the gradients are the mean's. A tied module's copies (on all but its first stage) send their
// gradients to the owner after their last backward; the owner adds them before its own last
// backward, so its Engine's reduction over the data-parallel replicas (plain averaging or ZeRO)
// covers them, steps (clipping by the norm over all stages), and refreshes the copies at the
// next batch. train_batch returns the mean loss on every stage, averaged over
// the replicas. forward/backward/step are errors pointing to train_batch, as in DeepSpeed.
//
// Dropout: each stage draws its masks at the generator offsets one process running the whole
// model on the same micro-batches would (learnt on the first batch: each stage's forward draws a
// fixed count; with virtual stages, a forward of micro-batch 0 through every part in order counts
// them first), so a pipeline with dropout reproduces one process.
//
// Interleaved: stage s holds model chunks s, s + p, ...; the last stage's chunk c sends its
// activations to the first stage's chunk c + 1 (and gradients come back the same way). The
// stage's Engine counts a micro-batch per `virtual_stages` backwards and reduces in the batch's
// last.
//
// ZB-H1 (options.schedule "zb-h1"): each backward in two halves (autograd/split_backward.h):
// BackwardInputPass gives the stage input's gradient, which goes back at once;
// BackwardWeightPass, later in the schedule, the parameters' gradients, and is the backward
// the stage's Engine counts and reduces. Sends complete in the background (only receives
// block), so any schedule whose receives are all matched runs without deadlock.
//
// Timeline: every instruction's start and end on this stage; compute (forward, backward,
// data loading, optimizer) is busy, the rest (sends, receives, reductions) is waiting.
// bubble_fraction() is the bubble as measured: the share of the pipeline's forward/backward
// phase (the batch's start to stage 0's last backward) this stage spends outside forward and
// backward passes: the median over the batches since the first (warm-up) one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/engine/engine.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/pipe_schedule.h"
#include "tessera/parallel/pipeline_module.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/topology.h"

namespace tessera::engine {

struct PipeMicroBatch {
  parallel::PipeValue inputs, labels;
};
using PipeDataIterator = std::function<PipeMicroBatch()>;

struct PipelineEngineOptions {
  // Micro-batches per train_batch, without a config (with one: its
  // gradient_accumulation_steps).
  int64_t micro_batches = 1;
  // "1f1b": DeepSpeed's TrainSchedule. "zb-h1": ZeroBubbleH1Schedule, each backward split into
  // the input gradient and the weights' (deferred into what would be 1F1B's bubble).
  // "interleaved": Megatron's InterleavedSchedule over a PipelineModule of virtual_stages >= 2
  // (2 or more stages; micro_batches a multiple of the stages). Empty: the config's
  // pipeline.schedule ("1f1b" without a config).
  std::string schedule;
  // Pipelines side by side: the job's ranks on axes {"pipe", "data"} (DeepSpeed's
  // PipeDataParallelTopology), or {"pipe", "data", "model"} with tensor parallelism; the pipe
  // group is then this rank's pipeline (the topology's "pipe" group: one per data and model
  // coordinate) and each stage's gradients are averaged over its "data" group. Without one,
  // the pipeline spans the whole job.
  std::optional<parallel::ProcessTopology> topology;
  // 3D: the tensor-parallel group this stage's layers split over (the topology's "model"
  // group, e.g. of {"pipe", "data", "model"}: DeepSpeed's PipeModelDataParallelTopology); the
  // stage's Engine counts each shard once in the gradient norm and ZeRO partitions the shards.
  // With a config, InitializeOptions::tensor_parallel_group serves as well.
  std::shared_ptr<parallel::ProcessGroup> tensor_parallel_group;
};

// One instruction as this stage ran it: seconds from the batch's start.
struct PipeTimelineEvent {
  std::string instruction;  // "ForwardPass"
  int64_t micro_batch = -1;
  double start = 0, end = 0;
  bool busy = false;  // compute, as opposed to waiting on messages or reductions
};

class PipelineEngine {
 public:
  // With a config (the Engine's features); `pipe` is this rank's pipeline group.
  PipelineEngine(parallel::PipelineModule& module, std::shared_ptr<parallel::ProcessGroup> pipe,
                 const io::TrainConfig& config, InitializeOptions init,
                 PipelineEngineOptions options);
  // With a client optimizer and no config (float32, no clipping or schedule).
  PipelineEngine(parallel::PipelineModule& module, std::shared_ptr<parallel::ProcessGroup> pipe,
                 std::unique_ptr<optim::Optimizer> optimizer, PipelineEngineOptions options);
  ~PipelineEngine();
  double train_batch(const PipeDataIterator& data);
  // Forward only: the mean loss over num_micro_batches (0: the training micro-batches).
  double eval_batch(const PipeDataIterator& data, int64_t num_micro_batches = 0);
  bool is_first_stage() const { return module_.stage_id() == 0; }
  bool is_last_stage() const { return module_.stage_id() == module_.num_stages() - 1; }
  void set_dataiterator(PipeDataIterator data) { data_ = std::move(data); }
  // DeepSpeed's set_batch_fn: applied to every micro-batch a stage loads (train and eval),
  // e.g. to move or reshape it; empty: none.
  void set_batch_fn(std::function<PipeMicroBatch(PipeMicroBatch)> fn) { batch_fn_ = std::move(fn); }
  double train_batch() { return train_batch(data_); }
  optim::Optimizer& optimizer() { return engine_->optimizer(); }
  // This stage's Engine: steps, schedule, checkpoints, monitors, memory.
  Engine& stage_engine() { return *engine_; }
  parallel::PipelineModule& module() { return module_; }
  const parallel::PipelineModule& module() const { return module_; }
  int64_t micro_batches() const { return micro_batches_; }
  const std::string& schedule() const { return options_.schedule; }
  // The last train_batch's optimizer step (grad norm, lr, overflow).
  const StepStats& last_step() const { return last_step_; }
  // The last batch's instructions, and the idle share of the batches since the first.
  const std::vector<PipeTimelineEvent>& timeline() const { return timeline_; }
  double bubble_fraction() const;
  // The most micro-batches between forward and (input-gradient) backward at once (1F1B's
  // bound: p - stage).
  int64_t peak_in_flight() const { return peak_in_flight_; }
  // The most bytes this stage's in-flight micro-batches held at once: each training
  // forward's allocations still alive when it ends (its kept activations and output), summed
  // over the micro-batches not yet through backward (ZB-H1: through their weight pass; the
  // output gradients its weight passes wait with are not counted).
  // activation_checkpoint_interval lowers it.
  int64_t activation_bytes() const { return activation_bytes_; }
  [[noreturn]] void forward();
  [[noreturn]] void backward();
  [[noreturn]] void step();

 private:
  struct Buffers;
  void setup(std::shared_ptr<parallel::ProcessGroup> data_parallel);
  // How the stage's Engine keeps its checkpoints: a file pair per layer (PipelineLayerFiles),
  // under the whole model's names; null for a pipeline of one stage.
  std::shared_ptr<CheckpointFiles> layer_files();
  double run(const std::vector<parallel::PipeStep>& steps, const PipeDataIterator& data, bool train,
             int64_t micro_batches, int64_t buffers);
  void execute(const parallel::PipeInstruction& in, Buffers& b, const PipeDataIterator& data,
               bool train);
  void forward_pass(const parallel::PipeInstruction& in, Buffers& b, bool train);
  void backward_pass(const parallel::PipeInstruction& in, Buffers& b);
  void backward_input_pass(const parallel::PipeInstruction& in, Buffers& b);
  void backward_weight_pass(const parallel::PipeInstruction& in, Buffers& b);
  void weight_gradients(const std::function<void()>& pass);
  std::vector<Tensor> backward_roots(Buffers& b, size_t buf, int64_t chunk) const;
  // This stage's backward from its outputs with the next stage's gradients for them (already
  // scaled by the last stage's engine.backward), reduced at the boundary as backward(loss).
  void backward_stage(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads);
  // backward_stage in two parts (zero-bubble schedules): the gradients of the stage's
  // `inputs` now, touching no parameter and reducing nothing; the parameters' later
  // (backward_weight_pass). With no `grads`, `outputs` is the last stage's loss, scaled as
  // backward(loss) scales it.
  autograd::DeferredGrads backward_stage_inputs(const std::vector<Tensor>& outputs,
                                                const std::vector<Tensor>& grads,
                                                const std::vector<Tensor>& inputs);
  // The model's first part (the data's inputs) and last (the loss), and the stages messages go
  // to and come from (the last stage's chunk c feeds the first stage's chunk c + 1).
  bool first_part(int64_t chunk) const { return is_first_stage() && chunk == 0; }
  bool last_part(int64_t chunk) const {
    return is_last_stage() && chunk == module_.virtual_stages() - 1;
  }
  int next_stage() const {
    return static_cast<int>((module_.stage_id() + 1) % module_.num_stages());
  }
  int previous_stage() const {
    return static_cast<int>((module_.stage_id() + module_.num_stages() - 1) % module_.num_stages());
  }
  PipeMicroBatch load(const PipeDataIterator& data);  // the next micro-batch, through batch_fn
  void send(const parallel::PipeValue& value, int peer, bool activation, int64_t chunk);
  parallel::PipeValue recv(int peer, bool activation, int64_t chunk);
  void reap_sends();  // drops the sends that have completed
  // Dropout's generator offsets: set before a training forward of `micro_batch`; learnt
  // (calibrate_rng) on the first training batch.
  void position_rng(int64_t micro_batch, int64_t chunk);
  void calibrate_rng();
  void count_chunk_draws(const PipeDataIterator& data);
  void learn_draw_offsets(const std::vector<int64_t>& mine);  // (calibrate_rng's and chunks')
  // Tied keys: the copies take the owner's weights; their gradients go to the owner.
  void refresh_tied_copies();
  void send_tied_grads();
  void receive_tied_grads();

  parallel::PipelineModule& module_;
  std::shared_ptr<parallel::ProcessGroup> pipe_, data_parallel_;
  std::unique_ptr<Engine> engine_;
  PipelineEngineOptions options_;
  int64_t micro_batches_ = 1;
  PipeDataIterator data_;
  std::function<PipeMicroBatch(PipeMicroBatch)> batch_fn_;
  std::map<std::string, std::shared_ptr<parallel::ProcessGroup>> tied_groups_;
  std::map<std::string, std::vector<int64_t>> tied_sources_;  // keys this stage owns: copies
  std::map<std::string, int64_t> tied_owner_;                 // keys this stage holds a copy of
  // What this stage sends forward and receives from behind (gradients go back alike), learnt
  // on the first batch: each tensor's dtype and shape.
  struct Meta {
    std::vector<DType> dtypes;
    std::vector<Shape> shapes;
    bool known = false;
  };
  std::vector<Meta> sent_meta_, received_meta_;  // per model chunk
  std::optional<PipeMicroBatch> loaded_first_;   // micro-batch 0, loaded to count draws
  std::vector<parallel::Work> sends_;            // in flight; all complete by the batch's end
  double loss_sum_ = 0;
  int64_t backwards_ = 0;  // this batch's
  StepStats last_step_;
  // Dropout alignment: the batch's starting generator state, the counters one micro-batch's
  // forward draws over the whole pipeline (-1: not learnt yet) and before this stage.
  GeneratorState rng_base_;
  int64_t rng_per_micro_batch_ = -1, rng_this_stage_ = 0;
  std::vector<int64_t> rng_before_chunk_;  // per chunk: the draws of the parts before it
  bool rng_calibrating_ = false;
  std::vector<PipeTimelineEvent> timeline_;
  std::vector<double> bubbles_;  // per batch after the first
  int64_t batches_ = 0, in_flight_ = 0, peak_in_flight_ = 0;
  int64_t in_flight_bytes_ = 0, activation_bytes_ = 0;
  int64_t allocated_bytes();  // on the stage's device, by its allocator
  Allocator* allocator_ = nullptr;
};

// DeepSpeed's initialize(model=PipelineModule): the pipeline engine over this job, the
// module's stages along options.topology's "pipe" axis (default: {"pipe", "data"} of
// num_stages x world / num_stages).
std::unique_ptr<PipelineEngine> initialize(parallel::PipelineModule& model,
                                           const io::TrainConfig& config,
                                           InitializeOptions init = {},
                                           PipelineEngineOptions options = {});

// The {"pipe", "data"} topology of `stages` pipelines over this job's ranks, checked.
parallel::ProcessTopology pipe_data_topology(int64_t stages);
// 3D (DeepSpeed's PipeModelDataParallelTopology): axes {"pipe", "data", "model"} of `stages` x
// world / (stages x model) x `model` (the model axis varies fastest: a stage's tensor-parallel
// ranks are neighbours); pipe_data_topology when model is 1.
parallel::ProcessTopology pipe_model_data_topology(int64_t stages, int64_t model);

}  // namespace tessera::engine
