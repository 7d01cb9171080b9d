// launch::build: the one place a training job of a registered model is assembled from its
// config. It alone decides the layout (whole model, tensor parallel, pipeline, 3D), builds the
// process groups, the model or pipeline stage (activation checkpointing attached), the engine
// (Engine or PipelineEngine) and the corpus; `tessera train`, `profile`, the built-in trials
// and C++ programs all start from it.
//
//   auto job = tessera::launch::build(launch::read_config(path, world->size()), world);
//   engine::Trainer<models::Batch> trainer(*job->engine, *job->train_batches(), options);
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tessera/engine/engine.h"
#include "tessera/engine/pipeline_engine.h"
#include "tessera/io/batch_source.h"
#include "tessera/io/token_data.h"
#include "tessera/io/train_config.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/pretrained.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/pipeline_module.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/topology.h"

namespace tessera::launch {

// Which ranks share what. `data` holds this rank's data-parallel replicas (the world without
// model parallelism); `tensor` the ranks sharing one model's layers (null without tensor
// parallelism; NCCL on CUDA); `pipe` this rank's pipeline (null without one).
struct JobGroups {
  std::shared_ptr<parallel::ProcessGroup> world, data, tensor, pipe;
  parallel::ExpertParallelGroups experts;             // the "moe" section's ep_size > 1
  int stage = 0;                                      // this rank's pipeline stage
  std::optional<parallel::ProcessTopology> topology;  // pipelines: the (pipe, data, model) grid
};

// The config's layout over `world`: tensor_parallel.autotp_size adjacent ranks share a model,
// pipeline.stages stages form a pipeline (3D: the tensor-parallel ranks vary fastest).
JobGroups job_groups(const io::TrainConfig& cfg, std::shared_ptr<parallel::ProcessGroup> world);

// A built job. Exactly one of pretrained_model (whole, or this rank's tensor-parallel shard:
// one definition) and pipeline_module is set, and engine or pipeline_engine with it. Members are
// declared so that engines go before the models they hold.
struct Job {
  io::TrainConfig config;
  JobGroups groups;
  io::TokenizedCorpus corpus;
  std::unique_ptr<models::PretrainedModel> pretrained_model;
  std::unique_ptr<parallel::PipelineModule> pipeline_module;
  models::PipelineDefinition pipeline_definition;  // (a pipeline's: its batches' inputs, labels)
  std::shared_ptr<parallel::ActivationCheckpointing> checkpointing;  // null without the section
  std::shared_ptr<engine::Engine> engine;
  std::shared_ptr<engine::PipelineEngine> pipeline_engine;

  // (ZeRO-3: the model goes with the engine, so its parameters are not gathered whole first.)
  ~Job();
  bool is_pipeline() const { return pipeline_engine != nullptr; }
  // The whole model, this rank's tensor-parallel shard, or this stage's PipelineModule.
  nn::Module& model();
  // The engine that steps this rank's parameters (a pipeline's: its stage engine).
  engine::Engine& stage_engine();
  int data_rank() const { return groups.data->rank(); }
  int data_size() const { return groups.data->size(); }
  // This data-parallel rank's slice of the training (validation) batches.
  std::unique_ptr<io::BatchSource<models::Batch>> train_batches() const;
  std::unique_ptr<io::BatchSource<models::Batch>> val_batches() const;
  // The tokenizer files every checkpoint carries (for `tessera export`).
  std::map<std::string, std::string> tokenizer_files() const;
  // A pipeline's micro-batch from a model batch (through the model's pipeline definition;
  // BERT's labels carry the loss weight on the last stage).
  engine::PipeMicroBatch pipe_micro_batch(const models::Batch& batch);
  // The start-up line: model, layout, sizes, batch, optimizer, steps, threads.
  std::string summary();
};

// A training config for a job of `world_size` ranks (io::TrainConfig::parse / from_file),
// checked against the model registry: model.type registered, and the model keys it does not
// read added to cfg.warnings (models::check_model_config).
io::TrainConfig parse_config(const std::string& json_text, int64_t world_size,
                             const std::string& source);
io::TrainConfig read_config(const std::string& path, int64_t world_size);

// The job `cfg` describes over `world` (every rank calls it): the corpus (rank 0 tokenises
// it), groups, model, checkpointing and engine. Errors name the config key.
std::unique_ptr<Job> build(io::TrainConfig cfg, std::shared_ptr<parallel::ProcessGroup> world);

}  // namespace tessera::launch
