// ZeRO-3 prefetching (stage3_prefetch_bucket_size) on 1, 2 and 4 ranks: gathers started ahead
// of use give exactly the numbers of gathers made on use, and after the first (traced) step
// every gather but the first of each step is a prefetch when the bucket holds the whole
// model, also after an evaluation pass between steps. stage3_max_reuse_distance and
// stage3_max_live_parameters change the gathers (counts derived by hand below), never the
// numbers.
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
  int64_t params = 0, padded_numel = 0;        // partitioned parameters, their gathered size
};

// `reuse`: stage3_max_reuse_distance (0: each parameter is released when another is used).
Run train(int64_t prefetch_bucket, int steps, int64_t reuse = 0, int64_t max_live = 1000000000) {
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
                          "stage3_max_reuse_distance": )" +
                          std::to_string(reuse) + R"(, "stage3_max_live_parameters": )" +
                          std::to_string(max_live) + R"(, "stage3_prefetch_bucket_size": )" +
                          std::to_string(prefetch_bucket) + "}}";
  auto eng = engine::initialize(model, io::TrainConfig::parse(cfg, w->size()));
  Run r;
  for (const auto& e : eng->zero_optimizer()->layout().entries) {
    ++r.params;
    r.padded_numel += e.shard * w->size();
  }
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

TEST_CASE("ZeRO-3 reuse distance and live parameters: fewer gathers, same numbers") {
  const Run on_use = train(0, 3);
  // Reuse distance beyond the model: from step 2 on, each parameter is gathered once, at its
  // first use, and stays until its last use (a bias that backward does not read leaves after
  // forward).
  const Run kept = train(0, 3, 1000000000);
  const Run kept_ahead = train(50000000, 3, 1000000000);
  CHECK(kept.losses == on_use.losses);
  CHECK(kept.weights == on_use.weights);
  CHECK(kept_ahead.losses == on_use.losses);
  CHECK(kept_ahead.weights == on_use.weights);
  CHECK(kept.stats[0].gathers == on_use.stats[0].gathers);  // (step 1 has no trace yet)
  CHECK(kept.stats[2].gathers - kept.stats[0].gathers == 2 * kept.params);
  CHECK(kept.stats[2].peak_live_numel <= kept.padded_numel);
  CHECK(kept.stats[2].peak_live_numel > on_use.stats[2].peak_live_numel);
  // Prefetched: every parameter but each step's first.
  CHECK(kept_ahead.stats[2].prefetched == 2 * (kept.params - 1));
  // A reuse distance of a quarter of the model: between the two extremes.
  const Run near = train(0, 3, kept.padded_numel / 4);
  CHECK(near.losses == on_use.losses);
  CHECK(near.stats[2].gathers - near.stats[0].gathers <
        on_use.stats[2].gathers - on_use.stats[0].gathers);
  CHECK(near.stats[2].gathers - near.stats[0].gathers >= 2 * kept.params);
  // stage3_max_live_parameters of one element: a parameter in use already reaches it, so
  // nothing is gathered ahead, whatever the bucket.
  const Run capped = train(50000000, 3, 0, 1);
  CHECK(capped.losses == on_use.losses);
  CHECK(capped.stats[2].prefetched == 0);
  CHECK(capped.stats[2].gathers == on_use.stats[2].gathers);
  MESSAGE("ZeRO-3 on " << parallel::world()->size() << " rank(s), " << kept.params
                       << " parameters: gathers in steps 2-3 released after use "
                       << on_use.stats[2].gathers - on_use.stats[0].gathers
                       << ", reuse distance of a quarter of the model: "
                       << near.stats[2].gathers - near.stats[0].gathers
                       << ", kept: " << kept.stats[2].gathers - kept.stats[0].gathers);
}

TEST_SUITE_END();
