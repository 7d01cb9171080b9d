// N ranks reproduce one process (1e-6 relative, float32) with what a user brings to
// initialize: a client optimizer factory over parameter groups with their own lr and weight
// decay, at ZeRO stages 0-3, and a batch type of the user's own whose ranks hold different
// numbers of loss terms (engine.forward weights them, nn/loss_model.h); with engine.backward
// and with a direct loss.backward(), over two micro-batches per step.
#include <doctest/doctest.h>

#include "regressor.h"
#include "skip.h"
#include "tessera/engine/engine.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

// Rows of which only those with mask 1 count in the loss (as ignored targets do).
struct MaskedRows {
  Tensor x, y, mask;  // [B, 3], [B, 1], [B]
  int64_t loss_terms() const {
    int64_t n = 0;
    for (double m : mask.to_vector()) n += m != 0.0;
    return n;
  }
};

struct MaskedRegressor : nn::LossModel<MaskedRows> {
  nn::Linear fc{this, "fc", 3, 1};
  Tensor loss(const MaskedRows& b) override {
    const Tensor err = (fc(b.x) - b.y).reshape({-1});
    return sum(err * err * b.mask) / static_cast<double>(b.loss_terms());
  }
};

// Every rank's 8 / N rows of the 8-row global batch k.
MaskedRows rows_of(uint64_t k, int rank, int world) {
  const test::Rows all = test::make_rows(8, 100 + k);
  const Tensor mask = from_vector({1.0, 1, 1, 1, 1, 0, 0, 1}, {8});
  const int64_t n = 8 / world;
  return {all.x.narrow(0, rank * n, n), all.y.narrow(0, rank * n, n), mask.narrow(0, rank * n, n)};
}

// direct: loss.backward() instead of engine.backward (the reduction finishes in step()).
std::vector<double> train(int stage, std::shared_ptr<parallel::ProcessGroup> group,
                          bool direct = false) {
  manual_seed(21);
  MaskedRegressor m;
  const std::string cfg = R"({"train_batch_size": 16, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.5}},
    "zero_optimization": {"stage": )" +
                          std::to_string(stage) + "}}";
  engine::InitializeOptions o;
  o.group = group;
  o.optimizer_factory = [](std::vector<optim::ParamGroup> g) {
    return std::make_unique<optim::SGD>(std::move(g), optim::SGDOptions{0.9});
  };
  o.model_parameters = {{{"fc.weight"}, 0.1, 0.01}, {{"fc.bias"}, 0.3, {}}};
  auto e = engine::initialize(m, io::TrainConfig::parse(cfg, group->size()), std::move(o));
  for (uint64_t k = 0; k < 6; ++k) {
    const Tensor loss = e->forward(rows_of(k, group->rank(), group->size()));
    if (direct)
      loss.backward();
    else
      e->backward(loss);
    e->step();
  }
  e.reset();  // ZeRO-3 leaves the model gathered
  std::vector<double> w = m.fc.weight.to_vector();
  w.push_back(m.fc.bias.to_vector()[0]);
  return w;
}

}  // namespace

TEST_CASE(
    "client optimizer factory, parameter groups and weighted user batches: N ranks "
    "reproduce one process" *
    test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    const std::vector<double> one = train(stage, parallel::make_local_group());
    for (bool direct : {false, true}) {
      CAPTURE(direct);
      const std::vector<double> many = train(stage, parallel::world(), direct);
      REQUIRE(one.size() == many.size());
      for (size_t i = 0; i < one.size(); ++i) {
        CAPTURE(i);
        CHECK(many[i] == doctest::Approx(one[i]).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("backward(allreduce_gradients = false) leaves each rank its own gradients" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  auto world = parallel::world();
  const std::string cfg = R"({"train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "SGD", "params": {"lr": 0.1}}, "zero_optimization": {"stage": )";
  manual_seed(22);
  test::Regressor m;
  auto e = engine::initialize(m, io::TrainConfig::parse(cfg + "0}}", world->size()));
  const test::Rows rows = test::make_rows(4, 200 + world->rank());  // different on every rank
  const std::vector<double> mine = test::regressor_grads(m, rows);
  e->backward(e->forward(rows), {.allreduce_gradients = false});
  CHECK(m.fc.bias.grad().item() == doctest::Approx(mine[3]).epsilon(1e-6));
  test::Regressor z;
  auto zero2 = engine::initialize(z, io::TrainConfig::parse(cfg + "2}}", world->size()));
  CHECK_THROWS_WITH_AS(zero2->backward(zero2->forward(rows), {.allreduce_gradients = false}),
                       doctest::Contains("allreduce_gradients = false cannot be used with ZeRO "
                                         "stage 2"),
                       Error);
}

TEST_SUITE_END();
