// A training checkpoint's weights and optimizer state as whole tensors, whatever layout
// saved it: one process, data parallel, ZeRO shards of any stage and size, tensor-parallel
// shards of any size (merged through the layout engine.json records), or both, or a
// pipeline's layer files (layer_XX-model.safetensors, layer_XX-optimizer.safetensors). The engine
// uses it to load a checkpoint into another tensor-parallel size; zero-to-fp32 and export use
// it to write HF weights.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::engine {

struct WholeCheckpointState {
  std::map<std::string, Tensor> weights;    // by parameter (and buffer) name
  std::map<std::string, Tensor> optimizer;  // "<param>.<slot>" and "step"; empty if not read
  int zero_stage = 0;                       // 0: saved without ZeRO
  int data_parallel = 1, tensor_parallel = 1, pipeline_stages = 1;
};

// Reads TAG_DIR (a checkpoint's tag directory); with_optimizer false skips the optimizer state.
WholeCheckpointState read_whole_checkpoint(const std::string& tag_dir, bool with_optimizer);

// One tensor-parallel rank's part of a checkpoint (`tp_rank` -1: saved without tensor
// parallelism), whole over data parallelism: its ZeRO shards consolidated (`zero`), else its
// model and optimizer files. with_optimizer false leaves `optimizer` empty.
struct RankCheckpointState {
  std::map<std::string, Tensor> weights, optimizer;
};
RankCheckpointState read_rank_checkpoint(const std::string& tag_dir, bool zero, int tp_rank,
                                         bool with_optimizer);

// The file a checkpoint without ZeRO keeps `kind` ("model", "optimizer") in: kind.safetensors,
// or with tensor parallelism one per tensor-parallel rank, kind_tp<T>.safetensors.
std::string checkpoint_weights_file(const std::string& kind, int tp_rank = -1);
// A data-parallel rank's own optimizer state (Optimizer::rank_state: 1-bit Adam's
// compression errors): "optimizer_rank<r>.safetensors", or "..._tp<t>" as above.
std::string optimizer_rank_file(int rank, int tp_rank = -1);
// MoE expert parallelism: expert-parallel rank r's experts, weights or (`optimizer`) their
// optimizer state, under their global names: "moe_experts_<r>[_optimizer].safetensors".
// read_rank_checkpoint adds every such file of the tag directory to what it reads, so a
// checkpoint's experts load at any ep_size and tools see the whole model.
std::string moe_experts_file(int ep_rank, bool optimizer);
// A pipeline checkpoint's directories of each stage's own optimizer state (stage_SS/:
// PipelineLayerFiles): how many the tag directory holds (0 for other checkpoints).
int pipeline_stage_state_dirs(const std::string& tag_dir);
// Refuses to load optimizer state kept per stage and rank (`needs_it`: the optimizer keeps
// such state, the 1-bit optimizers) from a checkpoint saved at another stage count.
void check_stage_state_count(const std::string& tag_dir, int stages, bool needs_it,
                             const std::string& optimizer);

// The error a strict load gives when a checkpoint's weights do not match the model's names:
// both lists (the first 20 of each), naming the checkpoint and load_module_strict.
[[noreturn]] void fail_key_mismatch(const std::string& checkpoint,
                                    const std::vector<std::string>& missing,
                                    const std::vector<std::string>& unexpected);

}  // namespace tessera::engine
