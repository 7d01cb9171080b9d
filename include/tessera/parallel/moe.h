// DeepSpeed's MoE layer (deepspeed/moe/layer.py, sharded_moe.py's MOELayer) with expert
// parallelism: a top-1/top-2 gate (nn/moe_gating.h) sends each token to its experts' capacity
// buffers, the buffers go to the ranks holding those experts by one all-to-all, the experts
// run, a second all-to-all brings the results back, and each token's results are combined with
// its gate weights. With use_residual (PR-MoE) a dense MLP runs beside them and a learned
// 2-way softmax mixes the two.
//
//   auto groups = parallel::make_expert_parallel_groups(*world, /*ep_size=*/2);
//   parallel::MoE moe(this, "moe", 768, make_mlp, {.num_experts = 8, .gate = {.k = 2}}, groups);
//   auto [out, l_aux, counts] = moe.forward(h);     // add l_aux * coefficient to the loss
//
// Parameter names are DeepSpeed's: deepspeed_moe.gate.wg.weight,
// deepspeed_moe.experts.deepspeed_experts.<e>.<expert's names>, mlp.*, coefficient.*, where
// <e> is the expert's global index (a rank holds experts [r L, (r + 1) L), L = E / ep_size),
// so names are the same whatever ep_size. Every rank draws every expert's initial values in
// order and keeps its own: any layout starts where one process does.
//
// Gating groups: DeepSpeed gates each rank's tokens as one group (its capacity, its l_aux).
// `gating_groups` G splits a forward's tokens into G equal groups gated separately (GShard's
// groups), so one process with G = N gates exactly as N data-parallel ranks; l_aux is their
// mean. Outside training, a forward whose tokens do not split into G (generation) is gated as
// one group. Random numbers (Jitter, RSample, random token selection, second-expert sampling) are
// drawn as dropout draws them, each rank its rows of the global batch.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/nn/layers.h"
#include "tessera/nn/moe_gating.h"
#include "tessera/parallel/expert_parallel.h"

namespace tessera::parallel {

struct MoEOptions {
  int64_t num_experts = 1;
  nn::MoEGateOptions gate;
  bool use_residual = false;
  int64_t gating_groups = 1;
  // Errors name `section`'s keys.
  void validate(const std::string& section, int ep_size) const;
};

class MoE : public nn::Module {
 public:
  // Builds one expert (or the residual MLP) under `parent` with `name`.
  using ExpertFactory =
      std::function<std::unique_ptr<nn::UnaryModule>(nn::Module* parent, const std::string& name)>;
  MoE(nn::Module* parent, const std::string& name, int64_t hidden_size,
      const ExpertFactory& make_expert, MoEOptions options, ExpertParallelGroups groups = {});

  struct Output {
    Tensor output;                    // like hidden_states
    Tensor l_aux;                     // scalar float32 (mean over the gating groups)
    std::vector<int64_t> exp_counts;  // [num_experts]: routes before the capacity
    int64_t routes = 0, dropped_routes = 0;
  };
  Output forward(const Tensor& hidden_states);

  std::string type_name() const override { return "MoE"; }
  // The last forward's routing, for the monitors (parallel: this rank's tokens).
  struct Stats {
    double l_aux = 0.0;
    std::vector<int64_t> exp_counts;
    int64_t routes = 0, dropped_routes = 0;
  };
  const Stats& last_stats() const { return last_; }
  // This rank's expert parameters (reduced over expert_data_parallel, not the whole group).
  std::vector<Tensor*> expert_parameters();
  const ExpertParallelGroups& groups() const { return groups_; }
  const MoEOptions& options() const { return options_; }
  int64_t first_local_expert() const { return first_expert_; }

  nn::Module deepspeed_moe, gate;
  nn::Linear wg;  // deepspeed_moe.gate.wg
  nn::Module experts, deepspeed_experts;
  std::vector<std::unique_ptr<nn::UnaryModule>> local_experts;
  std::unique_ptr<nn::UnaryModule> mlp;     // use_residual
  std::unique_ptr<nn::Linear> coefficient;  // use_residual

 private:
  // flat: [tokens, M], gated in G groups
  std::vector<nn::MoERoutes> gate_groups(const Tensor& flat, int64_t G);
  // Widens the routes to one capacity; returns the filled slots, [ep_size][G][E].
  std::vector<int64_t> agree_buffers(std::vector<nn::MoERoutes>& routes);
  // [G, E, C, M] -> [G, E, C, M]
  Tensor run_experts(const Tensor& dispatched, const std::vector<int64_t>& fill);
  MoEOptions options_;
  ExpertParallelGroups groups_;
  Stats last_;
  int64_t hidden_size_, first_expert_ = 0;
};

// The MoE layers of a model with their dotted paths, in registration order.
std::vector<std::pair<std::string, MoE*>> moe_layers(nn::Module& model);

}  // namespace tessera::parallel
