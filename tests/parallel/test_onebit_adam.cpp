// DeepSpeed's 1-bit Adam and 0/1 Adam (optim::OneBitAdam, optim::ZeroOneAdam over
// parallel::ProcessGroupOneBitTransport) at 1, 2 and 4 ranks against
// tests/fixtures/deepspeed/onebit_adam.json, a float32 transcription of DeepSpeed's
// OnebitAdam.step, ZeroOneAdam.step and compressed_allreduce over simulated ranks: 30 steps
// across the freeze, three tensors padded differently, two parameter groups.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "fixture_util.h"
#include "skip.h"
#include "tessera/optim/onebit_adam.h"
#include "tessera/optim/onebit_lamb.h"
#include "tessera/optim/zero_one_adam.h"
#include "tessera/parallel/onebit_transport.h"

TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

// The generator's hashed(): a value in [-1, 1] from integers alone.
float hashed(int64_t rank, int64_t step, int64_t tensor, int64_t k, int64_t salt) {
  uint64_t h = static_cast<uint64_t>(rank * 1000003 + step * 10007 + tensor * 7919 + k * 101 +
                                     salt * 31337) %
               (uint64_t{1} << 32);
  h = (h * 2654435761u) % (uint64_t{1} << 32);
  return static_cast<float>(static_cast<double>(static_cast<int64_t>((h >> 8) % 2001) - 1000) /
                            1000.0);
}

Tensor hashed_tensor(int64_t n, int64_t rank, int64_t step, int64_t tensor, int64_t salt) {
  Tensor t = Tensor::empty({n}, DType::Float32);
  for (int64_t k = 0; k < n; ++k) t.data<float>()[k] = hashed(rank, step, tensor, k, salt);
  return t;
}

// Tensor t's gradient at `step` on `rank`: its own, or (averaged: where the engine all-reduces)
// the ranks' mean in the generator's order.
Tensor gradient(int64_t n, int rank, int world, int64_t step, int64_t t, bool averaged) {
  if (!averaged) return hashed_tensor(n, rank, step, t, 2);
  Tensor g = hashed_tensor(n, 0, step, t, 2);
  for (int r = 1; r < world; ++r) g = g + hashed_tensor(n, r, step, t, 2);
  return g * static_cast<double>(1.0f / static_cast<float>(world));
}

double relative_gap(const Tensor& got, const std::vector<double>& want) {
  double gap = 0, scale = 0;
  const std::vector<double> g = got.to_vector();
  for (size_t k = 0; k < want.size(); ++k) {
    gap = std::max(gap, std::fabs(g[k] - want[k]));
    scale = std::max(scale, std::fabs(want[k]));
  }
  return gap / scale;
}

}  // namespace

// The fixture's exp_avg_mask (of tensor 1, alone in its group), or none.
static Tensor fixture_mask(const nlohmann::json& fixture, bool masked) {
  if (!masked) return {};
  const auto mask = fixture["masked"]["mask"].get<std::vector<double>>();
  return from_vector(mask, {static_cast<int64_t>(mask.size())}, DType::Float32);
}

static void check_onebit_adam(const nlohmann::json& fixture, const nlohmann::json& want,
                              bool masked) {
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  const std::vector<int64_t> shapes = fixture["shapes"].get<std::vector<int64_t>>();
  std::vector<Tensor> params;
  for (size_t t = 0; t < shapes.size(); ++t)
    params.push_back(hashed_tensor(shapes[t], 0, 0, static_cast<int64_t>(t), 1));
  const double lr = fixture["lr"];
  std::vector<optim::ParamGroup> groups = {{{"p0", "p2"}, {params[0], params[2]}, lr, 0.01},
                                           {{"p1"}, {params[1]}, lr, 0.0}};
  groups[1].exp_avg_mask = fixture_mask(fixture, masked);
  optim::OneBitAdamOptions options;
  options.freeze_step = fixture["freeze_step"];
  optim::OneBitAdam adam(groups, options,
                         std::make_shared<parallel::ProcessGroupOneBitTransport>(group));
  const int64_t steps = fixture["steps"];
  for (int64_t step = 1; step <= steps; ++step) {
    CAPTURE(step);
    CHECK(adam.frozen() == (step > options.freeze_step));
    for (size_t t = 0; t < shapes.size(); ++t)
      params[t].set_grad(
          gradient(shapes[t], rank, world, step, static_cast<int64_t>(t), !adam.frozen()));
    adam.step();
    for (size_t t = 0; t < shapes.size(); ++t) {
      CAPTURE(t);
      CHECK(relative_gap(params[t], want["params_after_step"][step - 1][t]) < 1e-6);
    }
  }
  const auto state = adam.state_dict();
  CHECK(relative_gap(state.at("p1.exp_avg"), want["final_exp_avg"][1]) < 1e-6);
  CHECK(state.at("step").item() == static_cast<double>(steps));
}

TEST_CASE("OneBitAdam: N ranks reproduce DeepSpeed's 1-bit Adam across the freeze" *
          test::skip_if(test::launched_world_size() == 3 || test::launched_world_size() > 4,
                        "the fixture holds 1, 2 and 4 ranks")) {
  const auto fixture = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/onebit_adam.json");
  check_onebit_adam(fixture, fixture["worlds"][std::to_string(parallel::world()->size())], false);
}

static void check_zero_one_adam(const nlohmann::json& fixture, const nlohmann::json& want,
                                bool masked) {
  const auto& zo = fixture["zero_one"];
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  const std::vector<int64_t> shapes = fixture["shapes"].get<std::vector<int64_t>>();
  std::vector<Tensor> params;
  for (size_t t = 0; t < shapes.size(); ++t)
    params.push_back(hashed_tensor(shapes[t], 0, 0, static_cast<int64_t>(t), 1));
  const double lr = fixture["lr"];
  std::vector<optim::ParamGroup> groups = {{{"p0", "p2"}, {params[0], params[2]}, lr, 0.01},
                                           {{"p1"}, {params[1]}, lr, 0.0}};
  groups[1].exp_avg_mask = fixture_mask(fixture, masked);
  optim::ZeroOneAdamOptions options;
  options.var_freeze_step = zo["var_freeze_step"];
  options.var_update_scaler = zo["var_update_scaler"];
  options.local_step_scaler = zo["local_step_scaler"];
  options.local_step_clipper = zo["local_step_clipper"];
  optim::ZeroOneAdam adam(groups, options,
                          std::make_shared<parallel::ProcessGroupOneBitTransport>(group));
  const int64_t steps = fixture["steps"];
  int64_t averaged_steps = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    CAPTURE(step);
    const bool averaged = !adam.reads_local_gradients();
    averaged_steps += averaged;
    for (size_t t = 0; t < shapes.size(); ++t)
      params[t].set_grad(gradient(shapes[t], rank, world, step, static_cast<int64_t>(t), averaged));
    adam.step();
    for (size_t t = 0; t < shapes.size(); ++t) {
      CAPTURE(t);
      CHECK(relative_gap(params[t], want["params_after_step"][step - 1][rank][t]) < 1e-6);
    }
  }
  CHECK(adam.frozen());
  CHECK(averaged_steps < steps / 2);  // the variance steps thin out, then stop
  const auto state = adam.state_dict();
  CHECK(relative_gap(state.at("p1.exp_avg"), want["final_exp_avg"][rank][1]) < 1e-6);
}

TEST_CASE("ZeroOneAdam: N ranks reproduce DeepSpeed's 0/1 Adam: variance and local steps" *
          test::skip_if(test::launched_world_size() == 3 || test::launched_world_size() > 4,
                        "the fixture holds 1, 2 and 4 ranks")) {
  const auto fixture = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/onebit_adam.json");
  check_zero_one_adam(
      fixture, fixture["zero_one"]["worlds"][std::to_string(parallel::world()->size())], false);
}

static void check_onebit_lamb(const nlohmann::json& fixture, const nlohmann::json& want,
                              bool masked) {
  const auto& lamb = fixture["onebit_lamb"];
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  const std::vector<int64_t> shapes = fixture["shapes"].get<std::vector<int64_t>>();
  std::vector<Tensor> params;
  for (size_t t = 0; t < shapes.size(); ++t)
    params.push_back(hashed_tensor(shapes[t], 0, 0, static_cast<int64_t>(t), 1));
  const double lr = fixture["lr"];
  // One group per tensor, in the generator's order (1-bit LAMB flattens them in group order).
  std::vector<optim::ParamGroup> groups = {{{"p0"}, {params[0]}, lr, 0.01},
                                           {{"p1"}, {params[1]}, lr, 0.0},
                                           {{"p2"}, {params[2]}, lr, 0.01}};
  groups[1].exp_avg_mask = fixture_mask(fixture, masked);
  optim::OneBitLambOptions options;
  options.freeze_step = lamb["freeze_step"];
  optim::OneBitLamb opt(groups, options,
                        std::make_shared<parallel::ProcessGroupOneBitTransport>(group));
  const int64_t steps = fixture["steps"];
  for (int64_t step = 1; step <= steps; ++step) {
    CAPTURE(step);
    CHECK(opt.frozen() == (step > options.freeze_step));
    for (size_t t = 0; t < shapes.size(); ++t)
      params[t].set_grad(
          gradient(shapes[t], rank, world, step, static_cast<int64_t>(t), !opt.frozen()));
    opt.step();
    if (step > 1) {
      const auto& coeffs = want["lamb_coeffs"][step - 2];
      REQUIRE(opt.lamb_coeffs().size() == coeffs.size());
      for (size_t t = 0; t < coeffs.size(); ++t)
        CHECK(opt.lamb_coeffs()[t] == doctest::Approx(coeffs[t].get<double>()).epsilon(1e-6));
    }
    for (size_t t = 0; t < shapes.size(); ++t) {
      CAPTURE(t);
      CHECK(relative_gap(params[t], want["params_after_step"][step - 1][t]) < 1e-6);
    }
  }
}

TEST_CASE("OneBitLamb: N ranks reproduce DeepSpeed's 1-bit LAMB across the freeze" *
          test::skip_if(test::launched_world_size() == 3 || test::launched_world_size() > 4,
                        "the fixture holds 1, 2 and 4 ranks")) {
  const auto fixture = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/onebit_adam.json");
  check_onebit_lamb(
      fixture, fixture["onebit_lamb"]["worlds"][std::to_string(parallel::world()->size())], false);
}

TEST_CASE("exp_avg_mask: the three optimizers mask the 1-bit-averaged momentum as DeepSpeed's" *
          test::skip_if(test::launched_world_size() != 2 && test::launched_world_size() != 4,
                        "the fixture holds 2 and 4 ranks")) {
  const auto fixture = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/onebit_adam.json");
  const auto& masked = fixture["masked"];
  const std::string world = std::to_string(parallel::world()->size());
  SUBCASE("OneBitAdam") {
    check_onebit_adam(fixture, masked["onebit_adam"][world], true);
  }
  SUBCASE("ZeroOneAdam") {
    check_zero_one_adam(fixture, masked["zero_one"][world], true);
  }
  SUBCASE("OneBitLamb") {
    check_onebit_lamb(fixture, masked["onebit_lamb"][world], true);
  }
  // A mask that does not broadcast to its group's parameters is refused naming them.
  Tensor p = zeros({65}), bad = ones({3});
  std::vector<optim::ParamGroup> groups = {{{"p1"}, {p}, 1e-3, 0.0, bad}};
  CHECK_THROWS_WITH(optim::OneBitAdam(groups, {}, nullptr),
                    doctest::Contains("the exp_avg_mask of the group of 'p1' is"));
}

TEST_CASE("onebit_padded_size is DeepSpeed's corrected_tensor_size") {
  CHECK(optim::onebit_padded_size(37, 1) == 40);  // 1 x lcm(1, 8)
  CHECK(optim::onebit_padded_size(37, 2) == 48);  // 2 x 8
  CHECK(optim::onebit_padded_size(37, 4) == 64);  // 4 x 8 = 32
  CHECK(optim::onebit_padded_size(65, 3) == 72);  // 3 x 24
  CHECK(optim::onebit_padded_size(64, 4) == 64);
  CHECK(optim::onebit_padded_size(0, 4) == 0);
}

TEST_CASE(
    "OneBitAdam after the freeze: the momentum's bytes on the wire are under 1/20 of a "
    "float32 all-reduce's" *
    test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  auto group = parallel::world();
  const int world = group->size();
  const int64_t n = int64_t{1} << 20;
  Tensor p = hashed_tensor(n, 0, 0, 0, 1);
  optim::OneBitAdamOptions options;
  options.freeze_step = 2;
  optim::OneBitAdam adam({{{"p"}, {p}, 1e-3, 0.0}}, options,
                         std::make_shared<parallel::ProcessGroupOneBitTransport>(group));
  for (int64_t step = 1; step <= 3; ++step) {
    p.set_grad(hashed_tensor(n, group->rank(), step, 0, 2));
    const bool measured = step == 3;
    CHECK(adam.frozen() == measured);
    if (measured) {
      group->logger().reset();
      group->logger().enable(true);
    }
    adam.step();
  }
  double bus = 0;
  for (const auto& [op, stats] : group->logger().totals()) bus += stats.bus_bytes;
  group->logger().enable(false);
  group->logger().reset();
  // A ring all-reduce sends 2 (N - 1) / N of the tensor's bytes from each rank.
  const double dense = 2.0 * (world - 1) / world * 4.0 * static_cast<double>(n);
  CAPTURE(bus);
  CHECK(bus > 0);
  CHECK(bus <= dense / 20);
}

TEST_CASE(
    "the batched compressed all-reduce equals one call per tensor, bit for bit, in two "
    "messages" *
    test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  parallel::ProcessGroupOneBitTransport transport(group);
  struct Three {
    std::vector<std::vector<float>> buffer, worker, server;
  };
  auto make = [&] {  // three tensors padded differently, errors from an earlier call
    Three t;
    for (int64_t i = 0; i < 3; ++i) {
      const int64_t padded = optim::onebit_padded_size(37 + 300 * i, world);
      const Tensor b = hashed_tensor(padded, rank, 1, i, 3),
                   w = hashed_tensor(padded, rank, 2, i, 4),
                   s = hashed_tensor(padded / world, rank, 3, i, 5);
      t.buffer.emplace_back(b.data<float>(), b.data<float>() + padded);
      t.worker.emplace_back(w.data<float>(), w.data<float>() + padded);
      t.server.emplace_back(s.data<float>(), s.data<float>() + padded / world);
    }
    return t;
  };
  Three alone = make(), batched = make();
  for (size_t i = 0; i < 3; ++i)
    optim::compressed_all_reduce(alone.buffer[i], alone.worker[i], alone.server[i], transport);
  std::vector<optim::CompressedBuffer> items;
  for (size_t i = 0; i < 3; ++i)
    items.push_back({&batched.buffer[i], &batched.worker[i], &batched.server[i]});
  group->logger().reset();
  group->logger().enable(true);
  optim::compressed_all_reduce(items, transport);
  std::map<std::string, int64_t> calls;
  for (const auto& [op, stats] : group->logger().totals()) calls[op] = stats.calls;
  group->logger().enable(false);
  group->logger().reset();
  CHECK(alone.buffer == batched.buffer);  // (float ==: bit for bit, no NaNs here)
  CHECK(alone.worker == batched.worker);
  CHECK(alone.server == batched.server);
  CHECK(calls["all_gather"] == 1);                          // every server chunk and scale at once
  CHECK(calls["send"] == static_cast<int64_t>(world - 1));  // one message to each peer
}
