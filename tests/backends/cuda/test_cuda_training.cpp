// Training on the GPU through the engine: the same program as on the CPU, moved by
// model.to(cuda). float32 follows the CPU's losses; bf16 and fp16 (float32 masters, dynamic
// loss scaling with overflow skips) stay close to them; FP8 follows the CPU's FP8 run; runs
// repeat bit for bit.
#include <doctest/doctest.h>

#include "skip.h"

#include <cmath>

#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/optim/optimizer.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

struct Run {
  std::vector<double> losses;
  int64_t skipped = 0;
  double final_scale = 0;
};

Run train(Device device, const std::string& precision, int steps = 12) {
  manual_seed(3);
  models::GPT2Config c;
  c.vocab_size = 97, c.n_positions = 32, c.n_layer = 2, c.n_head = 4, c.n_embd = 64;
  c.dropout = 0.1;  // the Philox stream is the same on both devices
  models::GPT2LMHeadModel model(c);
  model.to(device);
  std::string cfg = R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 3, "warmup_max_lr": 3e-3}})";
  if (precision == "bf16" || precision == "bf16+fp8") cfg += R"(, "bf16": {"enabled": true})";
  if (precision == "fp8" || precision == "bf16+fp8") cfg += R"(, "fp8": {"enabled": true})";
  if (precision == "fp16")
    cfg += R"(, "fp16": {"enabled": true, "initial_scale_power": 40, "loss_scale_window": 4})";
  cfg += "}";
  auto engine = engine::initialize(model, io::TrainConfig::parse(cfg));
  Generator gen(11);
  Run r;
  for (int s = 0; s < steps; ++s) {
    for (int micro = 0; micro < 2; ++micro) {
      const Tensor x = (rand({4, 32}, DType::Float32, Device::cpu(), &gen) * 97.0).to(DType::Int64);
      const Tensor y = (rand({4, 32}, DType::Float32, Device::cpu(), &gen) * 97.0).to(DType::Int64);
      const Tensor loss = engine->forward(models::Batch{x, y});
      engine->backward(loss);
      engine->step();
      if (micro == 1) r.losses.push_back(loss.item());
    }
  }
  r.skipped = engine->skipped_steps();
  r.final_scale = engine->loss_scale();
  return r;
}

double worst_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double w = 0;
  for (size_t i = 0; i < a.size(); ++i) w = std::max(w, std::abs(a[i] - b[i]) / std::abs(b[i]));
  return w;
}

}  // namespace

TEST_CASE("cuda training: float32 follows the CPU run step for step and repeats exactly" *
          test::gpu_required()) {
  const Run cpu = train(Device::cpu(), "fp32");
  const Run gpu = train(Device::cuda(0), "fp32");
  const Run again = train(Device::cuda(0), "fp32");
  CHECK(worst_rel(gpu.losses, cpu.losses) < 1e-4);
  CHECK(gpu.losses == again.losses);
}

TEST_CASE("cuda training: bf16 and fp16 with float32 masters stay near the float32 run" *
          test::gpu_required()) {
  const Run ref = train(Device::cpu(), "fp32");
  const Run bf16 = train(Device::cuda(0), "bf16");
  CHECK(worst_rel(bf16.losses, ref.losses) < 3e-2);
  CHECK(bf16.losses == train(Device::cuda(0), "bf16").losses);
  // fp16 starts at a loss scale of 2^40: the first steps overflow and are skipped, on the
  // device as on the CPU, then the scale settles and training proceeds.
  const Run cpu16 = train(Device::cpu(), "fp16");
  const Run gpu16 = train(Device::cuda(0), "fp16");
  CHECK(gpu16.skipped > 0);
  CHECK(gpu16.skipped == cpu16.skipped);
  CHECK(gpu16.final_scale == cpu16.final_scale);
  CHECK(worst_rel(gpu16.losses, cpu16.losses) < 3e-2);
}

TEST_CASE("cuda training: FP8 follows the CPU's FP8 run, and stays near bf16" *
          test::gpu_required()) {
  // The same FP8 numbers on both devices (the cast kernels agree bit for bit); the GEMMs'
  // float32 sums differ in order, which may move a number across a rounding boundary.
  const Run cpu = train(Device::cpu(), "fp8");
  const Run gpu = train(Device::cuda(0), "fp8");
  CHECK(worst_rel(gpu.losses, cpu.losses) < 1e-3);
  CHECK(gpu.losses == train(Device::cuda(0), "fp8").losses);
  const Run bf16 = train(Device::cuda(0), "bf16");
  const Run bf16_fp8 = train(Device::cuda(0), "bf16+fp8");
  CHECK(worst_rel(bf16_fp8.losses, bf16.losses) < 3e-2);
}
