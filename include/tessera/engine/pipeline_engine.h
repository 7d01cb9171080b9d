// DeepSpeed's PipelineEngine in C++: trains a PipelineModule over a pipeline group by running
// a schedule's instruction stream (tessera/parallel/pipe_schedule.h) on each stage.
//
//   engine::PipelineEngine pipe(model, pipe_group, std::move(optimizer), {.micro_batches = 8});
//   double loss = pipe.train_batch(next_micro_batch);   // mean over the 8 micro-batches
//
// `next_micro_batch` is called only on the stages that need data (the first: inputs; the
// last: labels), once per micro-batch. Activations go forward and gradients back as
// point-to-point messages whose shapes and dtypes are exchanged once, on the first batch, and
// cached (DeepSpeed's behaviour: every batch must have the shapes of the first). Each
// micro-batch's loss is scaled by 1 / micro_batches before its backward, so the gradients are
// the mean's; tied parameters' gradients are summed over the stages that hold them
// (ReduceTiedGrads) and, with pipelines side by side (options.topology), averaged over each
// stage's data-parallel replicas (ReduceGrads); the optimizer steps at the end of the batch;
// the returned loss is also averaged over the replicas. (Built so far: the 1F1B schedule; the
// other schedules, ZeRO and the config are not yet.) train_batch returns the mean loss on every
// stage. forward/backward/step are errors pointing to train_batch, as in DeepSpeed.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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
  int64_t micro_batches = 1;      // gradient_accumulation_steps
  std::string schedule = "1f1b";  // DeepSpeed's TrainSchedule (the only one the engine runs yet)
  // Pipelines side by side: the job's ranks on axes {"pipe", "data"} (DeepSpeed's
  // PipeDataParallelTopology); the pipe group argument is then this rank's pipeline (the
  // topology's "pipe" group) and each stage's gradients are averaged over its "data" group
  // (ReduceGrads). Without one, the pipeline spans the whole job.
  std::optional<parallel::ProcessTopology> topology;
};

class PipelineEngine {
 public:
  PipelineEngine(parallel::PipelineModule& module, std::shared_ptr<parallel::ProcessGroup> pipe,
                 std::unique_ptr<optim::Optimizer> optimizer, PipelineEngineOptions options);
  ~PipelineEngine();
  double train_batch(const PipeDataIterator& data);
  double eval_batch(const PipeDataIterator& data);  // forward only; the mean loss
  bool is_first_stage() const { return module_.stage_id() == 0; }
  bool is_last_stage() const { return module_.stage_id() == module_.num_stages() - 1; }
  void set_dataiterator(PipeDataIterator data) { data_ = std::move(data); }
  double train_batch() { return train_batch(data_); }
  optim::Optimizer& optimizer() { return *optimizer_; }
  [[noreturn]] void forward();
  [[noreturn]] void backward();
  [[noreturn]] void step();

 private:
  struct Buffers;
  double run(const std::vector<parallel::PipeStep>& steps, const PipeDataIterator& data,
             bool train);
  void execute(const parallel::PipeInstruction& in, Buffers& b, const PipeDataIterator& data,
               bool train);
  void send(const parallel::PipeValue& value, int peer, bool activation);
  parallel::PipeValue recv(int peer, bool activation);
  void reduce_tied_grads();
  void reduce_grads();

  parallel::PipelineModule& module_;
  std::shared_ptr<parallel::ProcessGroup> pipe_, data_parallel_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  PipelineEngineOptions options_;
  PipeDataIterator data_;
  std::map<std::string, std::shared_ptr<parallel::ProcessGroup>> tied_groups_;
  // What this stage sends forward and receives from behind (gradients go back alike), learnt
  // on the first batch: each tensor's dtype and shape.
  struct Meta {
    std::vector<DType> dtypes;
    std::vector<Shape> shapes;
    bool known = false;
  };
  Meta sent_, received_;
  double loss_sum_ = 0;
};

}  // namespace tessera::engine
