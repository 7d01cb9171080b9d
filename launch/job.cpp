#include "tessera/launch/job.h"
#include "tessera/parallel/zero_config.h"

#include "tessera/device.h"
#include "tessera/error.h"
#include "tessera/launch/model_build.h"
#include "tessera/launch/train_data.h"
#include "tessera/models/moe_config.h"
#include "tessera/parallel/pipe_schedule_registry.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::launch {

namespace {

// Checked before any group or model is made: a pipeline's own limits.
void check_pipeline_config(const io::TrainConfig& cfg) {
  TS_CHECK(Device::parse(cfg.train.device).is_cpu(), "pipeline: train.device ", cfg.train.device,
           ": pipelines run on the CPU (MPI) so far");
  const parallel::TensorParallelConfig& tensor = parallel::tensor_parallel_config(cfg);
  const int64_t tp = tensor.autotp_size;
  TS_CHECK(!tensor.sequence_parallel || cfg.model.block_size % tp == 0,
           "tensor_parallel.sequence_parallel: model.block_size ", cfg.model.block_size,
           " does not divide among autotp_size ", tp,
           " ranks (each stage passes every rank's chunk of the sequence)");
}

void build_pipeline(Job& job) {
  const io::TrainConfig& cfg = job.config;
  const int stage = job.groups.stage;
  job.pipeline_definition = pipeline_definition(cfg, job.corpus.vocab_size, job.groups.tensor);
  job.pipeline_module = build_pipeline_model(cfg, job.pipeline_definition, job.corpus.vocab_size,
                                             stage, job.groups.tensor);
  parallel::PipelineModule& model = *job.pipeline_module;
  TS_CHECK(parallel::zero_config(cfg).stage == 0 || model.num_parameters() > 0, "pipeline: stage ",
           stage, " holds no parameters of its own (its layers: ", model.bounds()[stage], " to ",
           model.bounds()[stage + 1] - 1,
           ", e.g. a tied head whose weights the first stage owns), "
           "and zero_optimization.stage ",
           parallel::zero_config(cfg).stage,
           " partitions each stage's parameters; "
           "use pipeline.partition \"parameters\" or fewer pipeline.stages");
  engine::InitializeOptions init;
  init.group = job.groups.data;
  init.tensor_parallel_group = job.groups.tensor;
  job.pipeline_engine = std::make_shared<engine::PipelineEngine>(
      *job.pipeline_module, job.groups.pipe, cfg, std::move(init),
      engine::PipelineEngineOptions{.topology = *job.groups.topology});  // (the config's schedule)
  job.checkpointing = job.pipeline_module->options().checkpointing;
}

void build_model_and_engine(Job& job) {
  const io::TrainConfig& cfg = job.config;
  job.pretrained_model =
      build_model(cfg, job.corpus.vocab_size, job.groups.tensor, job.groups.experts);
  job.checkpointing =
      attach_activation_checkpointing(*job.pretrained_model, cfg, job.groups.tensor);
  engine::InitializeOptions init;
  init.group = job.groups.data;
  init.tensor_parallel_group = job.groups.tensor;
  job.engine = engine::initialize(job.model(), cfg, std::move(init));
  if (auto layer_drop = job.engine->progressive_layer_drop())
    job.pretrained_model->set_progressive_layer_drop(std::move(layer_drop));
  if (auto token_drop = job.engine->random_layer_token_drop())
    job.pretrained_model->set_random_layer_token_drop(std::move(token_drop));
}

}  // namespace

JobGroups job_groups(const io::TrainConfig& cfg, std::shared_ptr<parallel::ProcessGroup> world) {
  const int tp = static_cast<int>(parallel::tensor_parallel_config(cfg).autotp_size);
  const int64_t stages = parallel::pipeline_config(cfg).stages;
  // (TrainConfig::parse checked that its world divides; this is that world.)
  TS_CHECK(cfg.world_size * tp * stages == world->size(),
           "launch::build: the config's batch was resolved for ", cfg.world_size * tp * stages,
           " ranks (TrainConfig's world size) but the job has ", world->size());
  JobGroups g{.world = world, .data = world};
  // MoE: experts spread over the data-parallel ranks (of each tensor-parallel rank).
  const auto moe = models::moe_of(cfg);
  const int ep = moe ? static_cast<int>(moe->ep_size) : 1;
  if (ep > 1 && tp == 1)  // (no pipelines)
    g.experts = parallel::make_expert_parallel_groups(*world, ep);
  if (stages > 1) {
    // 3D: stages x data-parallel replicas x tensor-parallel ranks (the last varies fastest).
    g.topology = engine::pipe_model_data_topology(stages, tp);
    g.stage = g.topology->coords_of(world->rank()).at("pipe");
    g.pipe = g.topology->group_for(*world, "pipe");
    g.data = g.topology->group_for(*world, "data");
    if (tp > 1) g.tensor = g.topology->group_for(*world, "model");
    return g;
  }
  if (tp == 1) return g;
  const parallel::ProcessTopology topo({"data", "model"}, {world->size() / tp, tp});
  g.data = topo.group_for(*world, "data");
  g.tensor = topo.group_for(*world, "model");
  if (ep > 1) g.experts = parallel::make_expert_parallel_groups(*g.data, ep);
  if (const Device device = job_device(cfg); device.is_cuda())
    g.tensor = parallel::make_nccl_group(g.tensor, device);
  return g;
}

Job::~Job() {
  if (engine && engine->zero_optimizer()) engine->zero_optimizer()->keep_partitioned();
}

nn::Module& Job::model() {
  if (pretrained_model) return *pretrained_model;
  TS_CHECK(pipeline_module, "launch::Job: no model was built");
  return *pipeline_module;
}

engine::Engine& Job::stage_engine() {
  if (pipeline_engine) return pipeline_engine->stage_engine();
  TS_CHECK(engine, "launch::Job: no engine was built");
  return *engine;
}

std::unique_ptr<io::BatchSource<models::Batch>> Job::train_batches() const {
  auto batches = launch::train_batches(config, corpus, data_rank(), data_size());
  return engine ? curriculum_batches(std::move(batches), *engine, config) : std::move(batches);
}

std::unique_ptr<io::BatchSource<models::Batch>> Job::val_batches() const {
  return launch::val_batches(config, corpus, data_rank(), data_size());
}

std::map<std::string, std::string> Job::tokenizer_files() const {
  return launch::tokenizer_files(config, corpus);
}

engine::PipeMicroBatch Job::pipe_micro_batch(const models::Batch& b) {
  const models::PipelineDefinition& d = pipeline_definition;
  parallel::PipeValue inputs = d.inputs ? d.inputs(b) : parallel::PipeValue{b.input_ids};
  if (!d.labels) return {std::move(inputs), {b.targets}};
  // The last stage weighs the loss as the engine weighs a whole model's (nn/loss_model.h).
  const double weight = pipeline_engine->is_last_stage()
                            ? pipeline_engine->stage_engine().loss_weight(b.loss_terms())
                            : 0.0;
  return {std::move(inputs), d.labels(b, weight)};
}

io::TrainConfig parse_config(const std::string& json_text, int64_t world_size,
                             const std::string& source) {
  io::TrainConfig cfg = io::TrainConfig::parse(json_text, world_size, source);
  models::check_model_config(cfg);
  return cfg;
}

io::TrainConfig read_config(const std::string& path, int64_t world_size) {
  io::TrainConfig cfg = io::TrainConfig::from_file(path, world_size);
  models::check_model_config(cfg);
  return cfg;
}

std::unique_ptr<Job> build(io::TrainConfig cfg, std::shared_ptr<parallel::ProcessGroup> world) {
  auto job = std::make_unique<Job>();
  models::check_model_config(cfg);         // (a config not read through read_config)
  parallel::check_pipeline_schedule(cfg);  // (a config built in code)
  job->config = std::move(cfg);
  if (parallel::pipeline_config(job->config).stages > 1) check_pipeline_config(job->config);
  job->groups = job_groups(job->config, world);
  job->corpus = shared_corpus(job->config, *world);
  if (parallel::pipeline_config(job->config).stages > 1)
    build_pipeline(*job);
  else
    build_model_and_engine(*job);
  job->train_batches();  // the data's errors now, not after training
  job->val_batches();
  return job;
}

}  // namespace tessera::launch
