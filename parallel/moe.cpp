#include "tessera/parallel/moe.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "tessera/nn/module_scope.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

namespace tessera::parallel {

void MoEOptions::validate(const std::string& section, int ep_size) const {
  TS_CHECK(num_experts >= 1, section, ".num_experts: ", num_experts, " must be >= 1");
  TS_CHECK(ep_size >= 1 && num_experts % ep_size == 0, section, ".num_experts: ", num_experts,
           " experts do not divide among ep_size ", ep_size, " ranks");
  TS_CHECK(gating_groups >= 1, section, ".gating_groups: ", gating_groups, " must be >= 1");
  gate.validate(section);
  TS_CHECK(gate.k <= num_experts, section, ".k: ", gate.k, " experts per token but only ",
           num_experts, " experts");
}

namespace {

// rows x cols numbers in [lo, hi), this rank's rows of the global batch, drawn from `gen` as
// dropout draws its masks (rng.h: DataParallelShard).
Tensor sharded_uniform(Generator& gen, int64_t rows, int64_t cols, double lo, double hi) {
  const DataParallelShard shard = data_parallel_shard();
  const auto n = static_cast<uint64_t>(rows * cols);
  GeneratorState s = gen.reserve(n * static_cast<uint64_t>(shard.world));
  s.offset += static_cast<uint64_t>(shard.rank) * n;
  Tensor t = Tensor::empty({rows, cols});
  float* p = t.data<float>();
  for (uint64_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(lo + (hi - lo) * philox_uniform(s.seed, s.offset + i));
  return t;
}

// Standard Gumbel numbers (torch's Gumbel(0, 1): -log(-log(u)), u kept inside (0, 1)).
Tensor sharded_gumbel(Generator& gen, int64_t rows, int64_t cols) {
  Tensor t = sharded_uniform(gen, rows, cols, 0.0, 1.0);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float u = std::clamp(p[i], FLT_EPSILON, 1.0f - FLT_EPSILON);
    p[i] = -std::log(-std::log(u));
  }
  return t;
}

// Re-slots routes to a larger common capacity (locations are unchanged).
void widen(nn::MoERoutes& r, int64_t capacity) {
  TS_CHECK(capacity >= r.capacity, "MoE: capacity ", capacity, " below ", r.capacity);
  for (auto& route : r.slots)
    for (int64_t& slot : route)
      if (slot >= 0) slot = slot / r.capacity * capacity + slot % r.capacity;
  r.capacity = capacity;
}

}  // namespace

MoE::MoE(nn::Module* parent, const std::string& name, int64_t hidden_size,
         const ExpertFactory& make_expert, MoEOptions options, ExpertParallelGroups groups)
    : Module(parent, name),
      deepspeed_moe(this, "deepspeed_moe"),
      gate(&deepspeed_moe, "gate"),
      wg(&gate, "wg", hidden_size, options.num_experts, nn::LinearOptions().with_bias(false)),
      experts(&deepspeed_moe, "experts"),
      deepspeed_experts(&experts, "deepspeed_experts"),
      options_(std::move(options)),
      groups_(std::move(groups)),
      hidden_size_(hidden_size) {
  const int ep = groups_.ep_size();
  options_.validate("moe", ep);
  const int64_t local = options_.num_experts / ep;
  first_expert_ = groups_.ep_rank() * local;
  // Every expert's initial draws, in order, on every rank: a rank keeps its own.
  for (int64_t e = 0; e < options_.num_experts; ++e) {
    if (e >= first_expert_ && e < first_expert_ + local) {
      local_experts.push_back(make_expert(&deepspeed_experts, std::to_string(e)));
      TS_CHECK(local_experts.back(), "MoE '", name, "': the expert factory returned nothing");
    } else {
      nn::Module scratch;
      make_expert(&scratch, "expert");
    }
  }
  if (options_.use_residual) {
    mlp = make_expert(this, "mlp");
    coefficient = std::make_unique<nn::Linear>(this, "coefficient", hidden_size, 2);
  }
}

std::vector<Tensor*> MoE::expert_parameters() {
  std::vector<Tensor*> out;
  for (auto& e : local_experts)
    for (auto& [n, t] : e->named_parameters()) out.push_back(t);
  return out;
}

Tensor MoE::run_experts(const Tensor& dispatched, const std::vector<int64_t>& fill) {
  const Shape& s = dispatched.shape();
  const int64_t G = s[0], E = s[1], C = s[2], M = s[3];
  const int64_t P = groups_.ep_size(), L = E / P;
  const Device dev = dispatched.device();
  // [P, G, L, C, M]: chunk p holds what goes to the experts of expert-parallel rank p.
  Tensor x = dispatched.view({G, P, L, C, M}).permute({1, 0, 2, 3, 4}).contiguous();
  if (P > 1) x = all_to_all_first_dim(x, *groups_.expert_parallel);  // chunk p: from rank p
  // Each expert runs on the filled slots only (a buffer fills from slot 0; rank p's group g
  // sent fill[(p G + g) E + e] tokens to expert e), so its work and its counted FLOPs are
  // those of the tokens routed to it, not of the capacity padding. An expert without tokens
  // runs on no rows: its gradients are zeros, as the padding would have given.
  // One gather of every expert's rows, split per expert (a split's backward is one cat).
  std::vector<int64_t> take, sizes;
  std::vector<int64_t> back(static_cast<size_t>(P * G * L * C), -1);
  for (int64_t l = 0; l < L; ++l) {
    const size_t before = take.size();
    for (int64_t pg = 0; pg < P * G; ++pg) {
      const int64_t n = fill[static_cast<size_t>(pg * E + first_expert_ + l)];
      for (int64_t c = 0; c < n; ++c) {
        const int64_t row = (pg * L + l) * C + c;
        back[static_cast<size_t>(row)] = static_cast<int64_t>(take.size());
        take.push_back(row);
      }
    }
    sizes.push_back(static_cast<int64_t>(take.size() - before));
  }
  const auto done = static_cast<int64_t>(take.size());
  const Tensor routed = embedding(x.reshape({P * G * L * C, M}), from_vector(take, {done}).to(dev));
  const std::vector<Tensor> ins = split(routed, sizes, 0);
  std::vector<Tensor> outs;
  for (int64_t l = 0; l < L; ++l)
    outs.push_back((*local_experts[static_cast<size_t>(l)])(ins[static_cast<size_t>(l)]));
  for (int64_t& b : back)
    if (b < 0) b = done;  // an empty slot: the zero row
  outs.push_back(zeros({1, M}, outs.front().dtype(), dev));
  Tensor y =
      embedding(cat(outs, 0), from_vector(back, {P * G * L * C}).to(dev)).view({P, G, L, C, M});
  if (P > 1) y = all_to_all_first_dim(y, *groups_.expert_parallel);  // chunk p: rank p's experts
  return y.permute({1, 0, 2, 3, 4}).reshape({G, E, C, M});
}

// The gate over the G groups of the tokens: each group's routes.
std::vector<nn::MoERoutes> MoE::gate_groups(const Tensor& flat, int64_t G) {
  const int64_t M = hidden_size_, E = options_.num_experts;
  const int64_t total = flat.shape()[0], S = total / G;
  const nn::MoEGateOptions& go = options_.gate;
  const bool training = is_training();
  const Device dev = flat.device();
  // Training draws from the default generator (checkpointed); evaluation, which DeepSpeed
  // also randomises (random token selection, second-expert sampling), from a generator of its
  // own made afresh, so evaluating changes neither training nor a resumed run.
  Generator eval_generator(0x6d6f65);
  Generator& gen = training ? default_generator() : eval_generator;
  // TopKGate.forward: float32 input (jittered in training), float32 logits.
  Tensor input = flat.to(DType::Float32);
  if (training && go.noisy_gate_policy == nn::NoisyGatePolicy::Jitter)
    input = input * sharded_uniform(gen, total, M, 1.0 - 1e-2, 1.0 + 1e-2).to(dev);
  const Tensor logits = linear(input, wg.weight.to(DType::Float32));
  nn::GatingNoise noise;
  if (go.k == 1 && training && go.noisy_gate_policy == nn::NoisyGatePolicy::RSample)
    noise.gumbel = sharded_gumbel(gen, total, E);
  if (go.k == 1 && go.use_rts) noise.rts_uniform = sharded_uniform(gen, total, E, 0.0, 1.0);
  if (go.k == 2 && go.top2_2nd_expert_sampling) noise.gumbel = sharded_gumbel(gen, total, E);

  std::vector<nn::MoERoutes> routes;
  for (int64_t g = 0; g < G; ++g) {
    const auto rows = [&](const Tensor& t) { return t.defined() ? t.narrow(0, g * S, S) : t; };
    const nn::GatingNoise part{rows(noise.gumbel), rows(noise.rts_uniform)};
    routes.push_back(go.k == 1 ? nn::top1_gating(logits.narrow(0, g * S, S), go, training, part)
                               : nn::top2_gating(logits.narrow(0, g * S, S), go, training, part));
  }
  return routes;
}

// One buffer size for every group and every expert-parallel rank (DeepSpeed agrees on the
// largest load without drop_tokens; ranks with fewer tokens need it as well), and the filled
// slots the experts' ranks run on, [P][G][E]: one all-gather of [capacity, fill[G][E]].
std::vector<int64_t> MoE::agree_buffers(std::vector<nn::MoERoutes>& routes) {
  const int64_t E = options_.num_experts, G = static_cast<int64_t>(routes.size());
  std::vector<int64_t> mine(static_cast<size_t>(1 + G * E), 0);
  int64_t capacity = 0;
  for (int64_t g = 0; g < G; ++g) {
    capacity = std::max(capacity, routes[static_cast<size_t>(g)].capacity);
    const nn::MoERoutes& r = routes[static_cast<size_t>(g)];
    for (const auto& route : r.slots)
      for (int64_t slot : route)
        if (slot >= 0) ++mine[static_cast<size_t>(1 + g * E + slot / r.capacity)];
  }
  mine[0] = capacity;
  const int64_t P = groups_.ep_size();
  std::vector<int64_t> all = mine;
  if (P > 1) {
    Tensor gathered = Tensor::empty({P * (1 + G * E)}, DType::Int64);
    groups_.expert_parallel->all_gather(gathered, from_vector(mine, {1 + G * E}));
    all.assign(gathered.data<int64_t>(), gathered.data<int64_t>() + gathered.numel());
  }
  std::vector<int64_t> fill;
  for (int64_t p = 0; p < P; ++p) {
    const auto at = all.begin() + p * (1 + G * E);
    capacity = std::max(capacity, *at);
    fill.insert(fill.end(), at + 1, at + 1 + G * E);
  }
  for (auto& r : routes) widen(r, capacity);
  return fill;
}

MoE::Output MoE::forward(const Tensor& hidden_states) {
  nn::ModuleScope scope(*this);
  const int64_t M = hidden_size_, E = options_.num_experts;
  TS_CHECK(hidden_states.dim() >= 1 && hidden_states.shape().back() == M, "MoE '", name(),
           "': expected input [..., ", M, "], got ", hidden_states.describe());
  const Tensor flat = hidden_states.reshape({-1, M});
  const int64_t total = flat.shape()[0];
  // Outside training a forward whose tokens do not split (generation: a token or a few at a
  // time) gates them as one group, as one rank would.
  const int64_t G =
      !is_training() && total % options_.gating_groups != 0 ? 1 : options_.gating_groups;
  TS_CHECK(total > 0 && total % G == 0, "MoE '", name(), "': ", total,
           " tokens do not split into gating_groups ", G);
  const int64_t S = total / G;
  const nn::MoEGateOptions& go = options_.gate;
  const Device dev = hidden_states.device();
  std::vector<nn::MoERoutes> routes = gate_groups(flat, G);
  const std::vector<int64_t> fill = agree_buffers(routes);
  const int64_t capacity = routes.front().capacity;

  // Dispatch: slot g*E*C + e*C + c reads token row g*S + s (an empty slot reads a zero row).
  const int64_t slots = G * E * capacity;
  std::vector<int64_t> source(static_cast<size_t>(slots), total);
  std::vector<std::vector<int64_t>> back(static_cast<size_t>(go.k),
                                         std::vector<int64_t>(static_cast<size_t>(total), slots));
  Output out;
  out.exp_counts.assign(static_cast<size_t>(E), 0);
  std::vector<std::vector<Tensor>> gates(static_cast<size_t>(go.k));
  Tensor l_aux;
  for (int64_t g = 0; g < G; ++g) {
    const nn::MoERoutes& r = routes[static_cast<size_t>(g)];
    for (size_t j = 0; j < r.slots.size(); ++j) {
      for (int64_t s = 0; s < S; ++s) {
        const int64_t slot = r.slots[j][static_cast<size_t>(s)];
        if (slot < 0) continue;
        source[static_cast<size_t>(g * E * capacity + slot)] = g * S + s;
        back[j][static_cast<size_t>(g * S + s)] = g * E * capacity + slot;
      }
      gates[j].push_back(r.gates[j]);
    }
    for (int64_t e = 0; e < E; ++e)
      out.exp_counts[static_cast<size_t>(e)] += r.exp_counts[static_cast<size_t>(e)];
    out.dropped_routes += r.dropped_routes();
    l_aux = l_aux.defined() ? l_aux + r.l_aux : r.l_aux;
  }
  out.routes = total * go.k;
  out.l_aux = G == 1 ? l_aux : l_aux / static_cast<double>(G);

  const Tensor zero_row = zeros({1, M}, flat.dtype(), dev);
  const Tensor dispatched =
      embedding(cat({flat, zero_row}, 0), from_vector(source, {slots}).to(dev))
          .view({G, E, capacity, M});
  const Tensor expert_out = run_experts(dispatched, fill);
  // Combine in float32 (DeepSpeed's _sparse_decode), summed over the routes.
  const Tensor padded = cat({expert_out.reshape({slots, M}), zero_row}, 0);
  Tensor combined;
  for (size_t j = 0; j < back.size(); ++j) {
    const Tensor routed = embedding(padded, from_vector(back[j], {total}).to(dev));
    const Tensor weighted = routed.to(DType::Float32) * cat(gates[j], 0).view({total, 1});
    combined = combined.defined() ? combined + weighted : weighted;
  }
  Tensor output = combined.to(hidden_states.dtype()).reshape(hidden_states.shape());
  if (options_.use_residual) {
    const Tensor coef = softmax((*coefficient)(hidden_states), -1);
    const int64_t last = coef.dim() - 1;
    output = output * coef.narrow(last, 0, 1) + (*mlp)(hidden_states)*coef.narrow(last, 1, 1);
  }
  out.output = output;
  last_ = {out.l_aux.item(), out.exp_counts, out.routes, out.dropped_routes};
  return out;
}

std::vector<std::pair<std::string, MoE*>> moe_layers(nn::Module& model) {
  std::vector<std::pair<std::string, MoE*>> out;
  if (auto* m = dynamic_cast<MoE*>(&model)) out.emplace_back("", m);
  for (auto& [name, child] : model.named_children())
    for (auto& [path, m] : moe_layers(*child))
      out.emplace_back(path.empty() ? name : name + "." + path, m);
  return out;
}

}  // namespace tessera::parallel
