// DeepSpeed's MoE gating and layer against DeepSpeed's own code run on CPU (fixtures:
// tests/fixtures/generate_moe_fixtures.py; the noise DeepSpeed drew is given to Tessera's
// gating): combine weights (hence slots, locations and dropped tokens), capacities, exp_counts,
// l_aux and the gradient of the logits for top-1 and top-2 with and without drop_tokens,
// RSample, random token selection and second-expert sampling; the MoE layer's output, l_aux
// and every gradient (top-1, top-2 with drops, PR-MoE's residual).
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "relative_error.h"
#include "tessera/io/safetensors.h"
#include "tessera/nn/flops_profiler.h"
#include "tessera/nn/moe_gating.h"
#include "tessera/ops.h"
#include "tessera/parallel/moe.h"

using namespace tessera;

namespace {

const std::string kDir = TESSERA_SOURCE_ROOT "/tests/fixtures/deepspeed/";

nlohmann::json cases() {
  std::ifstream f(kDir + "moe_cases.json");
  return nlohmann::json::parse(f);
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

nn::MoEGateOptions gate_options(const nlohmann::json& c) {
  nn::MoEGateOptions o;
  o.k = c.at("k");
  o.capacity_factor = c.at("capacity_factor");
  o.min_capacity = c.at("min_capacity");
  o.drop_tokens = c.at("drop_tokens");
  o.use_rts = c.at("use_rts");
  if (o.k == 1) {
    o.noisy_gate_policy = c.at("noisy") ? nn::NoisyGatePolicy::RSample : nn::NoisyGatePolicy::None;
  } else {
    o.top2_2nd_expert_sampling = c.at("noisy");
  }
  return o;
}

}  // namespace

TEST_CASE("top-1 and top-2 gating equal DeepSpeed's top1gating / top2gating") {
  const auto f = io::load_safetensors(kDir + "moe_gating.safetensors");
  int checked = 0;
  const nlohmann::json all = cases();
  for (const auto& item : all.at("gating").items()) {
    const std::string name = item.key();
    const nlohmann::json& c = item.value();
    CAPTURE(name);
    const nn::MoEGateOptions o = gate_options(c);
    Tensor logits = f.at(name + ".logits").clone().requires_grad_();
    const nn::GatingNoise noise{f.at(name + ".gumbel"), f.at(name + ".uniform")};
    const nn::MoERoutes r = o.k == 1 ? nn::top1_gating(logits, o, true, noise)
                                     : nn::top2_gating(logits, o, true, noise);
    CHECK(r.capacity == c.at("capacity").get<int64_t>());
    CHECK(r.exp_counts == ints(f.at(name + ".exp_counts")));
    const Tensor want = f.at(name + ".combine");
    const Tensor got = r.combine_weights();
    REQUIRE(got.shape() == want.shape());
    // The same routes: a weight exactly where DeepSpeed has one.
    const auto g = got.to_vector(), w = want.to_vector();
    int64_t placed = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      CHECK((g[i] != 0.0) == (w[i] != 0.0));
      placed += w[i] != 0.0;
    }
    CHECK(placed == static_cast<int64_t>(r.slots.size()) * r.num_tokens - r.dropped_routes());
    CHECK(rel_diff(got, want) < 1e-6);
    CHECK(std::abs(r.l_aux.item() - f.at(name + ".l_aux").item()) < 1e-6);
    // The gradient flows through the combine weights and l_aux as DeepSpeed's.
    const Tensor R = f.at(name + ".R");
    Tensor loss = r.l_aux * 0.7;
    for (size_t j = 0; j < r.slots.size(); ++j) {
      std::vector<int64_t> idx;
      for (int64_t s = 0; s < r.num_tokens; ++s) {
        const int64_t slot = r.slots[j][static_cast<size_t>(s)];
        idx.push_back(slot < 0 ? 0 : s * r.num_experts * r.capacity + slot);
      }
      const Tensor picked = embedding(R.reshape({-1, 1}), from_vector(idx, {r.num_tokens}));
      loss = loss + sum(picked.view({r.num_tokens}) * r.gates[j]);
    }
    loss.backward();
    CHECK(rel_diff(logits.grad(), f.at(name + ".grad_logits")) < 1e-5);
    ++checked;
  }
  CHECK(checked == 10);
}

TEST_CASE("gating: drops are counted and bad input is an error naming it") {
  const auto f = io::load_safetensors(kDir + "moe_gating.safetensors");
  const nlohmann::json c = cases().at("gating").at("top2_small_capacity");
  const nn::MoEGateOptions o = gate_options(c);
  const nn::MoERoutes r = nn::top2_gating(f.at("top2_small_capacity.logits"), o, true, {});
  CHECK(r.dropped_routes() > 0);
  nn::MoEGateOptions bad;
  bad.k = 3;
  CHECK_THROWS_WITH_AS(bad.validate("moe"), doctest::Contains("moe.k: 3 is not 1 or 2"), Error);
  bad.k = 1;
  bad.capacity_factor = 0.0;
  CHECK_THROWS_WITH_AS(bad.validate("moe"), doctest::Contains("moe.capacity_factor"), Error);
  CHECK_THROWS_WITH_AS(nn::noisy_gate_policy_from_name("gumbel", "moe.noisy_gate_policy"),
                       doctest::Contains("'gumbel' is not a noisy gate policy"), Error);
  nn::MoEGateOptions rts;  // top-1 with random token selection needs its numbers
  CHECK_THROWS_WITH_AS(nn::top1_gating(zeros({8, 2}), rts, true, {}),
                       doctest::Contains("uniform noise must be [8, 2]"), Error);
  rts.use_rts = false;
  rts.min_capacity = 9;
  CHECK_THROWS_WITH_AS(nn::top1_gating(zeros({8, 2}), rts, true, {}),
                       doctest::Contains("8 tokens are fewer than min_capacity 9"), Error);
  CHECK(nn::moe_capacity(10, 3, 1.0, 0) == 4);  // ceil(3.33)
  CHECK(nn::moe_capacity(12, 4, 1.0, 0) == 3);  // exact
  CHECK(nn::moe_capacity(12, 4, 0.1, 2) == 2);  // the minimum
}

namespace {

struct Expert : nn::UnaryModule {
  Expert(nn::Module* parent, const std::string& name, int64_t m, int64_t h)
      : nn::UnaryModule(parent, name), fc(this, "fc", m, h), proj(this, "proj", h, m) {}
  Tensor forward(const Tensor& x) override { return proj(gelu(fc(x), GeluApprox::Tanh)); }
  nn::Linear fc, proj;
};

parallel::MoE::ExpertFactory expert_factory(int64_t m, int64_t h) {
  return [m, h](nn::Module* parent, const std::string& name) -> std::unique_ptr<nn::UnaryModule> {
    return std::make_unique<Expert>(parent, name, m, h);
  };
}

}  // namespace

TEST_CASE("the MoE layer equals DeepSpeed's MoE: output, l_aux, counts, every gradient") {
  const auto f = io::load_safetensors(kDir + "moe_layer.safetensors");
  const nlohmann::json all = cases();
  int checked = 0;
  for (const auto& item : all.at("layer").items()) {
    const std::string name = item.key();
    const nlohmann::json& kw = item.value();
    CAPTURE(name);
    parallel::MoEOptions o;
    o.num_experts = kw.at("num_experts");
    o.gate.k = kw.at("k");
    o.gate.capacity_factor = kw.at("capacity_factor");
    o.gate.min_capacity = kw.at("min_capacity");
    o.gate.use_rts = kw.value("use_rts", true);
    o.gate.top2_2nd_expert_sampling = kw.value("top2_2nd_expert_sampling", true);
    o.use_residual = kw.value("use_residual", false);
    nn::Module root;
    parallel::MoE moe(&root, "moe", 8, expert_factory(8, 12), o);
    std::map<std::string, Tensor> state;
    const std::string prefix = name + ".param.";
    for (const auto& [key, t] : f)
      if (key.rfind(prefix, 0) == 0) state["moe." + key.substr(prefix.size())] = t;
    root.load_state_dict(state);  // strict: DeepSpeed's names, every one
    Tensor x = f.at(name + ".x").clone().requires_grad_();
    nn::FlopsProfiler prof(root);
    prof.start_profile();
    const parallel::MoE::Output out = moe.forward(x);
    prof.stop_profile();
    // The experts work on the routed tokens only, not on their capacity buffers' padding:
    // each kept route is one token through fc (8 x 12) and proj (12 x 8).
    CHECK(prof.figures(moe.deepspeed_experts).macs ==
          (out.routes - out.dropped_routes) * (8 * 12 + 12 * 8));
    CHECK(rel_diff(out.output, f.at(name + ".out")) < 1e-6);
    CHECK(std::abs(out.l_aux.item() - f.at(name + ".l_aux").item()) < 1e-6);
    CHECK(out.exp_counts == ints(f.at(name + ".exp_counts")));
    (sum(out.output * f.at(name + ".R")) + out.l_aux * 0.3).backward();
    CHECK(rel_diff(x.grad(), f.at(name + ".grad.x")) < 1e-5);
    for (auto& [param, t] : moe.named_parameters()) {
      const std::string pname = param;  // (clang 14: no structured bindings in CAPTURE)
      CAPTURE(pname);
      CHECK(rel_diff(t->grad(), f.at(name + ".grad." + pname)) < 1e-5);
    }
    ++checked;
  }
  CHECK(checked == 3);
}
