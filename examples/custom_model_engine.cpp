// Your own model and data through the engine and its Trainer: a classifier of two interleaved
// spirals (not a transformer), its own Dataset, a client SGD optimizer with two parameter
// groups, the config's WarmupDecayLR schedule, evaluation, periodic checkpoints, and a run
// stopped at step 150 and resumed that ends exactly where a straight run does.
//   c++ custom_model_engine.cpp $(pkg-config --cflags --libs tessera) -o custom && ./custom
#include <tessera/engine/trainer.h>
#include <tessera/io/data_loader.h>
#include <tessera/nn/layers.h>
#include <tessera/nn/loss_model.h>
#include <tessera/tessera.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace ts = tessera;

// The batch type is yours: the engine moves it to the model's device through to().
struct Points {
  ts::Tensor xy;     // float32 [B, 2]
  ts::Tensor label;  // int64 [B]
  Points to(ts::Device d) const { return {xy.to(d), label.to(d)}; }
};

struct SpiralClassifier : ts::nn::LossModel<Points> {
  ts::nn::Linear fc1{this, "fc1", 2, 64};
  ts::nn::Linear fc2{this, "fc2", 64, 64};
  ts::nn::Linear out{this, "out", 64, 2};
  ts::Tensor logits(const ts::Tensor& xy) { return out(ts::tanh(fc2(ts::tanh(fc1(xy))))); }
  ts::Tensor loss(const Points& b) override { return ts::cross_entropy(logits(b.xy), b.label); }
};

// Point i of spiral i % 2, with a little deterministic jitter: a random-access Dataset.
struct Spirals : ts::io::Dataset<std::pair<std::array<float, 2>, int64_t>> {
  int64_t n;
  explicit Spirals(int64_t count) : n(count) {}
  int64_t size() const override { return n; }
  std::pair<std::array<float, 2>, int64_t> get(int64_t i) const override {
    const int64_t arm = i % 2;
    const double t = 0.25 + 3.0 * static_cast<double>(i / 2) / static_cast<double>(n / 2);
    const double angle = 2.5 * t + M_PI * static_cast<double>(arm);
    const double jitter = 0.03 * std::sin(12.9898 * static_cast<double>(i));
    return {{static_cast<float>(t * std::cos(angle) + jitter),
             static_cast<float>(t * std::sin(angle) - jitter)},
            arm};
  }
};

using Item = std::pair<std::array<float, 2>, int64_t>;

Points collate(std::vector<Item> items) {
  std::vector<double> xy;
  std::vector<int64_t> label;
  for (const auto& [p, l] : items) {
    xy.insert(xy.end(), {p[0], p[1]});
    label.push_back(l);
  }
  const int64_t b = static_cast<int64_t>(items.size());
  return {ts::from_vector(xy, {b, 2}), ts::from_vector(label, {b})};
}

const char* kConfig = R"({
  "train_batch_size": 64, "train_micro_batch_size_per_gpu": 32,
  "gradient_clipping": 1.0,
  "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.3,
                "warmup_num_steps": 30, "total_num_steps": 300, "warmup_type": "linear"}},
  "steps_per_print": 100
})";

using Loader = ts::io::RepeatingLoader<Item, Points>;

Loader loader(std::shared_ptr<const Spirals> data, bool shuffle) {
  return Loader(ts::io::DataLoader<Item, Points>(data, {32, shuffle, 7}, collate));
}

// Trains to `steps` (resuming from `resume_dir` when given), checkpointing every 50 steps into
// `dir`; returns the result and, through `accuracy`, the model's accuracy on the held-out set.
ts::engine::TrainResult run(int64_t steps, const std::string& dir, const std::string& resume_dir,
                            double* accuracy) {
  ts::manual_seed(0);
  SpiralClassifier model;
  // A client optimizer (it replaces the config's "optimizer"): SGD with momentum, the output
  // layer at a quarter of the others' learning rate. The schedule still comes from the config.
  std::vector<ts::optim::ParamGroup> groups(2);
  groups[1].lr = 0.025;
  for (auto& [name, p] : model.named_parameters()) {
    auto& g = groups[name.rfind("out.", 0) == 0 ? 1 : 0];
    g.params.push_back(*p);
  }
  groups[0].lr = 0.1;
  ts::engine::InitializeOptions init;
  init.optimizer = std::make_unique<ts::optim::SGD>(groups, ts::optim::SGDOptions{0.9});
  auto engine = ts::engine::initialize(model, ts::io::TrainConfig::parse(kConfig), std::move(init));

  auto train_set = std::make_shared<const Spirals>(2000);
  auto test_set = std::make_shared<const Spirals>(402);
  Loader train = loader(train_set, true);
  ts::engine::TrainerOptions o = ts::engine::TrainerOptions::from_config(engine->config());
  o.steps = steps;
  o.eval_interval = 100;
  o.eval_iters = 12;
  o.checkpoint_dir = dir;
  o.checkpoint_interval = 50;
  ts::engine::Trainer<Points> trainer(*engine, train, o);
  trainer.set_eval_data([&] { return std::make_unique<Loader>(loader(test_set, false)); });
  if (!resume_dir.empty()) trainer.resume(resume_dir);
  const ts::engine::TrainResult result = trainer.fit();

  ts::NoGradGuard no_grad;
  ts::io::DataLoader<Item, Points> all(test_set, {402}, collate);
  const Points p = *all.next();
  const ts::Tensor hit = ts::eq(ts::argmax(model.logits(p.xy), 1), p.label);
  *accuracy = ts::mean(hit.to(ts::DType::Float32)).item();
  return result;
}

int main() {
  const auto tmp = std::filesystem::temp_directory_path();
  const std::string straight_dir = (tmp / "tessera-spirals-straight").string();
  const std::string dir = (tmp / "tessera-spirals").string();
  std::filesystem::remove_all(straight_dir);
  std::filesystem::remove_all(dir);

  double acc_straight = 0, acc_half = 0, acc_resumed = 0;
  const auto straight = run(300, straight_dir, "", &acc_straight);
  run(150, dir, "", &acc_half);  // stops at 150 with a checkpoint there
  const auto resumed = run(300, dir, dir, &acc_resumed);

  std::printf("straight: train loss %.6f, test loss %.6f, test accuracy %.3f\n",
              straight.train_loss, straight.val_loss, acc_straight);
  std::printf("resumed at step 150: train loss %.6f, test loss %.6f, test accuracy %.3f\n",
              resumed.train_loss, resumed.val_loss, acc_resumed);
  const bool exact = resumed.train_loss == straight.train_loss &&
                     resumed.val_loss == straight.val_loss && acc_resumed == acc_straight;
  std::printf("the resumed run %s the straight one\n", exact ? "equals" : "DIFFERS FROM");
  std::filesystem::remove_all(straight_dir);
  std::filesystem::remove_all(dir);
  return exact && acc_straight > 0.9 ? 0 : 1;
}
