// engine::Trainer over a DataLoader on N ranks reproduces one process (1e-6 relative, float32):
// each rank reads its contiguous slice of every global batch of the same shuffled epochs.
#include <doctest/doctest.h>

#include "regressor.h"
#include "skip.h"
#include "tessera/engine/trainer.h"
#include "tessera/io/data_loader.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

using Example = std::pair<Tensor, Tensor>;

std::vector<double> train(std::shared_ptr<parallel::ProcessGroup> group) {
  const int world = group->size();
  manual_seed(31);
  test::Regressor model;
  auto engine = engine::initialize(
      model,
      io::TrainConfig::parse(R"({"train_batch_size": 8, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.05}}, "steps_per_print": 100})",
                             world),
      group);
  const test::Rows all = test::make_rows(22, 9);
  auto data = std::make_shared<io::FunctionDataset<Example>>(22, [all](int64_t i) {
    return Example{all.x.narrow(0, i, 1), all.y.narrow(0, i, 1)};
  });
  auto collate = [](std::vector<Example> items) {
    std::vector<Tensor> x, y;
    for (auto& e : items) x.push_back(e.first), y.push_back(e.second);
    return test::Rows{cat(x, 0), cat(y, 0)};
  };
  io::RepeatingLoader<Example, test::Rows> loader(io::DataLoader<Example, test::Rows>(
      data, {8 / world, true, 3, group->rank(), world, true}, collate));
  engine::TrainerOptions o;
  o.steps = 7;  // 2 batches an epoch: 3 epochs and a half
  o.steps_per_print = 100;
  engine::Trainer<test::Rows>(*engine, loader, o).fit();
  std::vector<double> w = model.fc.weight.to_vector();
  w.push_back(model.fc.bias.to_vector()[0]);
  return w;
}

}  // namespace

TEST_CASE("Trainer with a DataLoader: N ranks reproduce one process" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  const std::vector<double> one = train(parallel::make_local_group());
  const std::vector<double> many = train(parallel::world());
  REQUIRE(one.size() == many.size());
  for (size_t i = 0; i < one.size(); ++i) {
    CAPTURE(i);
    CHECK(many[i] == doctest::Approx(one[i]).epsilon(1e-6));
  }
}

TEST_SUITE_END();
