// DeepSpeed's activation checkpointing (deepspeed.checkpointing, the config's
// "activation_checkpointing" section) over autograd::checkpoint: a model runs groups of its
// layers through checkpoint(), which keeps only each group's input for backward and runs the
// group again there.
//   partition_activations: each kept input is split across the tensor-parallel group (this rank
//     keeps 1/N of it) and all-gathered before the rerun (inputs every TP rank holds alike;
//     the built-in models turn it off under sequence parallelism, whose inputs are chunks
//     already).
//   cpu_checkpointing: kept inputs live in host memory (pinned when they come from a GPU).
//   contiguous_memory_optimization: kept inputs are copied into number_checkpoints buffers that
//     are allocated once and reused every step (no allocations, no fragmentation).
//   synchronize_checkpoint_boundary: the device is synchronised at each checkpoint (CUDA).
//   profile: the time of each checkpoint's forward and of its rerun are summed (profile()).
// Which layers form a checkpoint: number_checkpoints groups of consecutive layers (DeepSpeed's
// key, there only sizing the contiguous buffers), else Megatron's checkpoint_num_layers per
// group (default 1: every layer).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/autograd/activation_checkpoint.h"
#include "tessera/io/config_section.h"
#include "tessera/parallel/process_group.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::parallel {

// The config's "activation_checkpointing" section is this struct (registered with io's config
// reader: activation_checkpointing_config.cpp); `enabled` says the file has the section, and
// the built-in models then checkpoint their transformer layers.
struct ActivationCheckpointingOptions {
  bool enabled = false;
  bool partition_activations = false;
  bool cpu_checkpointing = false;
  bool contiguous_memory_optimization = false;
  int64_t number_checkpoints = 0;  // 0: unset
  bool synchronize_checkpoint_boundary = false;
  bool profile = false;
  int64_t checkpoint_num_layers = 1;  // layers per checkpoint when number_checkpoints is unset

  // Reads the section (errors name the key; the reader reports unknown keys).
  static void parse(io::config::Section& s, ActivationCheckpointingOptions& out);
};

// The config's activation_checkpointing section (disabled when the file has none).
const ActivationCheckpointingOptions& activation_checkpointing_config(const io::TrainConfig& cfg);

// Consecutive layers per checkpoint for a model of `layers` layers: ceil(layers /
// number_checkpoints) when that is set, else checkpoint_num_layers.
int64_t layers_per_checkpoint(const ActivationCheckpointingOptions& options, int64_t layers);

struct CheckpointProfile {
  int64_t forwards = 0, recomputes = 0;
  double forward_seconds = 0, recompute_seconds = 0;
};

class ActivationCheckpointing {
 public:
  // `tensor_parallel` (may be null): the group partition_activations splits inputs over.
  explicit ActivationCheckpointing(ActivationCheckpointingOptions options,
                                   std::shared_ptr<ProcessGroup> tensor_parallel = nullptr);
  const ActivationCheckpointingOptions& options() const { return options_; }
  int64_t layers_per_checkpoint(int64_t layers) const {
    return parallel::layers_per_checkpoint(options_, layers);
  }
  // fn(inputs), its inputs kept as the options say and fn run again in backward. `partition`
  // false keeps the inputs whole even with partition_activations (they differ across ranks).
  std::vector<Tensor> checkpoint(const autograd::CheckpointFn& fn,
                                 const std::vector<Tensor>& inputs, bool partition = true);
  Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                    bool partition = true);
  // A new forward starts: its checkpoints are numbered from 0 again. Without it a forward
  // starts when no rerun is outstanding, which a pipeline stage (several micro-batches in
  // flight) never reaches.
  void begin_forward() { next_index_ = 0, next_position_ = 0; }
  // Per checkpoint index (its position in the forward), the summed forward and rerun times.
  const std::vector<CheckpointProfile>& profile() const { return profile_; }
  std::string profile_report() const;  // one line per checkpoint index

 private:
  Tensor pack(const Tensor& t, bool partition, size_t index);
  Tensor unpack(const Tensor& kept, const Shape& shape, Device device, bool partition) const;

  ActivationCheckpointingOptions options_;
  std::shared_ptr<ProcessGroup> tensor_parallel_;
  std::vector<Tensor> buffers_;  // contiguous_memory_optimization: one per checkpoint index
  std::vector<CheckpointProfile> profile_;
  size_t next_position_ = 0;  // the next checkpoint's position in the current forward
  size_t next_index_ = 0;     // the next kept input's (contiguous buffers)
  int64_t outstanding_ = 0;   // checkpoints whose rerun has not happened yet
};

// x through layer(0, .), ..., layer(layers - 1, .) in order; with `checkpointing` (may be null)
// in checkpoints of layers_per_checkpoint(layers) consecutive layers. `layer` is kept and run
// again in backward: it must capture what it uses by value (tensors, `this`), not by reference.
//
// `side` (optional): a scalar each layer leaves after it ran (MoE's load-balancing loss;
// undefined: none), summed over the layers into *side_total. Through a checkpoint the sum
// is the checkpoint's second output, so its gradient reaches the layers' rerun (a scalar
// read off the layers directly would have no graph: the first run records none).
Tensor run_layers(ActivationCheckpointing* checkpointing, int64_t layers,
                  const std::function<Tensor(int64_t, const Tensor&)>& layer, const Tensor& x,
                  bool partition = true, const std::function<Tensor(int64_t)>& side = {},
                  Tensor* side_total = nullptr);

}  // namespace tessera::parallel
