// What a config's training will hold per rank, predicted before any rank starts: the model
// state (parameters, gradients, optimizer state, communication buffers) for each ZeRO stage,
// with the engine's own sharding and padding, and the activations one micro-batch keeps.
// The model sized is the one launch::build makes (a tensor-parallel shard over a group that
// only has a size, a pipeline's PipelineModule stage by stage), so prediction and run agree
// to the byte (`tessera train --json` reports the same "memory"; tests/tools/distributed.sh
// compares them). `tessera estimate-memory` prints these.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/io/train_config.h"
#include "tessera/parallel/shard_layout.h"

namespace tessera::launch {

struct ModelStateBytes {
  int64_t params = 0, grads = 0, optimizer = 0, buffers = 0;
  // offload_optimizer "nvme": the swap file (bytes on disk, not in total) and the most host
  // memory its staging can take (in total): a sub-group's state plus buffer_count buffers.
  int64_t disk = 0, swap = 0;
  int64_t total() const { return params + grads + optimizer + buffers + swap; }
};

// The model state a rank holds at ZeRO `stage` over `data_ranks` ranks, for parameters laid
// out as `layout`: Engine::memory() / ZeroOptimizer::memory() computed without building them.
ModelStateBytes model_state_bytes(const io::TrainConfig& cfg, const parallel::ShardLayout& layout,
                                  int stage, int data_ranks);

// The config's vocabulary size: model.init_from's config.json, else the wordpiece vocab
// file's lines, GPT-2's 50257 for the gpt2 tokenizer, or data.path's characters (tokenised
// once and cached); none when it depends on a corpus the config does not name.
std::optional<int64_t> config_vocab_size(const io::TrainConfig& cfg);

// A whole or tensor-parallel model (no pipeline section).
struct MemoryEstimate {
  std::string model_name;  // the class, as type_name() gives it
  int64_t parameters = 0;  // per tensor-parallel rank
  std::array<ModelStateBytes, 4> by_zero_stage;
  int64_t activations = 0;            // one micro-batch's, per rank
  bool activations_estimated = true;  // false: the model's registry entry has no estimate
  int zero_stage = 0;                 // the config's
  const ModelStateBytes& configured() const {
    return by_zero_stage[static_cast<size_t>(zero_stage)];
  }
};
MemoryEstimate estimate_memory(const io::TrainConfig& cfg, int64_t vocab);

// One pipeline stage: its layers (a [first, last) range per chunk), its model state at the
// config's ZeRO stage over its data-parallel replicas, the activations of the micro-batches
// its schedule holds at once, and the bytes of tied modules' copies it keeps (weights and
// gradients of another stage's parameters).
struct PipelineStageEstimate {
  std::vector<std::pair<int64_t, int64_t>> layers;
  ModelStateBytes state;
  int64_t activations = 0;
  bool activations_estimated = true;
  int64_t tied_copies = 0;
  int64_t total() const { return state.total() + activations; }
};
std::vector<PipelineStageEstimate> estimate_pipeline_memory(const io::TrainConfig& cfg,
                                                            int64_t vocab);

}  // namespace tessera::launch
