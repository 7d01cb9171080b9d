// The autotuner's search space and rules (experiment/autotuner.h): which points it sizes, which
// the memory limit prunes, which it keeps per ZeRO stage, fast mode's variants, early stopping;
// and its config section's errors. (The search itself: tests/tools/autotune.sh.)
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/experiment/autotuner.h"
#include "tessera/io/train_config.h"

using namespace tessera;
using json = nlohmann::json;

namespace {

json small_config(json autotuning = json::object()) {
  return {{"train_batch_size", 8},
          {"model",
           {{"type", "gpt2"}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}}},
          {"data", {{"path", TESSERA_FIXTURES_DIR "/corpus.txt"}, {"tokenizer", "char"}}},
          {"autotuning", autotuning}};
}

}  // namespace

TEST_CASE(
    "autotune sizes every ZeRO stage at the micro-batches that divide the batch, and prunes "
    "what does not fit") {
  const json c = small_config({{"num_tuning_micro_batch_sizes", 2}});
  const auto all = experiment::autotune_points(c.dump(), "c.json", 1, int64_t{1} << 40);
  // Micro-batches 1, 2, 4, 8 divide 8: each stage keeps its two largest.
  REQUIRE(all.size() == 4 * 2);
  for (int stage = 0; stage < 4; ++stage) {
    CHECK(all[2 * stage].stage == stage);
    CHECK(all[2 * stage].micro_batch == 4);
    CHECK(all[2 * stage].accumulation == 2);
    CHECK(all[2 * stage + 1].micro_batch == 8);
    CHECK(all[2 * stage + 1].accumulation == 1);
    CHECK(all[2 * stage].name == "z" + std::to_string(stage) + "_mbs4_gas2");
    CHECK(all[2 * stage].tuned_keys["zero_optimization"]["stage"] == stage);
  }
  for (const auto& p : all) CHECK(p.fits);
  // A larger micro-batch keeps more activations: a limit between mbs 4's and 8's prediction
  // prunes 8 and keeps 2 (the next largest that fits) for stage 0.
  const int64_t limit = (all[0].predicted_bytes + all[1].predicted_bytes) / 2;
  REQUIRE(all[1].predicted_bytes > all[0].predicted_bytes);
  const auto some = experiment::autotune_points(c.dump(), "c.json", 1, limit);
  std::vector<std::string> kept, pruned;
  for (const auto& p : some) {
    CHECK(p.fits == (p.predicted_bytes <= limit));
    (p.fits ? kept : pruned).push_back(p.name);
  }
  CHECK(std::find(kept.begin(), kept.end(), "z0_mbs4_gas2") != kept.end());
  CHECK(std::find(kept.begin(), kept.end(), "z0_mbs2_gas4") != kept.end());
  CHECK(std::find(pruned.begin(), pruned.end(), "z0_mbs8_gas1") != pruned.end());
  // fast: false adds reduce_bucket_size x overlap_comm variants to stages 1-3.
  const auto slow = experiment::autotune_points(
      small_config({{"num_tuning_micro_batch_sizes", 1}, {"fast", false}}).dump(), "c.json", 1,
      int64_t{1} << 40);
  CHECK(slow.size() == 1 + 3 * 4);
  CHECK(slow[1].name == "z1_mbs8_gas1_rbs50000000_overlap");
  CHECK(slow[1].tuned_keys["zero_optimization"]["overlap_comm"] == true);
}

TEST_CASE("autotune's early stopping counts the trials since the best") {
  using experiment::autotune_stale;
  CHECK(!autotune_stale({}, 1, "throughput"));
  CHECK(!autotune_stale({5, 6, 7}, 1, "throughput"));
  CHECK(autotune_stale({5, 7, 6}, 1, "throughput"));
  CHECK(!autotune_stale({5, 7, 6}, 2, "throughput"));
  CHECK(autotune_stale({5, 7, 6, 6.5}, 2, "throughput"));
  CHECK(autotune_stale({0.5, 0.7}, 1, "latency"));  // smaller is better
  CHECK(!autotune_stale({0.7, 0.5}, 1, "latency"));
}

TEST_CASE("the autotuning section's errors name the key") {
  auto error_of = [](json section, int ranks = 1) {
    try {
      io::TrainConfig::parse(small_config(std::move(section)).dump(), ranks, "c.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of({{"tuner_type", "model_based"}})
            .find("'autotuning.tuner_type' is \"model_based\"") != std::string::npos);
  CHECK(error_of({{"metric", "flops"}}).find("'autotuning.metric' is \"flops\"") !=
        std::string::npos);
  CHECK(error_of({{"end_profile_step", 2}, {"start_profile_step", 2}})
            .find("'autotuning.end_profile_step' is 2, expected more than start_profile_step") !=
        std::string::npos);
  CHECK(error_of({{"arg_mappings", {{"train_micro_batch_size_per_gpu", "--batch"}}}})
            .find("'autotuning.arg_mappings' is not supported") != std::string::npos);
  CHECK(error_of({{"mp_size", 2}}).find("'autotuning.mp_size' is 2") != std::string::npos);
  CHECK(error_of({{"max_train_batch_size", 4}}).find("train_batch_size 8 is outside") !=
        std::string::npos);
  const json piped = [] {
    json c = small_config();
    c["pipeline"] = {{"stages", 2}};
    return c;
  }();
  CHECK_THROWS_WITH_AS(experiment::autotune_points(piped.dump(), "p.json", 2, int64_t{1} << 40),
                       doctest::Contains("pipeline.stages is 2"), Error);
  CHECK_THROWS_WITH_AS(
      experiment::autotune_points(small_config({{"min_train_micro_batch_size_per_gpu", 3},
                                                {"max_train_micro_batch_size_per_gpu", 3}})
                                      .dump(),
                                  "c.json", 1, int64_t{1} << 40),
      doctest::Contains("no micro-batch size in autotuning's [3, 3] divides the train batch 8"),
      Error);
}
