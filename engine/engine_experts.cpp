// MoE expert parallelism in the engine: expert parameters differ between the ranks of an
// expert-parallel group, so they start from, and reduce their gradients over, the ranks that
// hold the same experts (parallel/moe.h), and their gradient norms meet over the expert group.
#include <algorithm>
#include <set>

#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"
#include "tessera/parallel/moe.h"
#include "tessera/parallel/zero_checkpoint.h"
#include "tessera/parallel/zero_config.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::engine {

void Engine::setup_experts() {
  for (auto& [path, layer] : parallel::moe_layers(model_)) {
    moe_stats_.push_back({path, layer, {}});
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
  for (parallel::ProcessGroup* g : {expert_group_.get(), expert_data_group_.get()})
    g->logger().enable(
        config_.comms_logger.enabled, config_.comms_logger.verbose,
        config_.comms_logger.prof_all ? std::vector<std::string>{} : config_.comms_logger.prof_ops);
  TS_CHECK(expert_group_->size() * expert_data_group_->size() == group_->size(),
           "engine: moe.ep_size ", expert_group_->size(), " x ", expert_data_group_->size(),
           " expert replicas do not make the ", group_->size(), " data-parallel ranks");
  const auto stage = parallel::zero_config(config_).stage;
  TS_CHECK(stage < 3, "engine: zero_optimization.stage ", stage,
           " with MoE expert parallelism (moe.ep_size ", expert_group_->size(),
           " > 1) is not built yet; use stage 1 or 2, or ep_size 1");
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

namespace {

// The parameter an optimizer-state key ("<parameter>.<slot>") belongs to.
std::string parameter_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(0, dot);
}

}  // namespace

void Engine::write_expert_files(const std::filesystem::path& dir,
                                std::map<std::string, Tensor>& weights,
                                std::map<std::string, Tensor>& optimizer) {
  std::set<std::string> names;
  for (auto& [name, t] : model_.named_parameters())
    if (is_expert(t)) names.insert(name);
  std::map<std::string, Tensor> mine, mine_opt;
  for (auto it = weights.begin(); it != weights.end();)
    if (names.count(it->first)) {
      mine.insert(*it);
      it = weights.erase(it);
    } else {
      ++it;
    }
  for (auto it = optimizer.begin(); it != optimizer.end();)
    if (names.count(parameter_of(it->first))) {
      mine_opt.insert(*it);
      it = optimizer.erase(it);
    } else {
      ++it;
    }
  // (With tensor parallelism every tensor-parallel rank holds the same whole experts.)
  if (expert_data_group_->rank() != 0 || (tp_group_ && tp_group_->rank() != 0)) return;
  const int ep_rank = expert_group_->rank();
  io::save_safetensors((dir / moe_experts_file(ep_rank, false)).string(), mine);
  io::save_safetensors((dir / moe_experts_file(ep_rank, true)).string(), mine_opt);
}

void Engine::write_zero_expert_files(const std::filesystem::path& dir,
                                     std::map<std::string, Tensor>& shard) {
  std::map<std::string, Tensor> weights, opt;
  parallel::gather_whole_state(*zero_->expert_data_group(), *zero_->expert_layout(), shard, weights,
                               opt);
  std::erase_if(shard, [&](const auto& e) {
    return weights.count(e.first) || weights.count(parameter_of(e.first));
  });
  write_expert_files(dir, weights, opt);
}

void Engine::keep_own_experts(std::map<std::string, Tensor>& weights,
                              std::map<std::string, Tensor>& optimizer) {
  std::set<std::string> own;
  for (auto& [name, t] : model_.named_parameters()) own.insert(name);
  const auto foreign = [&](const std::string& parameter) {
    return !own.count(parameter) && parameter.find(".deepspeed_experts.") != std::string::npos;
  };
  std::erase_if(weights, [&](const auto& e) { return foreign(e.first); });
  std::erase_if(optimizer, [&](const auto& e) { return foreign(parameter_of(e.first)); });
}

void Engine::note_moe_forward() {
  for (MoEStats& m : moe_stats_) {
    const parallel::MoE::Stats& s = m.layer->last_stats();
    if (s.exp_counts.empty()) continue;  // (a layer progressive layer drop skipped)
    m.sum.l_aux += s.l_aux;
    m.sum.routes += s.routes;
    m.sum.dropped_routes += s.dropped_routes;
    m.sum.exp_counts.resize(s.exp_counts.size(), 0);
    for (size_t e = 0; e < s.exp_counts.size(); ++e) m.sum.exp_counts[e] += s.exp_counts[e];
    ++m.forwards;
  }
}

void Engine::add_moe_events(std::vector<MonitorEvent>& events) {
  if (moe_stats_.empty()) return;
  // Sums over the step's micro-batches and the ranks in one all-reduce: per layer its
  // forwards, l_aux, routes, dropped routes and each expert's routes.
  std::vector<double> sums;
  for (MoEStats& m : moe_stats_) {
    m.sum.exp_counts.resize(static_cast<size_t>(m.layer->options().num_experts), 0);
    sums.insert(sums.end(),
                {static_cast<double>(m.forwards), m.sum.l_aux, static_cast<double>(m.sum.routes),
                 static_cast<double>(m.sum.dropped_routes)});
    for (int64_t c : m.sum.exp_counts) sums.push_back(static_cast<double>(c));
  }
  Tensor all = from_vector(sums, {static_cast<int64_t>(sums.size())}, DType::Float64);
  group_->all_reduce(all);
  const std::vector<double> total = all.to_vector();
  double aux = 0.0;
  size_t i = 0;
  for (MoEStats& m : moe_stats_) {
    const double forwards = total[i], l_aux = total[i + 1], routes = total[i + 2],
                 dropped = total[i + 3];
    i += 4;
    const std::string prefix = "Train/Samples/moe/" + m.path + "/";
    if (forwards > 0) aux += l_aux / forwards;
    events.push_back(
        {prefix + "dropped_fraction", routes > 0 ? dropped / routes : 0.0, global_samples()});
    for (size_t e = 0; e < m.sum.exp_counts.size(); ++e, ++i)
      events.push_back({prefix + "expert_" + std::to_string(e) + "_load",
                        routes > 0 ? total[i] / routes : 0.0, global_samples()});
    m.sum = {};
    m.forwards = 0;
  }
  last_moe_aux_loss_ = aux;
  events.push_back({"Train/Samples/moe_aux_loss", aux, global_samples()});
}

}  // namespace tessera::engine
