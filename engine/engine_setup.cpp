// The engine's set-up from its config: the optimizer and LR schedule DeepSpeed's sections
// name, parameter groups (the client's, or decay / no-decay by default), the optimizer over
// them (or over ZeRO's partitions), the data-parallel and ZeRO machinery, and initialize().
#include <algorithm>
#include <cmath>
#include <iostream>

#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/async_file_io.h"
#include "tessera/ops.h"
#include "tessera/optim/lr_schedule_registry.h"
#include "tessera/optim/optimizer_registry.h"
#include "tessera/parallel/grad_norm.h"
#include "tessera/parallel/onebit_transport.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::engine {

std::unique_ptr<optim::LRSchedule> make_schedule(const io::TrainConfig& c,
                                                 std::optional<double> optimizer_lr) {
  const auto& s = c.scheduler;
  const double lr = optimizer_lr.value_or(c.optimizer.lr());
  if (s.type.empty()) return std::make_unique<optim::ConstantLR>(lr);
  // The section's values over the registry entry's defaults (optim/lr_schedule_registry.h).
  const optim::LRScheduleEntry& entry = optim::find_lr_schedule(s.type);
  const auto wt = s.warmup_type == "linear" ? optim::WarmupType::Linear : optim::WarmupType::Log;
  // Momentum is cycled for optimizers with betas (Adam, AdamW, Lamb), as in DeepSpeed; the
  // config reader warns that SGD's is not.
  return entry.build(entry.values(s.params),
                     {.optimizer_lr = lr,
                      .optimizer_has_betas = optim::find_optimizer(c.optimizer.type).has_betas},
                     wt);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const io::TrainConfig& c,
                                                 std::vector<optim::ParamGroup> groups) {
  // The section's values over the registry entry's defaults (optim/optimizer_registry.h).
  return optim::find_optimizer(c.optimizer.type).build(std::move(groups), c.optimizer.values());
}

std::vector<optim::ParamGroup> Engine::resolve_groups(const InitializeOptions& options) {
  const auto& o = config_.optimizer;
  const auto named = model_.named_parameters();
  std::vector<optim::ParamGroup> groups;
  if (options.optimizer) {
    // The object's groups: names from the tensors (a group built from tensors alone has none).
    for (const auto& g : options.optimizer->groups()) {
      optim::ParamGroup spec{{}, {}, g.lr, g.weight_decay};
      for (const Tensor& p : g.params) {
        const auto it = std::find_if(named.begin(), named.end(),
                                     [&](const auto& e) { return e.second->same(p); });
        TS_CHECK(it != named.end(), "initialize: the client optimizer's group ", groups.size(),
                 " holds ", p.describe(), ", which is not a parameter of the model");
        spec.names.push_back(it->first);
      }
      groups.push_back(std::move(spec));
    }
  } else if (!options.model_parameters.empty()) {
    for (const auto& g : options.model_parameters)
      groups.push_back(
          {g.names, {}, g.lr.value_or(o.lr()), g.weight_decay.value_or(o.weight_decay())});
  } else {
    groups = optim::default_param_groups(named, o.lr(), o.weight_decay(), o.weight_decay_1d());
    for (auto& g : groups) g.params.clear();
  }
  std::map<std::string, size_t> group_of;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (const std::string& name : groups[gi].names) {
      TS_CHECK(
          std::any_of(named.begin(), named.end(), [&](const auto& e) { return e.first == name; }),
          "initialize: parameter group ", gi, " names '", name,
          "', which is not a parameter of the model");
      const auto [it, fresh] = group_of.emplace(name, gi);
      TS_CHECK(fresh, "initialize: parameter '", name, "' is in groups ", it->second, " and ", gi,
               "; a parameter belongs to one group");
    }
  return groups;
}

void Engine::build_optimizer(InitializeOptions& options, std::vector<optim::ParamGroup> groups) {
  std::vector<std::pair<std::string, Tensor*>> named = model_.named_parameters();
  if (compute_dtype_ != DType::Float32) {
    // float32 master weights for the optimizer; the model computes in 16 bits.
    std::vector<Tensor> masters;
    for (auto& [n, t] : named)
      masters.push_back(t->detach().to(DType::Float32).contiguous().clone());
    model_.to(compute_dtype_);
    named = model_.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) master_.emplace_back(named[i].second, masters[i]);
    for (size_t i = 0; i < named.size(); ++i) named[i].second = &master_[i].second;
  }
  std::map<std::string, Tensor> by_name;
  for (auto& [n, t] : named) by_name[n] = *t;
  for (auto& g : groups)
    for (const std::string& n : g.names) g.params.push_back(by_name.at(n));
  if (options.optimizer && master_.empty()) {
    // Its tensors are the model's; their names key its state in checkpoints.
    for (size_t g = 0; g < groups.size(); ++g)
      options.optimizer->groups()[g].names = groups[g].names;
    optimizer_ = std::move(options.optimizer);
  } else if (options.optimizer) {
    optimizer_ = options.optimizer->rebuild(std::move(groups));
  } else if (options.optimizer_factory) {
    optimizer_ = options.optimizer_factory(std::move(groups));
  } else {
    optimizer_ = make_optimizer(config_, std::move(groups));
  }
  TS_CHECK(optimizer_, "initialize: the client optimizer factory returned no optimizer");
  // (ZeRO's optimizer is built over partitions, where such an optimizer is refused.)
  if (optimizer_->takes_data_parallel_transport() && group_->size() > 1)
    optimizer_->set_data_parallel_transport(
        std::make_shared<parallel::ProcessGroupOneBitTransport>(group_));
  if (!master_.empty()) {
    // The fused update reads the model's 16-bit gradients and writes its 16-bit weights.
    std::vector<std::vector<Tensor*>> copies;
    for (const auto& g : optimizer_->groups()) {
      copies.emplace_back();
      for (const Tensor& p : g.params)
        for (auto& [slot, master] : master_)
          if (master.same(p)) copies.back().push_back(slot);
    }
    optimizer_->set_model_copies(std::move(copies));
  }
}

Engine::~Engine() {
  // The group may outlive this engine: it must not call into the engine's trace any more.
  if (trace_) group_->logger().set_listener(nullptr);
}

void Engine::setup_parallel(std::vector<optim::ParamGroup> groups,
                            const optim::OptimizerFactory& make) {
  const auto& c = config_;
  const parallel::ZeroConfig& z = parallel::zero_config(c);
  const int world = group_->size();
  const DType comm = c.communication_dtype();
  // DeepSpeed's averaging order (engine.allreduce_bucket): by default ("postscale") each
  // rank multiplies by 1/gradient_predivide_factor before the sum and the sum by
  // gradient_predivide_factor/N after; prescale_gradients multiplies by 1/N before the sum.
  const double f = c.gradient_predivide_factor;
  const double pre = c.prescale_gradients ? 1.0 / world : 1.0 / f;
  const double post = c.prescale_gradients ? 1.0 : f / world;
  if (z.stage == 0) {
    parallel::GradBuckets::Options bo;
    bo.bucket_numel = z.reduce_bucket_size;
    bo.overlap = z.overlap_comm;
    bo.pre_scale = pre;
    bo.post_scale = post;
    bo.comm_dtype = comm;
    TS_CHECK(expert_slots_.empty() || !optimizer_->takes_data_parallel_transport(),
             "engine: optimizer ", config_.optimizer.type,
             " exchanges compressed gradients over all ranks, which MoE expert parallelism "
             "(moe.ep_size > 1) does not do yet");
    std::vector<Tensor*> slots;
    for (auto& [n, t] : model_.named_parameters())
      if (!is_expert(t)) slots.push_back(t);
    dp_buckets_ = std::make_unique<parallel::GradBuckets>(
        group_, slots, parallel::GradBuckets::Mode::AllReduce, bo);
    // Experts' gradients already hold their expert-parallel ranks' tokens (the all-to-all's
    // backward): summed over the ranks holding the same experts, averaged over all ranks.
    if (!expert_slots_.empty())
      expert_buckets_ = std::make_unique<parallel::GradBuckets>(
          expert_data_group_, expert_slots_, parallel::GradBuckets::Mode::AllReduce, bo);
    return;
  }
  post_scale_ = post;  // ZeRO's partitions hold sums; the step averages them
  parallel::ZeroOptions zo = parallel::zero_options(c);
  zo.compute_dtype = compute_dtype_;
  zo.pre_scale = pre;
  zo.comm_dtype = comm;
  if (!expert_slots_.empty()) {  // experts partitioned over their own replicas
    zo.expert_data_group = expert_data_group_;
    for (auto& [n, t] : model_.named_parameters())
      if (is_expert(t)) zo.expert_params.insert(n);
  }
  if (tp_group_) {
    zo.tensor_parallel_group = tp_group_;
    for (const auto& split : parallel::tensor_parallel_layout(model_))
      zo.tensor_parallel_params.insert(split.first);
  }
  zero_ = std::make_unique<parallel::ZeroOptimizer>(model_, group_, zo, make, std::move(groups));
  const std::string name = zero_->optimizer().name();
  TS_CHECK(!optim::has_optimizer(name) || optim::find_optimizer(name).updates_partitions,
           "engine: zero_optimization.stage ", z.stage, " with optimizer ", name,
           " is not supported (", optim::find_optimizer(name).no_zero_reason,
           "); use stage 0 or another optimizer (`tessera optimizers` lists them)");
}

std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config,
                                   InitializeOptions options) {
  return std::make_unique<Engine>(model, config, std::move(options));
}

std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config,
                                   std::shared_ptr<parallel::ProcessGroup> group) {
  return std::make_unique<Engine>(model, config, std::move(group));
}

void Engine::setup_tensor_parallel(std::shared_ptr<parallel::ProcessGroup> tp, bool pipeline) {
  if (!tp || tp->size() == 1) return;
  tp_group_ = std::move(tp);
  for (Tensor* t : parallel::tensor_parallel_shards(model_)) tp_shards_.push_back(*t);
  TS_CHECK(!tp_shards_.empty() || pipeline, "engine: a tensor-parallel group of ",
           tp_group_->size(), " ranks was given but the model has no tensor-parallel layers");
}

double Engine::global_grad_norm(const std::vector<Tensor>& holders) {
  auto listed = [](const std::vector<Tensor>& list, const Tensor& h) {
    return std::any_of(list.begin(), list.end(), [&](const Tensor& s) { return s.same(h); });
  };
  std::vector<Tensor> experts;
  for (Tensor* slot : expert_slots_) experts.push_back(*slot);
  std::vector<Tensor> shards, replicated, expert_grads;  // (gradients)
  bool all_double = true;
  for (const Tensor& h : holders) {
    Tensor g = h.grad();
    if (!g.defined()) continue;
    all_double = all_double && g.dtype() == DType::Float64;
    if (listed(experts, h))
      expert_grads.push_back(std::move(g));
    else
      (tp_group_ && listed(tp_shards_, h) ? shards : replicated).push_back(std::move(g));
  }
  return parallel::global_grad_norm(
      {.tensor_parallel = optim::sum_of_squares(shards),
       .replicated = optim::sum_of_squares(replicated),
       .expert = optim::sum_of_squares(expert_grads)},
      {.tensor = tp_group_.get(), .pipe = pipe_group_.get(), .expert = expert_group_.get()},
      all_double);
}

}  // namespace tessera::engine
