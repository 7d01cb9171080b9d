// engine::Trainer with a user's own model and Dataset: a run stopped and resumed (mid-epoch,
// by interval checkpoints or by SIGINT) continues bit for bit like a straight one; the CSV
// monitor records every step and evaluation; the final evaluation is the float64 mean loss of
// the evaluation batches.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "regressor.h"
#include "tessera/engine/trainer.h"
#include "tessera/io/data_loader.h"
#include "tessera/parallel/process_group.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

// 22 examples, 4 per micro-batch: 5 batches an epoch (drop_last), 2 micro-batches a step.
const char* kTrainerConfig = R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.05, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3}},
  "steps_per_print": 100})";

using Example = std::pair<Tensor, Tensor>;  // x [3], y [1]

std::shared_ptr<const io::Dataset<Example>> examples(uint64_t seed) {
  const test::Rows all = test::make_rows(22, seed);
  return std::make_shared<io::FunctionDataset<Example>>(22, [all](int64_t i) {
    return Example{all.x.narrow(0, i, 1).reshape({3}), all.y.narrow(0, i, 1).reshape({1})};
  });
}

test::Rows collate(std::vector<Example> items) {
  std::vector<double> x, y;
  for (const auto& e : items) {
    for (double v : e.first.to_vector()) x.push_back(v);
    y.push_back(e.second.to_vector()[0]);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  return {from_vector(x, {n, 3}), from_vector(y, {n, 1})};
}

using Loader = io::RepeatingLoader<Example, test::Rows>;

Loader loader(uint64_t seed, bool shuffle) {
  return Loader(
      io::DataLoader<Example, test::Rows>(examples(seed), {4, shuffle, 5, 0, 1, true}, collate));
}

// A source that raises SIGINT while drawing its n-th batch (as Ctrl-C would arrive).
struct InterruptAt : io::BatchSource<test::Rows> {
  Loader inner;
  int64_t n, drawn = 0;
  InterruptAt(Loader l, int64_t at) : inner(std::move(l)), n(at) {}
  test::Rows next() override {
    if (drawn++ == n) std::raise(SIGINT);
    return inner.next();
  }
  nlohmann::json state() const override { return inner.state(); }
  void set_state(const nlohmann::json& s) override { inner.set_state(s); }
};

struct Seeded {
  Seeded() { manual_seed(13); }  // before the model's initialisation
};

// kTrainerConfig with more top-level keys: extra is ', "key": value, ...'.
io::TrainConfig config_with(const std::string& extra) {
  const std::string base = kTrainerConfig;
  return io::TrainConfig::parse(base.substr(0, base.rfind('}')) + extra + "}", 1);
}

struct Run {
  explicit Run(const std::string& extra_config = "")
      : engine(engine::initialize(model, config_with(extra_config), parallel::make_local_group())) {
  }
  Seeded seeded;
  test::Regressor model;
  std::unique_ptr<engine::Engine> engine;
  std::vector<double> weights() {
    std::vector<double> w = model.fc.weight.to_vector();
    w.push_back(model.fc.bias.to_vector()[0]);
    return w;
  }
};

engine::TrainerOptions options(int64_t steps, const std::string& dir = "") {
  engine::TrainerOptions o;
  o.steps = steps;
  o.eval_iters = 3;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = dir.empty() ? 0 : 3;
  o.steps_per_print = 100;
  return o;
}

fs::path temp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("tessera-trainer-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

}  // namespace

TEST_CASE("Trainer: resuming mid-epoch from an interval checkpoint continues bit for bit") {
  Run straight;
  Loader data = loader(1, true);
  engine::Trainer<test::Rows> t(*straight.engine, data, options(8));
  const engine::TrainResult want = t.fit();
  CHECK(want.step == 8);
  CHECK(want.steps_run == 8);

  const fs::path dir = temp_dir("interval");
  {
    Run first;
    Loader d = loader(1, true);
    engine::Trainer<test::Rows> t1(*first.engine, d, options(4, dir.string()));
    t1.client_state = [] { return nlohmann::json{{"note", "mine"}}; };
    t1.fit();  // a checkpoint at step 3 (interval) and none at 4
  }
  CHECK(fs::exists(dir / "step3"));
  CHECK(!fs::exists(dir / "step4"));
  Run resumed;
  Loader d = loader(1, true);
  engine::Trainer<test::Rows> t2(*resumed.engine, d, options(8));
  CHECK(t2.resume(dir.string()) == nlohmann::json{{"note", "mine"}});
  // Step 3 ended at micro-batch 6: epoch 1 (5 batches each), batch 1.
  CHECK(d.state() == nlohmann::json{{"epoch", 1}, {"batch", 1}});
  const engine::TrainResult got = t2.fit();
  CHECK(got.steps_run == 5);
  CHECK(got.train_loss == want.train_loss);
  CHECK(resumed.weights() == straight.weights());
  fs::remove_all(dir);
}

TEST_CASE("Trainer: SIGINT stops after the step with a checkpoint, and the run resumes exactly") {
  Run straight;
  Loader data = loader(2, true);
  engine::Trainer<test::Rows>(*straight.engine, data, options(6)).fit();

  const fs::path dir = temp_dir("signal");
  {
    Run first;
    InterruptAt d(loader(2, true), 5);  // during step 2's first micro-batch (micro-batch 5)
    engine::TrainerOptions o = options(6);
    o.save_dir = dir.string();
    const engine::TrainResult r = engine::Trainer<test::Rows>(*first.engine, d, o).fit();
    CHECK(r.stop_signal == SIGINT);
    CHECK(r.step == 3);  // the step in progress completes
    CHECK(std::ifstream(dir / "latest").good());
  }
  CHECK(fs::exists(dir / "step3"));
  Run resumed;
  Loader d = loader(2, true);
  engine::Trainer<test::Rows> t(*resumed.engine, d, options(6));
  t.resume(dir.string());
  t.fit();
  CHECK(resumed.weights() == straight.weights());
  fs::remove_all(dir);
}

TEST_CASE(
    "Trainer: CSV monitor in DeepSpeed's layout (samples on x), the final evaluation "
    "(float64 reference)") {
  const fs::path dir = temp_dir("csv");
  Run run(R"(, "csv_monitor": {"enabled": true, "output_path": ")" + dir.string() +
          R"(", "job_name": "job"})");
  Loader data = loader(3, true);
  engine::TrainerOptions o = options(4);
  o.eval_interval = 2;
  engine::Trainer<test::Rows> t(*run.engine, data, o);
  t.set_eval_data([] { return std::make_unique<Loader>(loader(4, false)); });
  const engine::TrainResult r = t.fit();
  // Evaluation: the first 3 unshuffled batches of 4 examples, MSE in float64 with the final
  // weights.
  const test::Rows all = test::make_rows(22, 4);
  const std::vector<double> x = all.x.to_vector(), y = all.y.to_vector();
  const std::vector<double> w = run.weights();
  double want = 0;
  for (int i = 0; i < 12; ++i) {
    const double err = w[0] * x[i * 3] + w[1] * x[i * 3 + 1] + w[2] * x[i * 3 + 2] + w[3] - y[i];
    want += err * err / 12.0;
  }
  CHECK(r.val_loss == doctest::Approx(want).epsilon(1e-6));
  auto lines = [&](const std::string& file) {
    std::ifstream f(dir / "job" / file);
    std::vector<std::string> out;
    for (std::string l; std::getline(f, l);) out.push_back(l);
    return out;
  };
  // deepspeed/monitor/csv_monitor.py: header "step,<last part of the name>", x = samples (8 a
  // step here).
  const auto train_loss = lines("Train_Samples_train_loss.csv");
  REQUIRE(train_loss.size() == 5);
  CHECK(train_loss[0] == "step,train_loss");
  CHECK(train_loss[4].rfind("32,", 0) == 0);
  CHECK(std::stod(train_loss[4].substr(3)) == doctest::Approx(r.train_loss).epsilon(1e-8));
  // The engine's: after each step the next step's lr (WarmupLR, log warm-up over 3 steps to
  // 0.05: DeepSpeed's get_lr() at iteration k - 1 after step k).
  const auto lr = lines("Train_Samples_lr.csv");
  REQUIRE(lr.size() == 5);
  CHECK(lr[0] == "step,lr");
  const double want_lr[] = {0.0, 0.05 * std::log(2.0) / std::log(3.0), 0.05, 0.05};
  for (int k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(lr[k + 1].rfind(std::to_string(8 * (k + 1)) + ",", 0) == 0);
    CHECK(std::stod(lr[k + 1].substr(lr[k + 1].find(',') + 1)) ==
          doctest::Approx(want_lr[k]).epsilon(1e-8));
  }
  const auto val = lines("Eval_val_loss.csv");
  REQUIRE(val.size() == 3);  // header, step 2 (interval), step 4 (the end)
  CHECK(val[0] == "step,val_loss");
  CHECK(val[1].rfind("16,", 0) == 0);
  CHECK(std::stod(val[2].substr(3)) == doctest::Approx(r.val_loss).epsilon(1e-8));
  CHECK(!fs::exists(dir / "job" / "Train_Samples_loss_scale.csv"));  // fp16 only
  fs::remove_all(dir);
}

TEST_CASE("Trainer: errors name the option; a checkpoint without a data position resumes") {
  Run run;
  Loader data = loader(1, true);
  engine::TrainerOptions o = options(4);
  o.checkpoint_interval = 2;
  CHECK_THROWS_WITH_AS(engine::Trainer<test::Rows>(*run.engine, data, o),
                       doctest::Contains("checkpoint_interval 2 needs a checkpoint_dir"), Error);
  // A checkpoint without a data position (saved by the engine alone): weights and steps load,
  // the data stays where it is (with a warning).
  const fs::path dir = temp_dir("plain");
  fs::create_directories(dir);
  run.engine->save_checkpoint(dir.string(), "plain", {{"mine", 1}});
  data.next();
  engine::Trainer<test::Rows> t(*run.engine, data, options(4));
  CHECK(t.resume(dir.string()).is_null());
  CHECK(data.state() == nlohmann::json{{"epoch", 0}, {"batch", 1}});
  fs::remove_all(dir);
}

TEST_CASE(
    "deepspeed_io: micro-batches of the config's size, shuffled for training, "
    "dataloader_drop_last") {
  Run run;  // micro-batch 4
  auto data = examples(1);
  auto train = run.engine->deepspeed_io<Example, test::Rows>(data, collate);
  CHECK(train.size() == 6);  // ceil(22 / 4): DeepSpeed's default keeps the short last batch
  const test::Rows first = *train.next();
  CHECK(first.x.shape() == Shape{4, 3});
  auto eval = run.engine->deepspeed_io<Example, test::Rows>(data, collate, /*train=*/false);
  const std::vector<double> in_order =
      collate({data->get(0), data->get(1), data->get(2), data->get(3)}).x.to_vector();
  CHECK(eval.next()->x.to_vector() == in_order);
  CHECK(first.x.to_vector() != in_order);  // shuffled
  Run dropping(R"(, "dataloader_drop_last": true)");
  CHECK(dropping.engine->deepspeed_io<Example, test::Rows>(data, collate).size() == 5);
}

TEST_CASE(
    "wall_clock_breakdown: the engine's timers per step to the monitors, nested as "
    "DeepSpeed's (bwd_inner and bwd_allreduce inside bwd, all inside the step)") {
  const fs::path dir = temp_dir("timers");
  Run run(R"(, "wall_clock_breakdown": true, "memory_breakdown": true,
          "csv_monitor": {"enabled": true, "output_path": ")" +
          dir.string() + R"(", "job_name": "job"})");
  Loader data = loader(5, true);
  const engine::TrainResult r = engine::Trainer<test::Rows>(*run.engine, data, options(4)).fit();
  auto column = [&](const std::string& event) {
    std::ifstream f(dir / "job" / ("Train_Samples_elapsed_time_ms_" + event + ".csv"));
    std::vector<double> values;
    std::string line;
    std::getline(f, line);
    CHECK(line == "step,elapsed_time_ms_" + event);
    for (int64_t samples = 8; std::getline(f, line); samples += 8) {
      CHECK(line.rfind(std::to_string(samples) + ",", 0) == 0);
      values.push_back(std::stod(line.substr(line.find(',') + 1)));
    }
    return values;
  };
  const auto fwd = column("forward"), bwd = column("backward"), inner = column("backward_inner"),
             reduce = column("backward_allreduce"), step = column("step");
  REQUIRE(fwd.size() == 4);
  double total = 0;
  for (size_t k = 0; k < 4; ++k) {
    CAPTURE(k);
    CHECK(fwd[k] > 0);
    CHECK(inner[k] > 0);
    CHECK(reduce[k] >= 0);
    CHECK(inner[k] + reduce[k] <= bwd[k] + 1e-6);
    total += fwd[k] + bwd[k] + step[k];
  }
  CHECK(total <= r.seconds * 1000 + 1e-6);  // the Trainer's clock brackets every interval
  fs::remove_all(dir);
}

TEST_CASE("host allocator statistics: allocated bytes and their peak") {
  const AllocatorStats before = allocator_for(DeviceType::CPU).stats();
  allocator_for(DeviceType::CPU).reset_peak();
  {
    Tensor big = Tensor::empty({1 << 20}, DType::Float32);  // 4 MiB, more than any cached block
    const AllocatorStats during = allocator_for(DeviceType::CPU).stats();
    CHECK(during.allocated >= before.allocated + (4 << 20));
    CHECK(during.peak_allocated >= during.allocated);
  }
  const AllocatorStats after = allocator_for(DeviceType::CPU).stats();
  CHECK(after.allocated <= before.allocated);
  CHECK(after.peak_allocated >= before.allocated + (4 << 20));
}
