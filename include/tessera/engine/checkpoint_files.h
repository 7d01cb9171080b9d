// How a checkpoint keeps an engine's weights and optimizer state in its tag directory. The
// Engine's own way, without one of these: model.safetensors and optimizer.safetensors (one
// pair per tensor-parallel rank), or ZeRO's shards. A pipeline's stages keep theirs in one file
// pair per layer under the whole model's names (engine::PipelineEngine installs its
// PipelineLayerFiles), so any number of stages, or one process, loads them. The Engine writes
// engine.json, the model's config and the client's files itself, and makes the save atomic.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>

namespace tessera::engine {

class Engine;

class CheckpointFiles {
 public:
  virtual ~CheckpointFiles() = default;
  // Every rank of the job: this rank's part into the tag's temporary directory (collective
  // over the groups it needs, e.g. ZeRO's replicas). Reads the state through
  // Engine::training_state.
  virtual void write(Engine& engine, const std::filesystem::path& tmp) = 0;
  // What engine.json says about the layout (the lead rank, after write), so loaders and tools
  // know how to read the files.
  virtual void describe(nlohmann::json& engine_state) const = 0;
  // Every rank: its part from a tag directory, whatever layout saved it, through
  // Engine::load_training_state. `strict`: no parameter missing, no saved weight unclaimed.
  virtual void load(Engine& engine, const std::filesystem::path& dir, bool strict,
                    bool load_optimizer) = 0;
};

}  // namespace tessera::engine
