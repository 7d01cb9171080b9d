// DeepSpeed's MoE gating (deepspeed/moe/sharded_moe.py: top1gating, top2gating) rule for rule:
// which expert each token goes to, where in the expert's capacity buffer, with what combine
// weight, which tokens an over-full expert drops, and the load-balancing loss l_aux.
//
//   MoERoutes r = top1_gating(logits, options, noise);   // logits [S, E], float32
//   // token s's route j: slot r.slots[j][s] = expert * capacity + location (-1: dropped),
//   // weight r.gates[j][s]; the layer gathers, runs the experts and combines with them.
//
// The routes replace DeepSpeed's dense [S, E, C] combine tensor (combine_weights() rebuilds it
// for tests), as DeepSpeed's own sparse_routes dispatch does. Random numbers come in as
// GatingNoise (the layer draws them; tests pass the ones DeepSpeed drew).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::nn {

enum class NoisyGatePolicy { None, Jitter, RSample };
// "None", "Jitter", "RSample" (DeepSpeed's spellings); anything else is an error naming `key`.
NoisyGatePolicy noisy_gate_policy_from_name(const std::string& name, const std::string& key);
const char* noisy_gate_policy_name(NoisyGatePolicy p);

// TopKGate's arguments (DeepSpeed's MoE defaults).
struct MoEGateOptions {
  int64_t k = 1;  // 1 or 2
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int64_t min_capacity = 4;
  NoisyGatePolicy noisy_gate_policy = NoisyGatePolicy::None;  // training forwards only
  bool drop_tokens = true;               // false: the capacity grows to the largest load
  bool use_rts = true;                   // top-1: random token selection among an expert's
  bool top2_2nd_expert_sampling = true;  // top-2: Gumbel noise on the second choice
  // Errors name `section`'s keys (k not 1 or 2, factors <= 0, min_capacity < 0).
  void validate(const std::string& section) const;
};

// The random numbers one gating call uses, float32 on the CPU; each undefined when unused.
struct GatingNoise {
  Tensor gumbel;       // [S, E]: top-1 RSample's noisy choice; top-2's second choice
  Tensor rts_uniform;  // [S, E]: top-1 random token selection, in [0, 1)
};

struct MoERoutes {
  int64_t num_tokens = 0, num_experts = 0, capacity = 0;
  Tensor l_aux;                             // scalar, float32, differentiable through the logits
  std::vector<int64_t> exp_counts;          // [E]: routes to each expert before the capacity
  std::vector<std::vector<int64_t>> slots;  // [k][S]: expert * capacity + location, or -1
  std::vector<Tensor> gates;                // k x [S] float32 combine weights (0 if dropped)

  int64_t dropped_routes() const;
  // DeepSpeed's combine_weights [S, E, C] (float32, no gradient).
  Tensor combine_weights() const;
};

// With drop_tokens false, maps this group's largest expert load to the capacity all ranks
// use (the layer: the maximum over the expert-parallel group); empty: the load itself.
using CapacityAgreement = std::function<int64_t(int64_t)>;

// logits [S, E] (any float dtype; computed in float32 as DeepSpeed does). `training` selects
// capacity_factor and the noisy gate policy (eval: eval_capacity_factor, no noise).
MoERoutes top1_gating(const Tensor& logits, const MoEGateOptions& options, bool training,
                      const GatingNoise& noise, const CapacityAgreement& agree = {});
MoERoutes top2_gating(const Tensor& logits, const MoEGateOptions& options, bool training,
                      const GatingNoise& noise, const CapacityAgreement& agree = {});

// DeepSpeed's _capacity: ceil(S / E * factor) in float32, at least min_capacity.
int64_t moe_capacity(int64_t tokens, int64_t experts, double factor, int64_t min_capacity);

}  // namespace tessera::nn
