// MoE expert parallelism in the engine: expert parameters differ between the ranks of an
// expert-parallel group, so they start from, and reduce their gradients over, the ranks that
// hold the same experts (parallel/moe.h), and their gradient norms meet over the expert group.
#include <algorithm>

#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/parallel/moe.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::engine {

void Engine::setup_experts() {
  for (parallel::MoE* layer : parallel::moe_layers(model_)) {
    const parallel::ExpertParallelGroups& g = layer->groups();
    if (g.ep_size() == 1) continue;  // every rank holds every expert: plain data parallelism
    TS_CHECK(g.expert_data_parallel, "engine: MoE layer '", layer->name(),
             "' has an expert-parallel group but no expert-data-parallel group "
             "(make both with parallel::make_expert_parallel_groups)");
    TS_CHECK(!expert_group_ || (expert_group_ == g.expert_parallel &&
                                expert_data_group_ == g.expert_data_parallel),
             "engine: MoE layer '", layer->name(),
             "' uses other expert-parallel groups than the model's first MoE layer");
    expert_group_ = g.expert_parallel;
    expert_data_group_ = g.expert_data_parallel;
    for (Tensor* t : layer->expert_parameters()) expert_slots_.push_back(t);
  }
  if (expert_slots_.empty()) return;
  TS_CHECK(expert_group_->size() * expert_data_group_->size() == group_->size(),
           "engine: moe.ep_size ", expert_group_->size(), " x ", expert_data_group_->size(),
           " expert replicas do not make the ", group_->size(), " data-parallel ranks");
  const auto stage = parallel::zero_config(config_).stage;
  TS_CHECK(stage == 0, "engine: zero_optimization.stage ", stage,
           " with MoE expert parallelism (moe.ep_size ", expert_group_->size(),
           " > 1) is not built yet; use stage 0, or ep_size 1");
  TS_CHECK(!tp_group_, "engine: MoE expert parallelism (moe.ep_size ", expert_group_->size(),
           ") with tensor parallelism is not built yet");
  TS_CHECK(!pipe_group_, "engine: MoE expert parallelism (moe.ep_size ", expert_group_->size(),
           ") in a pipeline is not built yet");
}

bool Engine::is_expert(const Tensor* slot) const {
  return std::find(expert_slots_.begin(), expert_slots_.end(), slot) != expert_slots_.end();
}

void Engine::broadcast_initial_parameters() {
  // Every rank starts from rank 0's float32 parameters (as DDP does), before any master copy
  // or 16-bit cast is made from them; this start-up traffic is not counted.
  NoGradGuard no_grad;
  for (auto& [n, t] : model_.named_parameters()) {
    Tensor c = t->contiguous();
    (is_expert(t) ? *expert_data_group_ : *group_).broadcast(c, 0);
    if (!c.same(*t)) t->copy_(c);
  }
  group_->logger().reset();
  if (expert_data_group_) expert_data_group_->logger().reset();
}

}  // namespace tessera::engine
