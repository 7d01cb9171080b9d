// A pipeline stage's part of a checkpoint: one pair of files per layer
// (layer_XX-model.safetensors, layer_XX-optimizer.safetensors, DeepSpeed's layer_XX-model_states
// idea), under the names the whole model gives its parameters, so any number of stages, or one
// process, finds what it needs. 3D: a pair per layer and tensor-parallel rank
// (layer_XX-model_tpR.safetensors), whose metadata says how the ranks' shards merge. Written by
// each stage's (and tensor-parallel rank's) first data-parallel replica. An optimizer's own
// state per stage (the 1-bit optimizers': each rank's compression errors and the entries of no
// parameter) goes to stage_SS/ beside them, which a resume at the same stage count reads.
// PipelineEngine installs it in its stage's Engine.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "tessera/engine/checkpoint_files.h"
#include "tessera/parallel/pipeline_module.h"
#include "tessera/parallel/process_group.h"

namespace tessera::engine {

class PipelineLayerFiles : public CheckpointFiles {
 public:
  // `tensor_parallel`: the group the stage's layers split over (null: none).
  PipelineLayerFiles(parallel::PipelineModule& module, std::shared_ptr<parallel::ProcessGroup> pipe,
                     std::shared_ptr<parallel::ProcessGroup> tensor_parallel);
  void write(Engine& engine, const std::filesystem::path& tmp) override;
  void describe(nlohmann::json& engine_state) const override;
  void load(Engine& engine, const std::filesystem::path& dir, bool strict,
            bool load_optimizer) override;

 private:
  // A parameter's layer file ("layer_03"; empty for a copy another stage saves) and the name
  // its state is saved under (the whole model's).
  std::pair<std::string, std::string> where(const std::string& param) const;
  // This stage's directory of its optimizer's own state ("stage_01"), and its file of the
  // optimizer's entries of no parameter.
  std::string stage_dir() const;
  std::string wide_file() const;

  parallel::PipelineModule& module_;
  std::shared_ptr<parallel::ProcessGroup> pipe_, tensor_parallel_;
};

}  // namespace tessera::engine
