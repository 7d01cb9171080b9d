// The built-in models as a layout needs them: whole, a tensor-parallel shard, or one stage of
// a pipeline (with 3D's tensor-parallel layers), seeded and initialised as one process would,
// with the config's activation checkpointing attached, on the config's device.
#pragma once
#include <cstdint>
#include <memory>

#include "tessera/io/train_config.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/pretrained.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/pipeline_module.h"
#include "tessera/parallel/process_group.h"

namespace tessera::launch {

// The config's train.device for this process: "cuda" under a launcher is this rank's local GPU
// (its local rank); a CUDA device this machine does not have is an error naming the key.
Device job_device(const io::TrainConfig& cfg);

// The config's model (seeded by train.seed, from model.init_from when set) on train.device
// (under a launcher, "cuda" is this rank's local GPU). With `tp`, this rank's tensor-parallel
// shard of it (initialised as the whole model would be, or sharded from model.init_from).
std::unique_ptr<models::PretrainedModel> build_model(
    const io::TrainConfig& cfg, int64_t vocab, std::shared_ptr<parallel::ProcessGroup> tp = nullptr,
    parallel::ExpertParallelGroups experts = {});

// The config's architecture with fresh weights (seeded by the caller), on the CPU: whole
// without `tp`, else its tensor-parallel layers over `tp` (heads and features that do not
// divide are an error naming them); with `experts`, its MoE layers hold their share of the
// experts. estimate-memory sizes this very model.
std::unique_ptr<nn::Module> fresh_model(const io::TrainConfig& cfg, int64_t vocab,
                                        std::shared_ptr<parallel::ProcessGroup> tp = nullptr,
                                        parallel::ExpertParallelGroups experts = {});

// The config's model cut into pipeline stages (its registry entry's pipeline definition; with
// `tp`, 3D's tensor-parallel layers). A model without one is an error naming pipeline.stages.
models::PipelineDefinition pipeline_definition(const io::TrainConfig& cfg, int64_t vocab,
                                               std::shared_ptr<parallel::ProcessGroup> tp);

// Stage `stage` of `definition`, starting from the whole model's weights (as one process draws
// them, or model.init_from's), saving checkpoints under the whole model's names and config (one
// process, export and zero-to-fp32 read them). With `tp` (3D), each rank holds its shard.
std::unique_ptr<parallel::PipelineModule> build_pipeline_model(
    const io::TrainConfig& cfg, const models::PipelineDefinition& definition, int64_t vocab,
    int stage, std::shared_ptr<parallel::ProcessGroup> tp);

// The config's pipeline section as PipelineModule options: stages, partition, and checkpoints
// of activation_checkpoint_interval of the definition's checkpointable layers (with only the
// activation_checkpointing section, of as many as it groups in one process) through the
// section's options (partition_activations over `tp`, 3D's tensor-parallel group).
parallel::PipelineModuleOptions pipeline_module_options(
    const io::TrainConfig& cfg, const models::PipelineDefinition& definition,
    std::shared_ptr<parallel::ProcessGroup> tp = nullptr);

// The config's activation_checkpointing section set on the built-in model `model` (whole or
// tensor parallel over `tp`, which may be null); null when the config has no such section.
std::shared_ptr<parallel::ActivationCheckpointing> attach_activation_checkpointing(
    models::PretrainedModel& model, const io::TrainConfig& cfg,
    std::shared_ptr<parallel::ProcessGroup> tp);

}  // namespace tessera::launch
