// ZeRO-3 prefetching (stage3_prefetch_bucket_size) on 1, 2 and 4 ranks: gathers started ahead
// of use give exactly the numbers of gathers made on use, and after the first (traced) step
// every gather but the first of each step is a prefetch when the bucket holds the whole
// model, also after an evaluation pass between steps.
#include <doctest/doctest.h>

#include <string>

#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

struct Run {
  std::vector<double> losses;
  std::vector<double> weights;
  std::vector<parallel::PrefetchStats> stats;  // cumulative, after each step
};

Run train(int64_t prefetch_bucket, int steps) {
  auto w = parallel::world();
  manual_seed(11);
  auto c = models::GPT2Config::named("tiny");
  c.dropout = 0.0;
  models::GPT2LMHeadModel model(c);
  const std::string cfg = R"({"train_batch_size": )" + std::to_string(2 * w->size()) +
                          R"(, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
    "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                          "reduce_bucket_size": 2000,
                          "stage3_prefetch_bucket_size": )" +
                          std::to_string(prefetch_bucket) + "}}";
  auto eng = engine::initialize(model, io::TrainConfig::parse(cfg, w->size()));
  Run r;
  for (int k = 0; k < steps; ++k) {
    Generator g(100 + static_cast<uint64_t>(k * 10 + w->rank()));
    const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    const Tensor y = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    const Tensor loss = eng->forward(models::Batch{x, y});
    eng->backward(loss);
    eng->step();
    r.losses.push_back(loss.item());
    r.stats.push_back(eng->zero_optimizer()->prefetch_stats());
    if (k == 1) {  // an evaluation pass between steps gathers on use, off the trace
      NoGradGuard no_grad;
      model.eval();
      r.losses.push_back(eng->forward(models::Batch{x, y}).item());
      model.train();
    }
  }
  eng.reset();  // gathers every parameter back for good
  for (auto& [n, t] : model.named_parameters())
    for (double v : t->to_vector()) r.weights.push_back(v);
  return r;
}

}  // namespace

TEST_CASE("ZeRO-3 prefetch: same numbers as gathering on use; later steps fully prefetched") {
  const Run on_use = train(0, 3);
  const Run whole = train(50000000, 3);
  const Run one_ahead = train(1, 3);  // one parameter in flight at a time
  CHECK(on_use.losses == whole.losses);
  CHECK(on_use.losses == one_ahead.losses);
  CHECK(on_use.weights == whole.weights);
  CHECK(on_use.weights == one_ahead.weights);

  CHECK(on_use.stats.back().prefetched == 0);
  REQUIRE(on_use.stats[0].gathers > 0);
  // Step 1 records the trace; steps 2 and 3 gather exactly as often, all but each step's
  // first gather (which starts the prefetching) ahead of use.
  const int64_t per_step = whole.stats[0].gathers;
  CHECK(whole.stats[0].prefetched == 0);
  CHECK(whole.stats[2].gathers == 3 * per_step);
  CHECK(whole.stats[2].prefetched == 2 * (per_step - 1));
  // One in flight: everything except a parameter still in use when its turn to start came.
  CHECK(one_ahead.stats[2].prefetched > per_step);
  MESSAGE("ZeRO-3 on " << parallel::world()->size() << " rank(s): " << per_step
                       << " gathers per step; prefetched with the whole-model bucket: "
                       << whole.stats[2].prefetched << " of " << whole.stats[2].gathers
                       << ", with a one-parameter bucket: " << one_ahead.stats[2].prefetched);
}

TEST_SUITE_END();
