// Pipeline schedules as instruction streams, DeepSpeed's design (deepspeed.runtime.pipe.schedule):
// a schedule for one stage yields steps, each a list of instructions the stage's engine carries
// out in order, naming the pipeline buffer (a micro-batch's slot) they work on.
//   TrainSchedule         DeepSpeed's 1F1B: 2 (m + p - 1) lock-step steps, each a forward or a
//                         backward slot; at most p - stage micro-batches in flight.
//   InferenceSchedule     forward only, two buffers.
//   DataParallelSchedule  one stage: forward and backward of each micro-batch, then the step.
//   InterleavedSchedule   Megatron's interleaved 1F1B: `virtual_stages` v model chunks per
//                         stage (stage s holds chunks s, s + p, ...), bubble
//                         (p - 1) / (v m + p - 1) at unit cost.
//   ZeroBubbleH1Schedule  ZB-H1 (Qi et al. 2023): backward split into the input gradient
//                         (BackwardInputPass, on the critical path) and the weight gradient
//                         (BackwardWeightPass, deferred into the bubble), with 1F1B's bound on
//                         micro-batches in flight; bubble (p - 1) / (3 m + p - 1) at unit cost.
// Instructions carry, beyond DeepSpeed's buffer_id, the micro-batch and model chunk they concern
// (for the engine, the simulator and the timelines). Users can write their own PipeSchedule.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera::parallel {

struct PipeInstruction {
  enum Kind {
    LoadMicroBatch,
    ForwardPass,
    BackwardPass,
    BackwardInputPass,   // ZB: the gradient of the stage's input only
    BackwardWeightPass,  // ZB: the gradients of its weights, later
    SendActivation,
    RecvActivation,
    SendGrad,
    RecvGrad,
    ReduceGrads,
    ReduceTiedGrads,
    OptimizerStep,
  } kind = ForwardPass;
  int64_t buffer_id = -1;    // -1: none (ReduceGrads, ReduceTiedGrads, OptimizerStep)
  int64_t micro_batch = -1;  // the micro-batch it concerns, -1 for none
  int64_t chunk = 0;         // the model chunk (interleaved schedules), else 0

  std::string name() const;  // DeepSpeed's class name: "ForwardPass"
  std::string str() const;   // "ForwardPass(buffer_id=1)"
  bool operator==(const PipeInstruction& o) const {
    return kind == o.kind && buffer_id == o.buffer_id && micro_batch == o.micro_batch &&
           chunk == o.chunk;
  }
};

using PipeStep = std::vector<PipeInstruction>;

class PipeSchedule {
 public:
  PipeSchedule(int64_t micro_batches, int64_t stages, int64_t stage_id);
  virtual ~PipeSchedule() = default;
  virtual std::vector<PipeStep> steps() const = 0;
  virtual int64_t num_pipe_buffers() const = 0;
  int64_t micro_batches() const { return micro_batches_; }
  int64_t stages() const { return stages_; }
  int64_t stage_id() const { return stage_id_; }
  bool is_first_stage() const { return stage_id_ == 0; }
  bool is_last_stage() const { return stage_id_ == stages_ - 1; }

 protected:
  // One forward (or backward: `pass` BackwardPass or BackwardInputPass) of micro-batch `mb` in
  // part `part` of `parts` (stage s's chunk c is part c * stages + s), with the messages and
  // loads around it: the first part loads inputs, the last labels; the others receive their
  // input and send on (gradients the other way).
  static PipeStep forward_step(int64_t part, int64_t parts, int64_t buf, int64_t mb, int64_t chunk);
  static PipeStep backward_step(PipeInstruction::Kind pass, int64_t part, int64_t parts,
                                int64_t buf, int64_t mb, int64_t chunk);
  // A training step's end: ReduceTiedGrads, ReduceGrads, OptimizerStep.
  static void append_step_end(PipeStep& s);
  bool valid_micro_batch(int64_t id) const { return id >= 0 && id < micro_batches_; }
  bool valid_stage(int64_t id) const { return id >= 0 && id < stages_; }
  int64_t buffer_of(int64_t micro_batch) const { return micro_batch % num_pipe_buffers(); }
  int64_t micro_batches_, stages_, stage_id_;
};

class TrainSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::vector<PipeStep> steps() const override;
  int64_t num_pipe_buffers() const override;

 private:
  // The micro-batch of lock-step `step` and whether it is a forward slot.
  std::pair<int64_t, bool> slot(int64_t step) const;
};

class InferenceSchedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::vector<PipeStep> steps() const override;
  int64_t num_pipe_buffers() const override { return 2; }
};

class DataParallelSchedule : public PipeSchedule {
 public:
  DataParallelSchedule(int64_t micro_batches, int64_t stages, int64_t stage_id);
  std::vector<PipeStep> steps() const override;
  int64_t num_pipe_buffers() const override { return 1; }
};

// One instruction per step; a buffer per micro-batch and chunk in flight.
class InterleavedSchedule : public PipeSchedule {
 public:
  // micro_batches must be a multiple of stages (Megatron's condition).
  InterleavedSchedule(int64_t micro_batches, int64_t stages, int64_t stage_id,
                      int64_t virtual_stages);
  std::vector<PipeStep> steps() const override;
  int64_t num_pipe_buffers() const override;
  int64_t virtual_stages() const { return virtual_stages_; }

 private:
  int64_t virtual_stages_;
};

class ZeroBubbleH1Schedule : public PipeSchedule {
 public:
  using PipeSchedule::PipeSchedule;
  std::vector<PipeStep> steps() const override;
  int64_t num_pipe_buffers() const override;
};

// The training schedule a PipelineEngine runs, by the config's name ("1f1b", "zb-h1",
// "interleaved" of `virtual_stages` model chunks per stage): the pipeline schedule registry's entry
// (pipe_schedule_registry.h) builds it.
std::unique_ptr<PipeSchedule> train_schedule(const std::string& name, int64_t micro_batches,
                                             int64_t stages, int64_t stage_id,
                                             int64_t virtual_stages = 1);

// The most micro-batches whose activations a stage's stream keeps at once: from its
// ForwardPass to the pass that ends its backward (BackwardPass; ZB's BackwardWeightPass).
int64_t peak_activations(const std::vector<PipeStep>& steps);
// The same in bytes, a micro-batch of model chunk c keeping chunk_bytes[c].
int64_t peak_activation_bytes(const std::vector<PipeStep>& steps,
                              const std::vector<int64_t>& chunk_bytes);

}  // namespace tessera::parallel
