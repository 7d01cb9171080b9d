// The bare engine loop with a model of your own: DeepSpeed's forward / backward / step, a JSON
// config in DeepSpeed's schema, and checkpoints that resume exactly.
//   c++ train_loop.cpp $(pkg-config --cflags --libs tessera) -o train_loop && ./train_loop
// Fits y = 0.8 tanh(3x) with a small MLP (AdamW, warm-up schedule, 2 micro-batches per step),
// saves after 30 steps, resumes in a fresh engine and checks that the next 30 steps give the
// losses of a straight run, bit for bit.
#include <tessera/engine/engine.h>
#include <tessera/nn/layers.h>
#include <tessera/nn/loss_model.h>
#include <tessera/tessera.h>

#include <cstdio>
#include <filesystem>
#include <vector>

namespace ts = tessera;

struct Points {
  ts::Tensor x, y;  // [32, 1] each
};

// An nn::LossModel of your batch type: engine->forward(batch) runs its loss.
struct Regressor : ts::nn::LossModel<Points> {
  ts::nn::Linear fc1{this, "fc1", 1, 64};
  ts::nn::Linear fc2{this, "fc2", 64, 1};
  ts::Tensor loss(const Points& b) override {
    const ts::Tensor err = fc2(ts::gelu(fc1(b.x))) - b.y;
    return ts::mean(err * err);
  }
};

const char* kConfig = R"({
  "train_batch_size": 64, "train_micro_batch_size_per_gpu": 32,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01,
                                                "warmup_num_steps": 10}}
})";

// One micro-batch: 32 points drawn from a generator seeded by the micro-step, so a resumed
// run sees the data a straight one does.
ts::Tensor train_micro_step(ts::engine::Engine& engine, int64_t micro) {
  ts::Generator g(1000 + static_cast<uint64_t>(micro));
  const ts::Tensor x = ts::rand({32, 1}, ts::DType::Float32, ts::Device::cpu(), &g) * 2.0 - 1.0;
  const ts::Tensor y = ts::tanh(x * 3.0) * 0.8;
  const ts::Tensor loss = engine.forward(Points{x, y});  // the model's loss on the batch
  engine.backward(loss);  // / gradient_accumulation_steps, then backward
  engine.step();          // after every micro-batch; updates every 2nd
  return loss;
}

// Trains from micro-step `from` to `to`, returning each optimizer step's mean loss.
std::vector<double> train(ts::engine::Engine& engine, int64_t from, int64_t to) {
  std::vector<double> losses;
  double window = 0;
  for (int64_t micro = from; micro < to; ++micro) {
    window += train_micro_step(engine, micro).item() / 2;
    if (micro % 2 == 1) {
      losses.push_back(window);
      window = 0;
    }
  }
  return losses;
}

int main() {
  const auto config = ts::io::TrainConfig::parse(kConfig);
  const std::string dir = (std::filesystem::temp_directory_path() / "tessera-train-loop").string();
  std::filesystem::remove_all(dir);

  ts::manual_seed(0);
  Regressor straight_model;
  auto straight = ts::engine::initialize(straight_model, config);
  const std::vector<double> all = train(*straight, 0, 120);
  std::printf("straight: step 1 loss %.4f, step 60 loss %.4f\n", all.front(), all.back());

  ts::manual_seed(0);
  Regressor model;
  auto engine = ts::engine::initialize(model, config);
  train(*engine, 0, 60);
  engine->save_checkpoint(dir, "", {{"micro_step", 60}});  // tag "global_step30"

  ts::manual_seed(123);  // a different init: the checkpoint replaces it
  Regressor resumed_model;
  auto resumed = ts::engine::initialize(resumed_model, config);
  const auto [path, client_state] = resumed->load_checkpoint(dir);
  const int64_t micro = client_state["micro_step"];
  std::printf("resumed from %s at global step %lld, lr %.5f\n", path.c_str(),
              static_cast<long long>(resumed->global_steps()), resumed->get_lr()[0]);
  const std::vector<double> rest = train(*resumed, micro, 120);

  bool exact = rest.size() == 30;
  for (size_t i = 0; exact && i < rest.size(); ++i) exact = rest[i] == all[30 + i];
  std::printf("resumed: step 60 loss %.4f; steps 31-60 %s the straight run\n", rest.back(),
              exact ? "equal" : "DIFFER FROM");
  std::filesystem::remove_all(dir);
  return exact && all.back() < 0.1 * all.front() ? 0 : 1;
}
