// PipelineEngine's set-up: the groups a stage talks over (its pipeline, its data-parallel
// replicas, the stages sharing a tied module), the tied modules' traffic, the checkpoint
// files (one pair per layer), and DeepSpeed's initialize.
#include <algorithm>

#include "pipeline_layer_files.h"
#include "tessera/engine/pipeline_engine.h"
#include "tessera/error.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/pipe_schedule_registry.h"

namespace tessera::engine {

namespace {
constexpr int kTiedTag = 7004;
}  // namespace

parallel::ProcessTopology pipe_data_topology(int64_t stages) {
  const int world = parallel::world()->size();
  TS_CHECK(stages >= 1 && world % stages == 0, "pipeline: ", stages,
           " stages do not divide the job's ", world, " ranks");
  return parallel::ProcessTopology({"pipe", "data"},
                                   {static_cast<int>(stages), world / static_cast<int>(stages)});
}

parallel::ProcessTopology pipe_model_data_topology(int64_t stages, int64_t model) {
  if (model <= 1) return pipe_data_topology(stages);
  const int world = parallel::world()->size();
  TS_CHECK(stages >= 1 && world % (stages * model) == 0, "pipeline: ", stages, " stages x ", model,
           " tensor-parallel ranks do not divide the job's ", world, " ranks");
  return parallel::ProcessTopology(
      {"pipe", "data", "model"},
      {static_cast<int>(stages), world / static_cast<int>(stages * model),
       static_cast<int>(model)});
}

// The data-parallel group and the tied groups; the tied copies start from the first stage's.
void PipelineEngine::setup(std::shared_ptr<parallel::ProcessGroup> data_parallel) {
  TS_CHECK(pipe_ && pipe_->size() == module_.num_stages() && pipe_->rank() == module_.stage_id(),
           "PipelineEngine: the pipeline group's rank and size must be the module's stage and "
           "stage count (",
           module_.stage_id(), " of ", module_.num_stages(), ")");
  const int64_t v = module_.virtual_stages();
  const parallel::PipeScheduleEntry& schedule = parallel::find_pipe_schedule(options_.schedule);
  TS_CHECK(v >= schedule.min_virtual_stages && module_.num_stages() >= schedule.min_stages,
           "PipelineEngine: the ", schedule.type, " schedule needs ", schedule.min_stages,
           " or more stages of a PipelineModule of virtual_stages >= ", schedule.min_virtual_stages,
           " (this one: ", module_.num_stages(), " stages x ", v, " virtual stages)");
  TS_CHECK(schedule.takes_virtual_stages(v), "PipelineEngine: a PipelineModule of virtual_stages ",
           v, " (model chunks per stage) runs ", parallel::virtual_stage_pipe_schedules_text(),
           ", not '", options_.schedule, "'");
  sent_meta_.resize(static_cast<size_t>(v));
  rng_before_chunk_.assign(static_cast<size_t>(v), 0);
  received_meta_.resize(static_cast<size_t>(v));
  auto world = parallel::world();
  if (!options_.topology) {
    TS_CHECK(pipe_->size() == world->size() || data_parallel, "PipelineEngine: a pipeline of ",
             pipe_->size(), " stages in a job of ", world->size(),
             " ranks: give options.topology ({\"pipe\", \"data\"}, or {\"pipe\", \"data\", "
             "\"model\"} with tensor parallelism) for pipelines side by side");
    options_.topology = pipe_data_topology(pipe_->size());
  }
  const auto& topo = *options_.topology;
  TS_CHECK(topo.world_size() == world->size() && topo.dim("pipe") == pipe_->size(),
           "PipelineEngine: the topology (", topo.world_size(), " ranks, pipe ", topo.dim("pipe"),
           ") does not match the job (", world->size(), " ranks) and the pipeline (", pipe_->size(),
           " stages)");
  const auto& axes = topo.axes();
  const int model =
      std::find(axes.begin(), axes.end(), "model") != axes.end() ? topo.dim("model") : 1;
  const int tp = options_.tensor_parallel_group ? options_.tensor_parallel_group->size() : 1;
  TS_CHECK(model == tp, "PipelineEngine: the topology's \"model\" axis has ", model,
           " ranks but the tensor-parallel group (options.tensor_parallel_group, the one the "
           "stage's layers split over) has ",
           tp, " (3D: give both, e.g. {\"pipe\", \"data\", \"model\"})");
  data_parallel_ = data_parallel ? std::move(data_parallel) : topo.group_for(*world, "data");
  const std::vector<std::vector<int>> pipelines = topo.axis_groups("pipe");
  // One group per tied key held by several stages, in every pipeline (every rank of the job
  // takes part in building each, in the same order): the owner (the key's first stage)
  // refreshes the copies through it.
  for (const auto& [key, stages] : module_.tied_stages()) {
    if (stages.size() < 2) continue;
    for (const std::vector<int>& line : pipelines) {
      std::vector<int> ranks;
      for (int64_t s : stages) ranks.push_back(line.at(static_cast<size_t>(s)));
      if (auto g = world->new_group(ranks)) tied_groups_[key] = g;
    }
    if (!tied_groups_.count(key)) continue;
    if (stages.front() == module_.stage_id())
      tied_sources_[key] = std::vector<int64_t>(stages.begin() + 1, stages.end());
    else
      tied_owner_[key] = stages.front();
  }
}

std::shared_ptr<CheckpointFiles> PipelineEngine::layer_files() {
  if (pipe_->size() == 1) return nullptr;  // one stage: the whole module's own files
  return std::make_shared<PipelineLayerFiles>(module_, pipe_, options_.tensor_parallel_group);
}

// The owner's weights onto the copies (at every batch: after a step or a checkpoint load).
void PipelineEngine::refresh_tied_copies() {
  NoGradGuard no_grad;
  for (auto& [key, group] : tied_groups_)
    for (Tensor* p : module_.tied_parameters(key)) {
      if (!p->is_contiguous()) *p = p->contiguous();
      group->broadcast_async(*p, 0).wait();
    }
}

void PipelineEngine::send_tied_grads() {
  NoGradGuard no_grad;
  for (const auto& [key, owner] : tied_owner_)
    for (Tensor* p : module_.tied_parameters(key)) {
      const Tensor g = p->grad().defined() ? p->grad().contiguous() : zeros_like(*p);
      sends_.push_back(pipe_->send_async(g, static_cast<int>(owner), kTiedTag));
      p->set_grad(Tensor());
    }
}

void PipelineEngine::receive_tied_grads() {
  NoGradGuard no_grad;
  for (const auto& [key, sources] : tied_sources_)
    for (int64_t source : sources)
      for (Tensor* p : module_.tied_parameters(key)) {
        Tensor g = Tensor::empty(p->shape(), p->dtype(), p->device());
        pipe_->recv(g, static_cast<int>(source), kTiedTag);
        p->set_grad(p->grad().defined() ? p->grad() + g : g);
      }
}

std::unique_ptr<PipelineEngine> initialize(parallel::PipelineModule& model,
                                           const io::TrainConfig& config, InitializeOptions init,
                                           PipelineEngineOptions options) {
  if (!options.topology) options.topology = pipe_data_topology(model.num_stages());
  auto pipe = options.topology->group_for(*parallel::world(), "pipe");
  return std::make_unique<PipelineEngine>(model, std::move(pipe), config, std::move(init),
                                          std::move(options));
}

}  // namespace tessera::engine
