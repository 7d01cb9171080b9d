// `tessera bench train --preset P [--device D] [--dtype T]`: the training step of
// ../shared/reference/gpt_bench.py (tied embeddings, pre-LN blocks without biases, causal
// attention, tanh-GELU MLP, cross-entropy, AdamW lr 1e-3 betas (0.9, 0.99) wd 0.1, clip 1.0),
// run through the engine so 16-bit dtypes train as DeepSpeed's bf16/fp16 do (float32 masters),
// the model and engine assembled from a config as `tessera train` assembles them (launch/).
// Model FLOPs per token (PaLM appendix B): 6 N + 12 L T d, N = non-embedding-position
// parameters counted once (tied head included once), L layers, T context, d width; MFU is
// that rate over the device's peak for the dtype (--peak-tflops, default 989 for an H100's
// dense bf16/fp16, 495 for TF32, 67 for float32; 0 on the CPU).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/dispatch.h"
#include "tessera/engine/engine.h"
#include "tessera/io/train_config.h"
#include "tessera/launch/job.h"
#include "tessera/launch/model_build.h"
#include "tessera/ops.h"

namespace tessera::cli {

int bench_train(const Args& a) {
  struct Preset {
    int64_t vocab, block, layers, heads, dim, batch;
  };
  const std::string name = a.get("preset", "tiny");
  Preset p;
  if (name == "tiny")
    p = {65, 64, 4, 4, 128, 12};
  else if (name == "small")
    p = {65, 256, 6, 6, 384, 8};
  else if (name == "gpt2")
    p = {50304, 64, 12, 12, 768, 4};
  else if (name == "gpt2-1024")  // GPT-2 124M at its full context: the GPU benchmark
    p = {50304, 1024, 12, 12, 768, 8};
  else
    fail("bench train: unknown preset '", name, "' (tiny, small, gpt2 or gpt2-1024)");
  if (a.has("batch")) p.batch = a.get_int("batch", p.batch);
  TS_CHECK(p.batch > 0, "--batch must be positive");
  const Device device = Device::parse(a.get("device", "cpu"));
  require_usable_device(device, "--device");
  const DType dtype = dtype_from_name(a.get("dtype", "float32"));
  TS_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16,
           "--dtype: expected float32, bfloat16 or float16, got ", dtype_name(dtype));
  const int64_t steps = a.get_int("iters", 10);
  TS_CHECK(steps > 0, "--iters must be positive");

  // The preset as a training config, assembled as `tessera train` assembles one (launch/):
  // the model from the registry, on train.device, seeded by train.seed.
  nlohmann::json cfg = {
      {"train_micro_batch_size_per_gpu", p.batch},
      {"gradient_accumulation_steps", 1},
      {"gradient_clipping", 1.0},
      {"optimizer",
       {{"type", "AdamW"},
        {"params", {{"lr", 1e-3}, {"betas", {0.9, 0.99}}, {"weight_decay", 0.1}}}}},
      {"model",
       {{"type", "gpt2"},
        {"n_layer", p.layers},
        {"n_head", p.heads},
        {"n_embd", p.dim},
        {"block_size", p.block},
        {"bias", false},
        {"dropout", 0.0}}},
      {"train", {{"seed", 0}, {"device", device.str()}}}};
  if (dtype == DType::BFloat16) cfg["bf16"] = {{"enabled", true}};
  if (dtype == DType::Float16) cfg["fp16"] = {{"enabled", true}, {"loss_scale", 1024}};
  const io::TrainConfig config = launch::parse_config(cfg.dump(), 1, "bench config");
  const std::unique_ptr<models::PretrainedModel> built = launch::build_model(config, p.vocab);
  models::PretrainedModel& model = *built;
  auto engine = engine::initialize(model, config);

  Generator gen(1);
  auto tokens = [&] {
    return (rand({p.batch, p.block}, DType::Float32, Device::cpu(), &gen) *
            static_cast<double>(p.vocab))
        .to(DType::Int64)
        .to(device);
  };
  const models::Batch batch{tokens(), tokens()};
  double last_loss = 0;
  auto step = [&] {
    const Tensor loss = engine->forward(batch);
    engine->backward(loss);
    engine->step();
    last_loss = loss.item();  // also waits for the device
  };
  for (int i = 0; i < 3; ++i) step();
  kernel_profile_reset();  // TESSERA_PROFILE=1 then reports the timed steps only
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tps = static_cast<double>(p.batch * p.block) / med * 1e3;
  const double n_params = static_cast<double>(model.num_parameters() - p.block * p.dim);
  const double flops_per_token =
      6.0 * n_params + 12.0 * static_cast<double>(p.layers * p.block * p.dim);
  const double peak_default = device.is_cpu()           ? 0.0
                              : dtype != DType::Float32 ? 989.0
                              : cuda_allow_tf32()       ? 495.0
                                                        : 67.0;
  const double peak = a.has("peak-tflops") ? a.get_number("peak-tflops", 0.0) : peak_default;
  nlohmann::json j{{"preset", name},
                   {"device", device.str()},
                   {"dtype", dtype_name(dtype)},
                   {"batch", p.batch},
                   {"block", p.block},
                   {"params", model.num_parameters()},
                   {"ms_per_step", med},
                   {"tokens_per_s", tps},
                   {"model_tflops", flops_per_token * tps / 1e12},
                   {"loss", last_loss}};
  if (peak > 0) j["mfu"] = flops_per_token * tps / (peak * 1e12);
  if (device.is_cuda()) {
    const CudaMemoryStats m = cuda_memory_stats(device.index);
    j["peak_allocated_bytes"] = m.peak_allocated;
  }
  if (a.has("json"))
    std::cout << j.dump() << "\n";
  else
    std::cout << "bench train " << name << " on " << device.str() << " (" << dtype_name(dtype)
              << "): " << model.num_parameters() << " parameters, " << med << " ms/step, "
              << static_cast<int64_t>(tps) << " tokens/s"
              << (peak > 0 ? ", MFU " + std::to_string(j["mfu"].get<double>()) : std::string())
              << "\n";
  return 0;
}

}  // namespace tessera::cli
