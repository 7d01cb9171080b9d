// ZeRO's communication buffers stay bounded by the bucket sizes however large the model
// grows, publishing in all-gather chunks gives the same parameters as one all-gather, and a
// float32 model keeps no second copy of its weights (run at 1, 2 and 4 ranks by mpirun).
#include <doctest/doctest.h>

#include <algorithm>

#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/zero_optimizer.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

std::vector<std::pair<std::string, Shape>> gpt2_shapes(int64_t n_layer) {
  auto c = models::GPT2Config::named("tiny");
  c.n_layer = n_layer;
  c.n_embd = 64;
  models::GPT2LMHeadModel m(c);
  std::vector<std::pair<std::string, Shape>> out;
  for (auto& [n, t] : m.named_parameters()) out.emplace_back(n, t->shape());
  return out;
}

}  // namespace

TEST_CASE("ZeRO buffers are bounded by the bucket sizes as the model grows") {
  parallel::ZeroOptions o;
  o.reduce_bucket_size = 30000;
  o.allgather_bucket_size = 50000;
  o.prefetch_bucket_size = 40000;
  o.max_reuse_distance = 60000;
  o.param_persistence_threshold = 100;
  for (int world : {1, 2, 4, 8}) {
    for (int stage : {1, 2, 3}) {
      o.stage = stage;
      std::vector<int64_t> bounds;
      for (int64_t layers : {4, 16, 64}) {
        const parallel::ShardLayout layout(gpt2_shapes(layers), world);
        int64_t max_shard = 0;
        for (const auto& e : layout.entries) max_shard = std::max(max_shard, e.shard);
        // Two reduce-scatter slots of a bucket (at most reduce_bucket_size plus one parameter,
        // as world * shard elements) in and out; one all-gather chunk in and out; prefetched
        // parameters up to the bucket size plus one; parameters kept for reuse up to the reuse
        // distance plus one (bf16 model and communication: 2 bytes).
        const int64_t bound = 2 * (o.reduce_bucket_size / world + max_shard) * (world + 1) * 2 +
                              (o.allgather_bucket_size / world) * (world + 1) * 2 +
                              (stage == 3 ? (o.prefetch_bucket_size + max_shard * world) * 2 : 0) +
                              (stage == 3 ? (o.max_reuse_distance + max_shard * world) * 2 : 0);
        const int64_t bytes =
            parallel::zero_buffer_bytes(layout, o, DType::BFloat16, DType::BFloat16);
        INFO("world ", world, " stage ", stage, " layers ", layers, " (", layout.total_numel(),
             " parameters)");
        CHECK(bytes <= bound);
        if (layers > 4) CHECK(bytes < layout.total_numel() * 2);  // below the 16-bit model
        bounds.push_back(bound);
      }
      // The bound depends on the bucket sizes and the largest parameter, not on the model's
      // size: 64 layers need no larger buffers than 4.
      CHECK(bounds.front() == bounds.back());
    }
  }
}

TEST_CASE("publishing in all-gather chunks gives the parameters one all-gather gives") {
  auto run = [](int64_t allgather, int stage) {
    manual_seed(4);
    auto c = models::GPT2Config::named("tiny");
    models::GPT2LMHeadModel model(c);
    const std::string cfg =
        R"({"train_batch_size": )" + std::to_string(2 * parallel::world()->size()) +
        R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
        "zero_optimization": {"stage": )" +
        std::to_string(stage) + R"(, "allgather_bucket_size": )" + std::to_string(allgather) + "}}";
    auto engine = engine::initialize(model, io::TrainConfig::parse(cfg, parallel::world()->size()));
    for (int k = 0; k < 3; ++k) {
      Generator g(50 + static_cast<uint64_t>(k));
      const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
      engine->backward(engine->forward(models::Batch{x, x}));
      engine->step();
    }
    std::vector<double> values;
    for (auto& [n, t] : model.named_parameters())
      for (double v : t->to_vector()) values.push_back(v);
    return values;
  };
  for (int stage : {1, 2}) {
    INFO("stage ", stage);
    CHECK(run(7, stage) == run(500000000, stage));  // 7 elements per gather: many chunks
  }
}

TEST_CASE("a float32 model is its own master at ZeRO-1/2: no second copy of the weights") {
  manual_seed(4);
  models::GPT2LMHeadModel model(models::GPT2Config::named("tiny"));
  const int world = parallel::world()->size();
  for (int stage : {1, 2}) {
    auto engine =
        engine::initialize(model, io::TrainConfig::parse(R"({"train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": )" + std::to_string(stage) +
                                                             "}}",
                                                         world));
    const Tensor x = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
    engine->backward(engine->forward(models::Batch{x, x}));
    engine->step();  // the moments exist from the first step on
    const parallel::MemoryStats m = engine->memory();
    const parallel::ShardLayout& layout = engine->zero_optimizer()->layout();
    int64_t padded = 0;
    for (const auto& e : layout.entries) padded += e.shard * world;
    CHECK(m.params == padded * 4);                         // the weights, once
    CHECK(m.optimizer == 2 * layout.partition_numel * 4);  // Adam's two moments only
  }
}

TEST_SUITE_END();
