#include "tessera/launch/model_build.h"

#include "tessera/cuda.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/pretrained.h"
#include "tessera/parallel/pipe_schedule_registry.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::launch {

std::unique_ptr<models::PretrainedModel> build_model(const io::TrainConfig& cfg, int64_t vocab,
                                                     std::shared_ptr<parallel::ProcessGroup> tp,
                                                     parallel::ExpertParallelGroups experts) {
  manual_seed(cfg.train.seed);
  const parallel::ParallelContext ctx{
      std::move(tp), parallel::tensor_parallel_config(cfg).sequence_parallel, std::move(experts)};
  const std::string& init_from = cfg.model.init_from;
  // Tensor parallel: each rank takes its shards of model.init_from's whole model (read first,
  // as it always was, so the generator is where it was when the shards are built).
  std::unique_ptr<models::PretrainedModel> whole;
  if (ctx.tensor_group() && !init_from.empty()) whole = models::load_pretrained(init_from);
  auto model = models::find_model(cfg.model.type).build(cfg, vocab, ctx);
  if (whole)
    model->load_from_whole(*whole, "model.init_from: " + init_from);
  else if (!init_from.empty())  // (into this model: a second one doubled the start-up memory)
    models::load_hf_directory_weights(*model, init_from);
  const Device device = job_device(cfg);
  if (device.is_cuda()) model->to(device);
  return model;
}

Device job_device(const io::TrainConfig& cfg) {
  Device device = Device::parse(cfg.train.device);
  // "cuda" under a launcher: one GPU per rank on each machine, by local rank.
  if (cfg.train.device == "cuda" && parallel::launched_distributed())
    device = Device::cuda(parallel::local_device_index());
  require_usable_device(device, "train.device");
  return device;
}

parallel::PipelineModuleOptions pipeline_module_options(
    const io::TrainConfig& cfg, const models::PipelineDefinition& definition,
    std::shared_ptr<parallel::ProcessGroup> tp) {
  const parallel::PipelineConfig& pipe = parallel::pipeline_config(cfg);
  parallel::PipelineModuleOptions po;
  po.num_stages = pipe.stages;
  po.virtual_stages = parallel::pipeline_virtual_stages(cfg);
  po.partition_method = pipe.partition;
  po.activation_checkpoint_interval = pipe.activation_checkpoint_interval;
  if (parallel::activation_checkpointing_config(cfg).enabled) {
    po.checkpointing = std::make_shared<parallel::ActivationCheckpointing>(
        parallel::activation_checkpointing_config(cfg), tp);
    if (po.activation_checkpoint_interval == 0)
      po.activation_checkpoint_interval =
          po.checkpointing->layers_per_checkpoint(cfg.model.n_layer);
  }
  po.checkpointable_layers = {definition.checkpointable_layer};
  return po;
}

std::shared_ptr<parallel::ActivationCheckpointing> attach_activation_checkpointing(
    models::PretrainedModel& model, const io::TrainConfig& cfg,
    std::shared_ptr<parallel::ProcessGroup> tp) {
  if (!parallel::activation_checkpointing_config(cfg).enabled) return nullptr;
  auto ckpt = std::make_shared<parallel::ActivationCheckpointing>(
      parallel::activation_checkpointing_config(cfg), std::move(tp));
  model.set_activation_checkpointing(ckpt);
  return ckpt;
}

std::unique_ptr<nn::Module> fresh_model(const io::TrainConfig& cfg, int64_t vocab,
                                        std::shared_ptr<parallel::ProcessGroup> tp,
                                        parallel::ExpertParallelGroups experts) {
  return models::find_model(cfg.model.type)
      .build(cfg, vocab,
             {std::move(tp), parallel::tensor_parallel_config(cfg).sequence_parallel,
              std::move(experts)});
}

models::PipelineDefinition pipeline_definition(const io::TrainConfig& cfg, int64_t vocab,
                                               std::shared_ptr<parallel::ProcessGroup> tp) {
  const models::ModelEntry& entry = models::find_model(cfg.model.type);
  TS_CHECK(entry.pipeline, "pipeline.stages ", parallel::pipeline_config(cfg).stages,
           ": model.type \"", entry.type,
           "\" does not run as a pipeline (its registry entry has no pipeline definition)");
  return entry.pipeline(cfg, vocab,
                        {std::move(tp), parallel::tensor_parallel_config(cfg).sequence_parallel});
}

std::unique_ptr<parallel::PipelineModule> build_pipeline_model(
    const io::TrainConfig& cfg, const models::PipelineDefinition& definition, int64_t vocab,
    int stage, std::shared_ptr<parallel::ProcessGroup> tp) {
  const parallel::PipelineModuleOptions po = pipeline_module_options(cfg, definition, tp);
  std::unique_ptr<models::PretrainedModel> whole = build_model(cfg, vocab);
  auto model =
      std::make_unique<parallel::PipelineModule>(definition.layers, definition.loss, stage, po);
  model->set_saved_names(definition.whole_name);
  model->load_saved_state(whole->state_dict(), tp ? tp->rank() : 0, tp ? tp->size() : 1);
  model->set_config_json(whole->config_json());
  return model;
}

}  // namespace tessera::launch
