// DeepSpeed's initialize with client objects (deepspeed/runtime/engine.py, 0.19.8:
// _configure_optimizer, _configure_lr_scheduler, step's lr_kwargs): a client optimizer or
// factory replaces the config's optimizer, a client schedule the config's scheduler, parameter
// groups keep their own lr and weight decay; and engine.forward runs any nn::LossModel. The
// expected weights are one SGD step computed in float64 from the closed-form gradients.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "regressor.h"
#include "tessera/engine/engine.h"
#include "tessera/parallel/process_group.h"

using namespace tessera;
using test::Regressor;
using test::Rows;
namespace fs = std::filesystem;

namespace {

// (The hand-derived steps below are unclipped: DeepSpeed's default clips at 1.0.)
const char* kAdamW = R"({"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})";

io::TrainConfig config(const std::string& text) {
  return io::TrainConfig::parse(text, 1);
}

engine::InitializeOptions local(engine::InitializeOptions o = {}) {
  o.group = parallel::make_local_group();
  return o;
}

std::vector<double> weights(Regressor& m) {
  std::vector<double> w = m.fc.weight.to_vector();
  w.push_back(m.fc.bias.to_vector()[0]);
  return w;
}

// One engine step on `rows`; checks weight i moved by -lr[i] * (g + wd[i] * w) (float64).
void check_sgd_step(engine::Engine& e, Regressor& m, const Rows& rows, std::vector<double> lr,
                    std::vector<double> wd = {0, 0, 0, 0}) {
  const std::vector<double> before = weights(m), g = test::regressor_grads(m, rows);
  e.backward(e.forward(rows));
  REQUIRE(e.step().stepped);
  const std::vector<double> after = weights(m);
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(after[i] ==
          doctest::Approx(before[i] - lr[i] * (g[i] + wd[i] * before[i])).epsilon(1e-6));
  }
}

// An LR schedule of the user's own.
struct Linear100 : optim::LRSchedule {
  double lr(int64_t step) const override { return 0.01 * static_cast<double>(step + 1); }
  std::string name() const override { return "Linear100"; }
};

// An optimizer of the user's own that does not implement rebuild.
struct PlainSgd : optim::Optimizer {
  using optim::Optimizer::Optimizer;
  void step() override {}
  std::string name() const override { return "PlainSgd"; }
};

}  // namespace

TEST_CASE("a client optimizer object replaces the config's and keeps its groups' lr") {
  manual_seed(3);
  Regressor m;
  std::vector<optim::ParamGroup> groups{{{}, {m.fc.weight}, 0.1, 0.0}, {{}, {m.fc.bias}, 0.5, 0.0}};
  auto sgd = std::make_unique<optim::SGD>(groups);
  auto e = engine::initialize(m, config(kAdamW), local({.optimizer = std::move(sgd)}));
  CHECK(e->optimizer().name() == "SGD");
  CHECK(e->get_lr() == std::vector<double>{0.1, 0.5});  // no schedule: each group its own
  check_sgd_step(*e, m, test::make_rows(8, 1), {0.1, 0.1, 0.1, 0.5});
  check_sgd_step(*e, m, test::make_rows(8, 2), {0.1, 0.1, 0.1, 0.5});
}

TEST_CASE(
    "model_parameters: groups by name with their own lr and weight decay, the rest the "
    "config's") {
  manual_seed(4);
  Regressor m;
  const char* sgd = R"({"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 0,
    "optimizer": {"type": "SGD", "params": {"lr": 0.2, "weight_decay": 0.3}}})";
  auto e = engine::initialize(
      m, config(sgd),
      local({.model_parameters = {{{"fc.weight"}, 0.05, 0.1}, {{"fc.bias"}, {}, {}}}}));
  CHECK(e->get_lr() == std::vector<double>{0.05, 0.2});
  check_sgd_step(*e, m, test::make_rows(8, 1), {0.05, 0.05, 0.05, 0.2}, {0.1, 0.1, 0.1, 0.3});
}

TEST_CASE("a parameter in no group is not trained") {
  manual_seed(5);
  Regressor m;
  const char* sgd = R"({"train_micro_batch_size_per_gpu": 8, "gradient_clipping": 0,
    "optimizer": {"type": "SGD", "params": {"lr": 0.2}}})";
  auto e = engine::initialize(m, config(sgd), local({.model_parameters = {{{"fc.bias"}}}}));
  check_sgd_step(*e, m, test::make_rows(8, 1), {0, 0, 0, 0.2});
}

TEST_CASE(
    "a client factory receives the engine's groups: masters with bf16, partitions with "
    "ZeRO, and trains as the config's optimizer does") {
  // The same Adam from the config and from a client object or factory: bit-identical weights.
  const std::string base = R"({"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": true},
    "optimizer": {"type": "Adam", "params": {"lr": 0.01, "betas": [0.8, 0.9]}},
    "zero_optimization": {"stage": )";
  for (int stage : {0, 1, 2, 3}) {
    CAPTURE(stage);
    const io::TrainConfig cfg = config(base + std::to_string(stage) + "}}");
    auto run = [&](int client) {
      manual_seed(6);
      Regressor m;
      engine::InitializeOptions o = local();
      const optim::AdamOptions adam{0.8, 0.9, 1e-8, true};
      std::vector<std::vector<std::string>> seen;
      if (client == 1) {
        std::vector<optim::ParamGroup> g{{{}, {m.fc.weight, m.fc.bias}, 0.01, 0.0}};
        o.optimizer = std::make_unique<optim::Adam>(g, adam);
      } else if (client == 2) {
        o.optimizer_factory = [&](std::vector<optim::ParamGroup> g) {
          for (const auto& group : g) seen.push_back(group.names);
          return std::make_unique<optim::Adam>(std::move(g), adam);
        };
        o.model_parameters = {{{"fc.weight", "fc.bias"}}};
      } else {
        o.model_parameters = {{{"fc.weight", "fc.bias"}}};
      }
      auto e = engine::initialize(m, cfg, std::move(o));
      if (client == 2)
        CHECK(seen == std::vector<std::vector<std::string>>{{"fc.weight", "fc.bias"}});
      for (uint64_t k = 0; k < 3; ++k) {
        e->backward(e->forward(test::make_rows(8, 10 + k)));
        e->step();
      }
      e.reset();  // ZeRO-3 leaves the model gathered
      return weights(m);
    };
    const std::vector<double> from_config = run(0);
    CHECK(run(1) == from_config);
    CHECK(run(2) == from_config);
  }
}

TEST_CASE(
    "schedules: the client's replaces the config's; the config's warms up to the client "
    "optimizer's lr") {
  const char* warmup = R"({"train_micro_batch_size_per_gpu": 8,
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_num_steps": 4,
                                                 "warmup_type": "linear"}}})";
  manual_seed(7);
  {
    Regressor m;
    std::vector<optim::ParamGroup> g{{{}, {m.fc.weight, m.fc.bias}, 0.4, 0.0}};
    auto e = engine::initialize(m, config(warmup),
                                local({.optimizer = std::make_unique<optim::SGD>(g)}));
    // lr_schedules.py WarmupLR: step 0 runs at warmup_min_lr, step k at iteration k-1's
    // min + (max - min) * (k-1) / 4 with max the optimizer's lr (0.4), then 0.4.
    const double want[] = {0.0, 0.0, 0.1, 0.2, 0.3, 0.4, 0.4};
    for (double lr : want) {
      e->backward(e->forward(test::make_rows(8, 1)));
      CHECK(e->step().lr == doctest::Approx(lr).epsilon(1e-12));
    }
  }
  {
    Regressor m;
    auto e = engine::initialize(m, config(warmup),
                                local({.lr_scheduler = std::make_unique<Linear100>()}));
    for (double lr : {0.01, 0.02, 0.03}) {
      CHECK(e->get_lr() == std::vector<double>{lr, lr});  // both default groups follow it
      e->backward(e->forward(test::make_rows(8, 1)));
      CHECK(e->step().lr == doctest::Approx(lr).epsilon(1e-12));
    }
  }
}

TEST_CASE(
    "step(lr_kwargs): last_batch_iteration moves the schedule (DeepSpeed's "
    "lr_scheduler.step(last_batch_iteration))") {
  const char* warmup = R"({"train_micro_batch_size_per_gpu": 8,
    "optimizer": {"type": "SGD", "params": {"lr": 1.0}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1,
                  "warmup_num_steps": 10, "warmup_type": "linear"}}})";
  manual_seed(8);
  Regressor m;
  auto e = engine::initialize(m, config(warmup), local());
  e->backward(e->forward(test::make_rows(8, 1)));
  e->step({.last_batch_iteration = 6});
  CHECK(e->get_lr()[0] == doctest::Approx(0.6).epsilon(1e-12));  // iteration 6: 6 / 10
  e->backward(e->forward(test::make_rows(8, 2)));
  CHECK(e->step().lr == doctest::Approx(0.6).epsilon(1e-12));
  CHECK(e->get_lr()[0] == doctest::Approx(0.7).epsilon(1e-12));
}

TEST_CASE("initialize errors name what is wrong") {
  manual_seed(9);
  const io::TrainConfig cfg = config(kAdamW);
  auto fails = [&](engine::InitializeOptions o, const std::string& what) {
    Regressor m;
    CHECK_THROWS_WITH_AS(engine::initialize(m, cfg, std::move(o)), doctest::Contains(what.c_str()),
                         Error);
  };
  Regressor other;
  std::vector<optim::ParamGroup> foreign{{{}, {other.fc.weight}, 0.1, 0.0}};
  fails(local({.optimizer = std::make_unique<optim::SGD>(foreign)}),
        "the client optimizer's group 0 holds float32[1, 3] on cpu, which is not a parameter");
  fails(local({.model_parameters = {{{"fc.weight", "fc.scale"}}}}),
        "parameter group 0 names 'fc.scale', which is not a parameter of the model");
  fails(local({.model_parameters = {{{"fc.weight"}}, {{"fc.weight"}}}}),
        "parameter 'fc.weight' is in groups 0 and 1");
  {
    Regressor m;
    std::vector<optim::ParamGroup> g{{{}, {m.fc.weight}, 0.1, 0.0}};
    engine::InitializeOptions o = local({.optimizer = std::make_unique<optim::SGD>(g)});
    o.optimizer_factory = [](std::vector<optim::ParamGroup> gs) {
      return std::make_unique<optim::SGD>(std::move(gs));
    };
    CHECK_THROWS_WITH_AS(engine::initialize(m, cfg, std::move(o)),
                         doctest::Contains("a client optimizer object or a factory, not both"),
                         Error);
  }
  {
    Regressor m;
    std::vector<optim::ParamGroup> g{{{}, {m.fc.weight}, 0.1, 0.0}};
    engine::InitializeOptions o = local({.optimizer = std::make_unique<optim::SGD>(g)});
    o.model_parameters = {{{"fc.bias"}}};
    CHECK_THROWS_WITH_AS(engine::initialize(m, cfg, std::move(o)),
                         doctest::Contains("its own groups are the parameter groups"), Error);
  }
  {
    Regressor m;
    std::vector<optim::ParamGroup> g{{{}, {m.fc.weight, m.fc.bias}, 0.1, 0.0}};
    const io::TrainConfig bf16 =
        config(R"({"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": true}})");
    CHECK_THROWS_WITH_AS(
        engine::initialize(m, bf16, local({.optimizer = std::make_unique<PlainSgd>(g)})),
        doctest::Contains("optimizer PlainSgd cannot be rebuilt"), Error);
  }
}

TEST_CASE("engine.forward runs any nn::LossModel and names the batch type it cannot run") {
  manual_seed(10);
  Regressor m;
  auto e = engine::initialize(m, config(kAdamW), local());
  const Rows rows = test::make_rows(8, 1);
  CHECK(e->forward(rows).item() == m.loss(rows).item());
  struct Other {
    Tensor x;
  };
  CHECK_THROWS_WITH_AS(e->forward(Other{rows.x}),
                       doctest::Contains("does not implement nn::LossModel<"), Error);
  CHECK_THROWS_WITH_AS(e->forward(Other{rows.x}), doctest::Contains("Other>"), Error);
}

TEST_CASE("a direct loss.backward() (with scale() under fp16) gives engine.backward's results") {
  const std::string base = R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "gradient_clipping": 0.5,)";
  for (const std::string precision : {"\"fp32\": {}", "\"fp16\": {\"enabled\": true}"}) {
    for (int stage : {0, 1, 2, 3}) {
      CAPTURE(precision);
      CAPTURE(stage);
      const io::TrainConfig cfg = config(base + precision + R"(, "zero_optimization": {"stage": )" +
                                         std::to_string(stage) + "}}");
      // 0: engine.backward, 1: scale(loss).backward(), 2: loss.backward()
      auto run = [&](int direct) {
        manual_seed(11);
        Regressor m;
        auto e = engine::initialize(m, cfg, local());
        std::vector<double> losses;
        for (uint64_t k = 0; k < 6; ++k) {  // 3 optimizer steps of 2 micro-batches
          const Tensor loss = e->forward(test::make_rows(8, 30 + k));
          losses.push_back(loss.item());
          if (direct == 1)
            e->scale(loss).backward();
          else if (direct == 2)
            loss.backward();
          else
            e->backward(loss);
          e->step();
        }
        e.reset();
        std::vector<double> w = weights(m);
        w.insert(w.end(), losses.begin(), losses.end());
        return w;
      };
      const std::vector<double> engine_backward = run(0);
      CHECK(run(1) == engine_backward);
      if (precision[3] == '3') CHECK(run(2) == engine_backward);  // fp32
    }
  }
  manual_seed(12);
  Regressor m;
  auto e = engine::initialize(
      m, config(R"({"train_micro_batch_size_per_gpu": 8, "fp16": {"enabled": true}})"), local());
  CHECK_THROWS_WITH_AS(e->forward(test::make_rows(8, 1)).backward(),
                       doctest::Contains("call engine.scale(loss).backward()"), Error);
}

TEST_CASE("a client optimizer object's state is saved under the parameters' names and resumes") {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-client-opt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const io::TrainConfig cfg = config(kAdamW);
  auto make = [&](Regressor& m) {
    // Two groups built from tensors alone (no names), as a user writes them.
    std::vector<optim::ParamGroup> g{{{}, {m.fc.weight}, 0.1, 0.0}, {{}, {m.fc.bias}, 0.02, 0.0}};
    return engine::initialize(
        m, cfg, local({.optimizer = std::make_unique<optim::SGD>(g, optim::SGDOptions{0.9})}));
  };
  auto train = [](engine::Engine& e, uint64_t from, uint64_t to) {
    for (uint64_t k = from; k < to; ++k) {
      e.backward(e.forward(test::make_rows(8, 50 + k)));
      e.step();
    }
  };
  manual_seed(14);
  Regressor straight_model;
  auto straight = make(straight_model);
  train(*straight, 0, 4);
  {
    manual_seed(14);
    Regressor m;
    auto e = make(m);
    train(*e, 0, 2);
    const auto state = e->optimizer().state_dict();
    CHECK(state.count("fc.weight.momentum_buffer") == 1);
    CHECK(state.count("fc.bias.momentum_buffer") == 1);
    e->save_checkpoint(dir.string());
  }
  manual_seed(99);  // other weights: the checkpoint replaces them
  Regressor m;
  auto e = make(m);
  e->load_checkpoint(dir.string());
  train(*e, 2, 4);
  CHECK(weights(m) == weights(straight_model));
  fs::remove_all(dir);
}
