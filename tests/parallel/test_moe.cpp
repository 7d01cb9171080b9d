// MoE expert parallelism: N ranks (mpirun -np 2 and 4; ep_size N, and 2 x 2 replicas at 4)
// reproduce one process that gates its batch in N groups (also under ZeRO-1 and ZeRO-2, the
// experts partitioned over their replicas), through the engine over 8 steps of
// Adam with gradient clipping: losses, l_aux, dense parameters and every rank's experts to
// 1e-6, with the gate's noise (top-2 second-expert sampling; top-1 Jitter, RSample and random
// token selection) and dropout on. Also the all-to-all collective itself and the layout errors.
#include <doctest/doctest.h>

#include <map>

#include "relative_error.h"
#include "skip.h"
#include "tessera/engine/engine.h"
#include "tessera/ops.h"
#include "tessera/parallel/moe.h"
#include "tessera/rng.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

constexpr int64_t kMoEB = 2, kMoET = 5, kMoEM = 8, kMoEVocab = 5;

struct RanksExpert : nn::UnaryModule {
  RanksExpert(nn::Module* parent, const std::string& name)
      : nn::UnaryModule(parent, name), fc(this, "fc", kMoEM, 12), proj(this, "proj", 12, kMoEM) {}
  Tensor forward(const Tensor& x) override { return proj(gelu(fc(x), GeluApprox::Tanh)); }
  nn::Linear fc, proj;
};

struct MoEModel : nn::Module {
  MoEModel(const parallel::MoEOptions& o, parallel::ExpertParallelGroups g)
      : moe(this, "moe", kMoEM, make_expert, o, std::move(g)) {}
  static std::unique_ptr<nn::UnaryModule> make_expert(nn::Module* parent, const std::string& n) {
    return std::make_unique<RanksExpert>(parent, n);
  }
  nn::Linear in{this, "in", kMoEM, kMoEM};
  parallel::MoE moe;
  nn::Dropout drop{this, "drop", 0.2};
  nn::Linear out{this, "out", kMoEM, kMoEVocab};
  double last_l_aux = 0;
  Tensor loss(const Tensor& x, const Tensor& targets) {
    const parallel::MoE::Output m = moe.forward(gelu(in(x)));
    last_l_aux = m.l_aux.item();
    const Tensor logits = out(drop(m.output + x));
    return cross_entropy(logits.view({-1, kMoEVocab}), targets.view({-1})) + m.l_aux * 0.05;
  }
};

struct MoERun {
  std::vector<double> losses, l_aux;
  std::map<std::string, Tensor> params;
};

// `ranks` ranks of the world with ep_size `ep` (1 rank: one process gating in `groups`).
MoERun train_moe(std::shared_ptr<parallel::ProcessGroup> group, parallel::MoEOptions o, int ep,
                 int64_t groups, int zero_stage = 0) {
  const int n = group->size(), rank = group->rank();
  o.gating_groups = groups;
  parallel::ExpertParallelGroups g;
  if (ep > 1) g = parallel::make_expert_parallel_groups(*group, ep);
  manual_seed(11);
  MoEModel model(o, g);
  const std::string cfg = R"({"train_micro_batch_size_per_gpu": )" +
                          std::to_string(kMoEB * groups) +
                          R"(, "gradient_clipping": 0.5, "zero_optimization": {"stage": )" +
                          std::to_string(zero_stage) + R"(, "reduce_bucket_size": 300},
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})";
  auto engine = engine::initialize(model, io::TrainConfig::parse(cfg, n), group);
  Generator data(7);
  MoERun run;
  const int64_t global = kMoEB * groups * n;
  for (int step = 0; step < 8; ++step) {
    const Tensor x = randn({global, kMoET, kMoEM}, DType::Float32, Device::cpu(), &data);
    const Tensor t =
        (rand({global, kMoET}, DType::Float32, Device::cpu(), &data) * 4.999).to(DType::Int64);
    const int64_t rows = global / n;
    const Tensor loss = model.loss(x.narrow(0, rank * rows, rows).contiguous(),
                                   t.narrow(0, rank * rows, rows).contiguous());
    run.losses.push_back(group->all_reduce_scalar(loss.item()) / n);
    run.l_aux.push_back(group->all_reduce_scalar(model.last_l_aux) / n);
    engine->backward(loss);
    engine->step();
  }
  for (auto& [name, t] : model.named_parameters()) run.params[name] = t->clone();
  return run;
}

void check_reproduces(const parallel::MoEOptions& o, int ep, int zero_stage = 0) {
  const auto world = parallel::world();
  const int n = world->size();
  const MoERun one = train_moe(parallel::make_local_group(), o, 1, n);
  const MoERun ranks = train_moe(world, o, ep, 1, zero_stage);
  for (size_t s = 0; s < one.losses.size(); ++s) {
    CAPTURE(s);
    CHECK(std::abs(ranks.losses[s] - one.losses[s]) <= 1e-6 * std::abs(one.losses[s]));
    CHECK(std::abs(ranks.l_aux[s] - one.l_aux[s]) <= 1e-6 * std::abs(one.l_aux[s]));
  }
  CHECK(one.losses.front() != one.losses.back());
  // Every parameter this rank holds (its experts by their global names) as one process's.
  size_t experts = 0;
  for (const auto& entry : ranks.params) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    CAPTURE(name);
    REQUIRE(one.params.count(name));
    CHECK(rel_diff(t, one.params.at(name)) < 1e-6);
    experts += name.find("deepspeed_experts") != std::string::npos;
  }
  CHECK(experts == static_cast<size_t>(4 * o.num_experts / ep));  // 4 tensors an expert
}

parallel::MoEOptions moe_top2() {
  parallel::MoEOptions o;
  o.num_experts = 4;
  o.gate.k = 2;
  o.gate.capacity_factor = 0.75;  // drops tokens
  o.gate.min_capacity = 1;
  return o;
}

}  // namespace

TEST_CASE("MoE: N ranks with expert parallelism reproduce one process (top-2, sampling, drops)" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  const int n = parallel::world()->size();
  std::vector<int> eps{n};
  if (n == 4) eps.push_back(2);  // 2 experts' ranks x 2 replicas
  for (int ep : eps) {
    CAPTURE(ep);
    check_reproduces(moe_top2(), ep);
  }
}

TEST_CASE("MoE: N ranks reproduce one process (top-1, Jitter, RSample, random token selection)" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  for (auto policy : {nn::NoisyGatePolicy::Jitter, nn::NoisyGatePolicy::RSample}) {
    parallel::MoEOptions o;
    o.num_experts = 2 * parallel::world()->size();
    o.gate.capacity_factor = 0.5;
    o.gate.min_capacity = 1;
    o.gate.noisy_gate_policy = policy;
    o.use_residual = policy == nn::NoisyGatePolicy::Jitter;
    check_reproduces(o, parallel::world()->size());
  }
}

TEST_CASE("MoE: ZeRO-1 and ZeRO-2 with expert parallelism (experts over their replicas)" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  const int n = parallel::world()->size();
  for (int stage : {1, 2}) {
    CAPTURE(stage);
    check_reproduces(moe_top2(), n == 4 ? 2 : n, stage);  // (4 ranks: 2 experts' ranks x 2)
  }
}

TEST_CASE("MoE: no dropped tokens without drop_tokens; the capacity agrees over the ranks" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  parallel::MoEOptions o = moe_top2();
  o.gate.drop_tokens = false;
  check_reproduces(o, parallel::world()->size());
}

TEST_CASE("all_to_all: chunk r goes to rank r, and a bad split is an error") {
  const auto world = parallel::world();
  const int n = world->size(), me = world->rank();
  Tensor in = Tensor::empty({n * 3});
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 3; ++i)
      in.data<float>()[r * 3 + i] = static_cast<float>(100 * me + 10 * r + i);
  Tensor out = Tensor::empty({n * 3});
  world->all_to_all(out, in);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < 3; ++i)
      CHECK(out.data<float>()[r * 3 + i] == static_cast<float>(100 * r + 10 * me + i));
  if (n > 1)
    CHECK_THROWS_WITH_AS(world->all_to_all(Tensor::empty({n * 3 + 1}), Tensor::empty({n * 3 + 1})),
                         doctest::Contains("equal chunks"), Error);
}

TEST_CASE("MoE layouts that do not fit are errors before any work") {
  const auto world = parallel::world();
  const int n = world->size();
  const std::string bad_ep = "moe.ep_size: " + std::to_string(n + 1) + " must divide";
  CHECK_THROWS_WITH_AS(parallel::make_expert_parallel_groups(*world, n + 1),
                       doctest::Contains(bad_ep.c_str()), Error);
  parallel::MoEOptions o = moe_top2();
  o.num_experts = 3;
  CHECK_THROWS_WITH_AS(
      o.validate("moe", 2),
      doctest::Contains("moe.num_experts: 3 experts do not divide among ep_size 2"), Error);
  o.num_experts = 1;
  CHECK_THROWS_WITH_AS(o.validate("moe", 1), doctest::Contains("moe.k: 2 experts per token"),
                       Error);
  o = moe_top2();
  o.gating_groups = 3;
  nn::Module root;
  parallel::MoE moe(&root, "moe", kMoEM, MoEModel::make_expert, o);
  CHECK_THROWS_WITH_AS(moe.forward(zeros({2, 5, kMoEM})),
                       doctest::Contains("10 tokens do not split into gating_groups 3"), Error);
  CHECK_THROWS_WITH_AS(moe.forward(zeros({2, 5, kMoEM + 1})),
                       doctest::Contains("expected input [..., 8]"), Error);
  // Outside training (generation: a token at a time) such a forward is gated as one group,
  // as a layer with gating_groups 1 gates it.
  root.eval();
  o.gating_groups = 1;
  nn::Module root1;
  parallel::MoE one(&root1, "moe", kMoEM, MoEModel::make_expert, o);
  root1.load_state_dict(root.state_dict());
  root1.eval();
  const Tensor x = randn({2, 5, kMoEM});
  CHECK(rel_diff(moe.forward(x).output, one.forward(x).output) == 0.0);
}

TEST_SUITE_END();
