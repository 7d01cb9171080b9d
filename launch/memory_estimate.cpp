#include "tessera/launch/memory_estimate.h"
#include "tessera/models/moe_config.h"
#include "tessera/parallel/zero_config.h"

#include <algorithm>
#include <set>

#include "tessera/engine/fp8_config.h"
#include "tessera/io/token_data.h"
#include "tessera/io/tokenizer.h"
#include "tessera/launch/model_build.h"
#include "tessera/launch/train_data.h"
#include "tessera/models/activation_memory.h"
#include "tessera/models/model_registry.h"
#include "tessera/optim/optimizer_registry.h"
#include "tessera/parallel/moe.h"
#include "tessera/parallel/pipe_schedule.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/shape_only_group.h"
#include "tessera/parallel/tensor_parallel_config.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::launch {

namespace {

// The config's micro-batch and layout as an activation plan.
models::ActivationPlan activation_plan(const io::TrainConfig& cfg) {
  models::ActivationPlan p;
  p.batch = cfg.micro_batch_size;
  p.sequence = cfg.model.block_size;
  p.tensor_parallel = parallel::tensor_parallel_config(cfg).autotp_size;
  p.sequence_parallel = parallel::tensor_parallel_config(cfg).sequence_parallel;
  p.dtype = cfg.model_dtype();
  p.fp8 = engine::fp8_config(cfg).enabled;
  const parallel::ActivationCheckpointingOptions& ac =
      parallel::activation_checkpointing_config(cfg);
  if (ac.enabled) {
    p.layers_per_checkpoint = parallel::layers_per_checkpoint(ac, cfg.model.n_layer);
    p.partition_activations = ac.partition_activations;
    p.checkpoints_on_host = ac.cpu_checkpointing && cfg.train.device.rfind("cuda", 0) == 0;
  }
  return p;
}

// The activation bytes per rank of the config's model, micro-batch and layout (nullopt: its
// registry entry does not estimate them).
std::optional<int64_t> activation_bytes(const io::TrainConfig& cfg, int64_t vocab) {
  const models::ModelEntry& e = models::find_model(cfg.model.type);
  if (!e.activation_bytes) return std::nullopt;
  return e.activation_bytes(cfg, vocab, activation_plan(cfg));
}

// A tensor-parallel rank's layers are built over a group that only has a size: rank 0's
// shards, and every rank's are alike.
std::shared_ptr<parallel::ProcessGroup> shape_only_tensor_group(const io::TrainConfig& cfg) {
  const int64_t tp = parallel::tensor_parallel_config(cfg).autotp_size;
  return tp > 1 ? std::make_shared<parallel::ShapeOnlyGroup>(static_cast<int>(tp)) : nullptr;
}

// MoE with ep_size > 1: a rank's experts (rank 0's; every rank holds as many).
parallel::ExpertParallelGroups shape_only_expert_groups(const io::TrainConfig& cfg) {
  const auto moe = models::moe_of(cfg);
  if (!moe || moe->ep_size == 1) return {};
  const int ep = static_cast<int>(moe->ep_size);
  return {std::make_shared<parallel::ShapeOnlyGroup>(ep),
          std::make_shared<parallel::ShapeOnlyGroup>(static_cast<int>(cfg.world_size) / ep)};
}

// The layout of `model`'s parameters over `data_ranks`; `experts` picks the MoE experts
// alone, or all but them (nullopt: every parameter).
parallel::ShardLayout layout_of(nn::Module& model, int data_ranks,
                                std::optional<bool> experts = std::nullopt) {
  std::set<const Tensor*> expert_slots;
  for (auto& [path, layer] : parallel::moe_layers(model))
    for (Tensor* t : layer->expert_parameters()) expert_slots.insert(t);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (auto& [n, t] : model.named_parameters())
    if (!experts || *experts == static_cast<bool>(expert_slots.count(t)))
      shapes.emplace_back(n, t->shape());
  return parallel::ShardLayout(shapes, data_ranks);
}

// offload_optimizer "nvme": the optimizer's slots, and the float32 masters where they are a
// copy apart from the model, go to the swap file, a page-aligned region per tensor; swapped
// masters publish through a model-dtype copy of the partition (stages 1-2; ZeRO-3's shards are
// it). Staging holds at most one sub-group's tensors plus the buffer budget (buffer_count
// buffers of the largest sub-group, as ZeroOptimizer::nvme_buffer_numel), and with
// pipeline_write the tensors those are writing.
void nvme_state_bytes(const parallel::ZeroConfig& z, const parallel::ShardLayout& layout,
                      int64_t slots, bool masters, int stage, int64_t model_bytes,
                      ModelStateBytes& e) {
  const auto aligned = io::AsyncFileIO::aligned;
  const int64_t tensors = slots + (masters ? 1 : 0);  // swapped per parameter
  int64_t largest = 0;                                // elements
  for (const auto& en : layout.entries) {
    e.disk += tensors * aligned(en.shard * 4);
    largest = std::max(largest, en.shard);
  }
  const int64_t P = layout.partition_numel;
  e.optimizer -= tensors * 4 * P;
  if (masters && stage < 3) e.optimizer += model_bytes * P;
  const int64_t sub_group = std::max(largest, std::min(z.sub_group_size, P));
  const int64_t budget = z.offload_buffer_count * aligned(sub_group * 4);
  if (tensors > 0) e.swap += tensors * 4 * sub_group + budget * (z.offload_pipeline_write ? 2 : 1);
}

// offload_optimizer "nvme" at stages 2-3 on CPU ranks: the gradient partition goes to the swap
// file too, a page-aligned region per parameter in the communication dtype; a sub-group's
// gradients are read in with its state (and, when 16-bit, converted to float32 beside it),
// through one more staging buffer where the next sub-group's reads ahead hold the budget.
void nvme_grad_bytes(const parallel::ZeroConfig& z, const parallel::ShardLayout& layout,
                     int64_t grad_bytes, ModelStateBytes& e) {
  const auto aligned = io::AsyncFileIO::aligned;
  int64_t largest = 0;
  for (const auto& en : layout.entries) {
    e.disk += aligned(en.shard * grad_bytes);
    largest = std::max(largest, en.shard);
  }
  const int64_t P = layout.partition_numel;
  e.grads -= P * grad_bytes;
  const int64_t sub_group = std::max(largest, std::min(z.sub_group_size, P));
  e.swap += sub_group * (grad_bytes + (grad_bytes == 4 ? 0 : 4)) + aligned(sub_group * grad_bytes);
}

// offload_param "nvme" (ZeRO-3): the shards that parallel::swapped_param_shards puts in the
// swap file go there, a page-aligned region each; the swap holds the read-ahead buffers
// (buffer_count x buffer_size elements, or one larger shard) and the shards read in for gathers
// in flight (the prefetch bucket's share, one in use, one being published).
void param_nvme_bytes(const parallel::ZeroConfig& z, const parallel::ShardLayout& layout,
                      const parallel::ZeroOptions& o, int64_t model_bytes, ModelStateBytes& e) {
  const auto aligned = io::AsyncFileIO::aligned;
  const std::vector<bool> swapped = parallel::swapped_param_shards(layout, o);
  int64_t largest = 0;  // (largest swapped shard)
  for (size_t i = 0; i < layout.entries.size(); ++i) {
    if (!swapped[i]) continue;
    const int64_t shard = layout.entries[i].shard;
    largest = std::max(largest, shard);
    e.disk += aligned(shard * model_bytes);
    e.params -= shard * model_bytes;
  }
  if (largest == 0) return;  // (all kept in memory: the swap file stays empty)
  const int64_t budget =
      std::max(z.offload_param_buffer_count * aligned(z.offload_param_buffer_size * model_bytes),
               aligned(largest * model_bytes));
  e.swap += budget + model_bytes * (z.stage3_prefetch_bucket_size / layout.world + 2 * largest);
}

// A rank's model state at ZeRO `stage`: with MoE expert parallelism (stages 1-2) the experts
// are partitioned over their dp / ep_size replicas, the rest over the dp ranks.
ModelStateBytes rank_state_bytes(const io::TrainConfig& cfg, nn::Module& model, int stage, int dp) {
  const auto moe = models::moe_of(cfg);
  if (stage == 0 || !moe || moe->ep_size == 1)
    return model_state_bytes(cfg, layout_of(model, dp), stage, dp);
  const int replicas = dp / static_cast<int>(moe->ep_size);
  const ModelStateBytes d = model_state_bytes(cfg, layout_of(model, dp, false), stage, dp);
  const ModelStateBytes e =
      model_state_bytes(cfg, layout_of(model, replicas, true), stage, replicas);
  return {d.params + e.params,   d.grads + e.grads, d.optimizer + e.optimizer,
          d.buffers + e.buffers, d.disk + e.disk,   d.swap + e.swap};
}

}  // namespace

ModelStateBytes model_state_bytes(const io::TrainConfig& c, const parallel::ShardLayout& layout,
                                  int stage, int world) {
  const parallel::ZeroConfig& z = parallel::zero_config(c);
  const bool mixed = c.fp16.enabled || c.bf16;
  const DType model = c.model_dtype(), comm = c.communication_dtype();
  const int64_t pb = static_cast<int64_t>(itemsize(model)),
                gb = static_cast<int64_t>(itemsize(comm));
  const int64_t slots = optim::find_optimizer(c.optimizer.type).state_slots(c.optimizer.values());
  const int64_t psi = layout.total_numel(), P = layout.partition_numel;
  ModelStateBytes e;
  if (stage == 0) {
    e.params = psi * pb;
    e.grads = psi * (world > 1 ? gb : pb);
    e.optimizer = (mixed ? 4 * psi : 0) + slots * 4 * psi;
    return e;
  }
  // A float32 model updated where it lives keeps no separate masters at stages 1-2: its
  // parameters sit in padded [world * shard] storages instead.
  const bool offloaded_elsewhere =
      z.offload_optimizer_device != "none" && c.train.device.rfind("cuda", 0) == 0;
  const bool model_is_master = stage < 3 && !mixed && !offloaded_elsewhere;
  // ZeRO-3's float32 shards are the masters where both live in the same memory.
  const bool on_gpu = c.train.device.rfind("cuda", 0) == 0;
  const bool params_nvme = z.offload_param_device == "nvme";
  const bool shards_are_masters = stage == 3 && !mixed && !params_nvme &&
                                  (z.offload_param_device != "none" || !on_gpu) ==
                                      (z.offload_optimizer_device != "none" || !on_gpu);
  parallel::ZeroOptions o = parallel::zero_options(c);  // (what the run's ZeroOptimizer gets)
  o.stage = stage;
  int64_t padded = 0;
  for (const auto& en : layout.entries) padded += en.shard * world;
  if (stage < 3) {
    e.params = model_is_master ? padded * 4 : psi * pb;
  } else {
    for (const auto& en : layout.entries)
      if (en.numel <= z.stage3_param_persistence_threshold) e.params += en.numel * pb;
    e.params += P * (shards_are_masters ? 4 : pb);
    if (params_nvme) param_nvme_bytes(z, layout, o, pb, e);
  }
  e.grads = P * gb + (stage == 1 ? psi * pb : 0);
  e.optimizer = (model_is_master || shards_are_masters ? 0 : 4 * P) + slots * 4 * P;
  if (z.offload_optimizer_device == "nvme") {
    nvme_state_bytes(z, layout, slots, !(model_is_master || shards_are_masters), stage, pb, e);
    if (stage >= 2 && !on_gpu) nvme_grad_bytes(z, layout, gb, e);
  }
  e.buffers = parallel::zero_buffer_bytes(layout, o, model, comm);
  return e;
}

std::optional<int64_t> config_vocab_size(const io::TrainConfig& cfg) {
  if (!cfg.model.init_from.empty()) {  // the pretrained embedding's rows
    const std::string path = cfg.model.init_from + "/config.json";
    return io::JsonFields(io::JsonFields::parse_file(path), "'" + path + "'")
        .integer("vocab_size", 1);
  }
  if (cfg.data.tokenizer == "wordpiece")
    return io::WordPieceTokenizer::from_file(cfg.data.vocab, cfg.data.lower_case).vocab_size();
  if (cfg.data.tokenizer == "gpt2") return 50257;
  if (cfg.data.path.empty()) return std::nullopt;
  return io::prepare_corpus(cfg.data, masked_lm(cfg), false).vocab_size;
}

MemoryEstimate estimate_memory(const io::TrainConfig& cfg, int64_t vocab) {
  TS_CHECK(parallel::pipeline_config(cfg).stages <= 1,
           "estimate_memory: a pipeline config (pipeline.stages ",
           parallel::pipeline_config(cfg).stages,
           ") is estimated stage by stage: estimate_pipeline_memory");
  // The run's own model (with autotp_size, a rank's tensor-parallel shard): what it holds is
  // what the engine will see.
  const std::unique_ptr<nn::Module> model =
      fresh_model(cfg, vocab, shape_only_tensor_group(cfg), shape_only_expert_groups(cfg));
  const int dp = static_cast<int>(cfg.world_size);  // data-parallel ranks: ranks / autotp_size
  const parallel::ShardLayout layout = layout_of(*model, dp);
  MemoryEstimate e;
  e.model_name = model->type_name();
  e.parameters = layout.total_numel();
  for (int s = 0; s <= 3; ++s)
    e.by_zero_stage[static_cast<size_t>(s)] = rank_state_bytes(cfg, *model, s, dp);
  const std::optional<int64_t> activations = activation_bytes(cfg, vocab);
  e.activations = activations.value_or(0);
  e.activations_estimated = activations.has_value();
  e.zero_stage = static_cast<int>(parallel::zero_config(cfg).stage);
  return e;
}

// Per stage, its PipelineModule's model state (ZeRO over the stage's replicas) and its
// activations (the schedule's most micro-batches held at once; 1F1B: min(micro-batches,
// stages - stage); ZB-H1 holds them until their weight pass).
std::vector<PipelineStageEstimate> estimate_pipeline_memory(const io::TrainConfig& cfg,
                                                            int64_t vocab) {
  TS_CHECK(parallel::zero_config(cfg).stage < 3,
           "zero_optimization.stage 3 with pipeline stages is refused by the engine (see "
           "docs/parallelism.md)");
  // 3D: each stage built of tensor-parallel layers (the layers check that heads and features
  // divide), so its parameters and its partition are a rank's.
  const models::PipelineDefinition definition =
      pipeline_definition(cfg, vocab, shape_only_tensor_group(cfg));
  const parallel::PipelineModuleOptions po = pipeline_module_options(cfg, definition);
  const models::ModelEntry& entry = models::find_model(cfg.model.type);
  const int dp = static_cast<int>(cfg.world_size),
            zero = static_cast<int>(parallel::zero_config(cfg).stage);
  models::ActivationPlan plan = activation_plan(cfg);
  plan.layers_per_checkpoint = po.activation_checkpoint_interval;
  const int64_t p = parallel::pipeline_config(cfg).stages, m = cfg.gradient_accumulation_steps;
  const int64_t dtype_bytes = static_cast<int64_t>(itemsize(cfg.model_dtype()));
  std::vector<PipelineStageEstimate> out;
  for (int64_t s = 0; s < p; ++s) {
    parallel::PipelineModule stage(definition.layers, {}, s, po);  // (builds its layers)
    PipelineStageEstimate e;
    e.state = model_state_bytes(cfg, layout_of(stage, dp), zero, dp);
    // Each chunk's layers (one chunk but with the interleaved schedule) and what they keep.
    std::vector<int64_t> chunk_bytes;
    for (int64_t c = 0; c < stage.virtual_stages(); ++c) {
      const size_t part = static_cast<size_t>(stage.part_of(c));
      const int64_t first = stage.bounds()[part], last = stage.bounds()[part + 1];
      chunk_bytes.push_back(entry.stage_activation_bytes
                                ? entry.stage_activation_bytes(cfg, vocab, plan, first, last)
                                : 0);
      e.layers.emplace_back(first, last);
    }
    e.activations = parallel::peak_activation_bytes(
        parallel::train_schedule(parallel::pipeline_config(cfg).schedule, m, p, s,
                                 stage.virtual_stages())
            ->steps(),
        chunk_bytes);
    // A tied module's copy (not a parameter of this stage): its weights and their gradient.
    for (const auto& [key, holders] : stage.tied_stages())
      if (holders.front() != s && std::count(holders.begin(), holders.end(), s))
        for (const Tensor* t : stage.tied_parameters(key))
          e.tied_copies += 2 * t->numel() * dtype_bytes;
    e.activations_estimated = static_cast<bool>(entry.stage_activation_bytes);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace tessera::launch
