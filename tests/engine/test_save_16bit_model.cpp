// save_16bit_model under ZeRO-3 on 1, 2 and 4 ranks gathers every parameter: the file holds
// exactly what the checkpoint's shards hold (the float32 masters, in the compute dtype),
// written by rank 0 alone while every rank takes part in the gathers.
#include <doctest/doctest.h>

#include <filesystem>

#include "shared_temp_dir.h"
#include "tessera/engine/engine.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_checkpoint.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
namespace fs = std::filesystem;

namespace {

void check_16bit_model(const char* dtype_section, DType want) {
  auto w = parallel::world();
  const fs::path dir = test::shared_temp_dir("16bit");
  manual_seed(11);
  auto c = models::GPT2Config::named("tiny");
  c.dropout = 0.0;
  models::GPT2LMHeadModel model(c);
  const std::string cfg =
      R"({"train_batch_size": )" + std::to_string(2 * w->size()) + ", " + dtype_section + R"(
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "stage3_gather_16bit_weights_on_model_save": true}})";
  auto eng = engine::initialize(model, io::TrainConfig::parse(cfg, w->size()));
  for (int k = 0; k < 2; ++k) {
    Generator g(100 + static_cast<uint64_t>(k * 10 + w->rank()));
    const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    eng->backward(eng->forward(models::Batch{x, x}));
    eng->step();
  }
  CHECK(eng->save_16bit_model(dir.string(), "weights.safetensors"));
  eng->save_checkpoint(dir.string(), "ckpt");
  if (w->rank() == 0) {
    const auto file = io::load_safetensors((dir / "weights.safetensors").string());
    const auto shards = parallel::consolidate_zero_checkpoint((dir / "ckpt").string());
    CHECK(file.size() == model.named_parameters().size() + model.named_buffers(true).size());
    for (const auto& entry : shards.masters) {
      const std::string& name = entry.first;  // (not a structured binding: CAPTURE is a lambda)
      CAPTURE(name);
      REQUIRE(file.count(name));
      CHECK(file.at(name).dtype() == want);
      CHECK(file.at(name).to_vector() == entry.second.to(want).to_vector());
    }
    fs::remove_all(dir);
  }
  w->barrier();
}

}  // namespace

TEST_CASE("save_16bit_model at ZeRO-3 gathers what the checkpoint's shards hold") {
  check_16bit_model(R"("bf16": {"enabled": true},)", DType::BFloat16);
  check_16bit_model("", DType::Float32);
}

TEST_SUITE_END();
