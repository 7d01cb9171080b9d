#include "tessera/nn/moe_gating.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <numeric>

#include "tessera/ops.h"

namespace tessera::nn {

NoisyGatePolicy noisy_gate_policy_from_name(const std::string& name, const std::string& key) {
  if (name == "None") return NoisyGatePolicy::None;
  if (name == "Jitter") return NoisyGatePolicy::Jitter;
  if (name == "RSample") return NoisyGatePolicy::RSample;
  fail(key, ": '", name, "' is not a noisy gate policy (None, Jitter or RSample)");
}

const char* noisy_gate_policy_name(NoisyGatePolicy p) {
  switch (p) {
    case NoisyGatePolicy::Jitter:
      return "Jitter";
    case NoisyGatePolicy::RSample:
      return "RSample";
    default:
      return "None";
  }
}

void MoEGateOptions::validate(const std::string& section) const {
  TS_CHECK(k == 1 || k == 2, section, ".k: ", k,
           " is not 1 or 2 (DeepSpeed's MoE gates top-1 or top-2)");
  TS_CHECK(capacity_factor > 0 && std::isfinite(capacity_factor), section,
           ".capacity_factor: ", capacity_factor, " must be a positive number");
  TS_CHECK(eval_capacity_factor > 0 && std::isfinite(eval_capacity_factor), section,
           ".eval_capacity_factor: ", eval_capacity_factor, " must be a positive number");
  TS_CHECK(min_capacity >= 0, section, ".min_capacity: ", min_capacity, " must be >= 0");
}

int64_t moe_capacity(int64_t tokens, int64_t experts, double factor, int64_t min_capacity) {
  // As torch computes it: the Python quotient times a float32 factor, in float32.
  const float per_expert =
      static_cast<float>(static_cast<double>(tokens) / static_cast<double>(experts));
  const float c = std::ceil(per_expert * static_cast<float>(factor));
  return std::max(static_cast<int64_t>(c), min_capacity);
}

int64_t MoERoutes::dropped_routes() const {
  int64_t n = 0;
  for (const auto& route : slots) n += std::count(route.begin(), route.end(), int64_t{-1});
  return n;
}

Tensor MoERoutes::combine_weights() const {
  Tensor out = zeros({num_tokens, num_experts, capacity});
  float* p = out.data<float>();
  for (size_t j = 0; j < slots.size(); ++j) {
    const std::vector<double> g = gates[j].to_vector();
    for (int64_t s = 0; s < num_tokens; ++s) {
      const int64_t slot = slots[j][static_cast<size_t>(s)];
      if (slot >= 0)
        p[s * num_experts * capacity + slot] += static_cast<float>(g[static_cast<size_t>(s)]);
    }
  }
  return out;
}

namespace {

// Host copy of a [S, E] float tensor as float32 values.
std::vector<float> host_values(const Tensor& t) {
  const Tensor h = t.detach().to(Device::cpu()).to(DType::Float32).contiguous();
  const float* p = h.data<float>();
  return std::vector<float>(p, p + h.numel());
}

void check_noise(const Tensor& noise, int64_t S, int64_t E, const char* what) {
  TS_CHECK(noise.defined() && noise.shape() == Shape({S, E}), "MoE gating: ", what,
           " noise must be [", S, ", ", E, "], got ", noise.defined() ? noise.describe() : "none");
}

// torch.argmax's rule: the first largest value of each row.
std::vector<int64_t> row_argmax(const std::vector<float>& v, int64_t S, int64_t E) {
  std::vector<int64_t> out(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const float* row = v.data() + s * E;
    out[static_cast<size_t>(s)] = std::max_element(row, row + E) - row;
  }
  return out;
}

// A float32 [S, E] tensor with 1 at (s, expert[s]) where expert[s] >= 0.
Tensor one_hot(const std::vector<int64_t>& expert, int64_t E) {
  const auto S = static_cast<int64_t>(expert.size());
  Tensor m = zeros({S, E});
  float* p = m.data<float>();
  for (int64_t s = 0; s < S; ++s)
    if (expert[static_cast<size_t>(s)] >= 0) p[s * E + expert[static_cast<size_t>(s)]] = 1.0f;
  return m;
}

// Each expert's share of the tokens' first choices, as torch.mean(mask1.float(), 0).
Tensor first_choice_fractions(const std::vector<int64_t>& expert, int64_t E) {
  std::vector<double> frac(static_cast<size_t>(E), 0.0);
  for (int64_t e : expert) frac[static_cast<size_t>(e)] += 1.0;
  for (double& f : frac)
    f = static_cast<double>(static_cast<float>(f) / static_cast<float>(expert.size()));
  return from_vector(frac, {E});
}

std::vector<int64_t> counts_of(const std::vector<int64_t>& expert, int64_t E) {
  std::vector<int64_t> c(static_cast<size_t>(E), 0);
  for (int64_t e : expert)
    if (e >= 0) ++c[static_cast<size_t>(e)];
  return c;
}

// The combine weight of each token's kept route: gates[s, kept[s]] (0 where dropped).
Tensor route_gate(const Tensor& gates, const std::vector<int64_t>& kept, int64_t E) {
  return sum(gates * one_hot(kept, E).to(gates.device()), {1});
}

// Top-1's capacity rule: of each expert's tokens, those with the `keep` largest selection
// values (random token selection) or, without it, the first `keep` in order. torch.topk breaks
// DeepSpeed's ties (use_rts false) in an order of its own; Tessera keeps the earliest tokens.
std::vector<int64_t> top1_kept(const std::vector<int64_t>& expert, int64_t E, int64_t keep,
                               const std::vector<float>* rts) {
  std::vector<int64_t> kept = expert;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> tokens;
    for (size_t s = 0; s < expert.size(); ++s)
      if (expert[s] == e) tokens.push_back(static_cast<int64_t>(s));
    if (static_cast<int64_t>(tokens.size()) <= keep) continue;
    if (rts)
      std::stable_sort(tokens.begin(), tokens.end(), [&](int64_t a, int64_t b) {
        return (*rts)[static_cast<size_t>(a * E + e)] > (*rts)[static_cast<size_t>(b * E + e)];
      });
    for (size_t i = static_cast<size_t>(keep); i < tokens.size(); ++i)
      kept[static_cast<size_t>(tokens[i])] = -1;
  }
  return kept;
}

// Each token's place in its expert's buffer: an expert's tokens take 0, 1, ... in token
// order, after `start[e]` places (top-2's second choices follow every first choice).
std::vector<int64_t> locations_of(const std::vector<int64_t>& expert, std::vector<int64_t> start) {
  std::vector<int64_t> loc(expert.size(), -1);
  for (size_t s = 0; s < expert.size(); ++s)
    if (expert[s] >= 0) loc[s] = start[static_cast<size_t>(expert[s])]++;
  return loc;
}

// expert * capacity + location where the route is kept (location < capacity), else -1.
std::vector<int64_t> slots_of(const std::vector<int64_t>& expert, const std::vector<int64_t>& loc,
                              int64_t capacity) {
  std::vector<int64_t> slots(expert.size(), -1);
  for (size_t s = 0; s < expert.size(); ++s)
    if (expert[s] >= 0 && loc[s] < capacity) slots[s] = expert[s] * capacity + loc[s];
  return slots;
}

// The experts of the kept routes (-1 where dropped).
std::vector<int64_t> kept_experts(const std::vector<int64_t>& slots, int64_t capacity) {
  std::vector<int64_t> e(slots.size(), -1);
  for (size_t s = 0; s < slots.size(); ++s)
    if (slots[s] >= 0) e[s] = slots[s] / capacity;
  return e;
}

std::vector<int64_t> no_places(int64_t E) {
  return std::vector<int64_t>(static_cast<size_t>(E), 0);
}

MoERoutes begin_routes(const Tensor& logits, const char* what) {
  TS_CHECK(logits.dim() == 2 && logits.shape()[0] > 0 && logits.shape()[1] > 0, what,
           ": logits must be [tokens, experts], got ", logits.describe());
  MoERoutes r;
  r.num_tokens = logits.shape()[0];
  r.num_experts = logits.shape()[1];
  return r;
}

}  // namespace

MoERoutes top1_gating(const Tensor& logits_in, const MoEGateOptions& o, bool training,
                      const GatingNoise& noise, const CapacityAgreement& agree) {
  MoERoutes r = begin_routes(logits_in, "top1_gating");
  const int64_t S = r.num_tokens, E = r.num_experts;
  const Tensor logits = logits_in.to(DType::Float32);
  const Tensor gates = softmax(logits, 1);
  r.capacity =
      moe_capacity(S, E, training ? o.capacity_factor : o.eval_capacity_factor, o.min_capacity);
  std::vector<float> choice = host_values(gates);
  if (training && o.noisy_gate_policy == NoisyGatePolicy::RSample) {
    check_noise(noise.gumbel, S, E, "RSample's Gumbel");
    choice = host_values(logits);
    const std::vector<float> g = host_values(noise.gumbel);
    for (size_t i = 0; i < choice.size(); ++i) choice[i] += g[i];
  }
  const std::vector<int64_t> expert = row_argmax(choice, S, E);
  r.exp_counts = counts_of(expert, E);
  if (!o.drop_tokens) {
    int64_t load = *std::max_element(r.exp_counts.begin(), r.exp_counts.end());
    if (agree) load = agree(load);
    r.capacity = std::min(load, S);
  }
  r.l_aux = sum(mean(gates, {0}) * first_choice_fractions(expert, E).to(gates.device())) *
            static_cast<double>(E);
  // DeepSpeed's assertion, in training (generation gates a few tokens at a time; the
  // selection below never asks for more tokens than there are).
  TS_CHECK(!training || S >= o.min_capacity, "top1_gating: ", S,
           " tokens are fewer than min_capacity ", o.min_capacity,
           " (set min_capacity to 0 or use a larger batch)");
  std::vector<float> rts;
  if (o.use_rts) {
    check_noise(noise.rts_uniform, S, E, "random token selection's uniform");
    rts = host_values(noise.rts_uniform);
  }
  const std::vector<int64_t> kept =
      top1_kept(expert, E, std::min(r.capacity, S), o.use_rts ? &rts : nullptr);
  // Locations count the kept tokens only (DeepSpeed's cumsum after the capacity mask).
  r.slots = {slots_of(kept, locations_of(kept, no_places(E)), r.capacity)};
  r.gates = {route_gate(gates, kept, E)};
  return r;
}

MoERoutes top2_gating(const Tensor& logits_in, const MoEGateOptions& o, bool training,
                      const GatingNoise& noise, const CapacityAgreement& agree) {
  MoERoutes r = begin_routes(logits_in, "top2_gating");
  const int64_t S = r.num_tokens, E = r.num_experts;
  TS_CHECK(E >= 2, "top2_gating: 2 experts per token need at least 2 experts, got ", E);
  const Tensor logits = logits_in.to(DType::Float32);
  const Tensor gates = softmax(logits, 1);
  const std::vector<int64_t> first = row_argmax(host_values(gates), S, E);
  std::vector<float> second_choice = host_values(logits);
  if (o.top2_2nd_expert_sampling) {
    check_noise(noise.gumbel, S, E, "second-expert sampling's Gumbel");
    const std::vector<float> g = host_values(noise.gumbel);
    for (size_t i = 0; i < second_choice.size(); ++i) second_choice[i] += g[i];
  }
  for (int64_t s = 0; s < S; ++s)
    second_choice[static_cast<size_t>(s * E + first[static_cast<size_t>(s)])] =
        -std::numeric_limits<float>::infinity();
  const std::vector<int64_t> second = row_argmax(second_choice, S, E);
  const std::vector<int64_t> count1 = counts_of(first, E), count2 = counts_of(second, E);
  r.l_aux = mean(mean(gates, {0}) * first_choice_fractions(first, E).to(gates.device())) *
            static_cast<double>(E * E);
  r.exp_counts.resize(static_cast<size_t>(E));
  for (size_t e = 0; e < r.exp_counts.size(); ++e) r.exp_counts[e] = count1[e] + count2[e];
  if (o.drop_tokens) {
    r.capacity = moe_capacity(S, E, 2.0 * (training ? o.capacity_factor : o.eval_capacity_factor),
                              o.min_capacity);
  } else {
    const int64_t load = *std::max_element(r.exp_counts.begin(), r.exp_counts.end());
    r.capacity = agree ? agree(load) : load;
  }
  // Locations before the capacity (DeepSpeed's cumsums of the undropped masks): a dropped
  // first choice still holds its place, and second choices follow every first one.
  r.slots = {slots_of(first, locations_of(first, no_places(E)), r.capacity),
             slots_of(second, locations_of(second, count1), r.capacity)};
  const std::vector<int64_t> kept1 = kept_experts(r.slots[0], r.capacity),
                             kept2 = kept_experts(r.slots[1], r.capacity);
  Tensor g1 = route_gate(gates, kept1, E), g2 = route_gate(gates, kept2, E);
  const Tensor denom = g1 + g2;
  const double eps = FLT_EPSILON;
  const Tensor safe = where(lt(denom, full({}, eps)), full({}, eps), denom);
  r.gates = {g1 / safe, g2 / safe};
  return r;
}

}  // namespace tessera::nn
