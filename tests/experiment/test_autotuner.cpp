// The autotuner's search space and rules (experiment/autotuner.h): which points it sizes, which
// the memory limit prunes, which it keeps per ZeRO stage, fast mode's variants, early stopping;
// and its config section's errors. (The search itself: tests/tools/autotune.sh.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/experiment/autotuner.h"
#include "tessera/experiment/search_method.h"
#include "tessera/io/train_config.h"
#include "tessera/trial/experiment_config.h"

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
  CHECK(error_of({{"tuner_type", "bayesian"}}).find("'autotuning.tuner_type' is \"bayesian\"") !=
        std::string::npos);
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

namespace {

// The autotune searcher driven like the runner drives it: each created trial "runs" and reports
// `metric_of` its point, one at a time. Returns the points in the order they ran.
std::vector<std::string> drive(const std::string& tuner, int64_t trials, int64_t patience,
                               const std::vector<std::string>& points,
                               const std::function<double(const std::string&)>& metric_of) {
  std::string yaml =
      "name: t\nentrypoint: builtin:gpt2\nhyperparameters:\n  config:\n"
      "    type: categorical\n    vals: [";
  for (size_t i = 0; i < points.size(); ++i) yaml += (i ? ", " : "") + points[i];
  yaml +=
      "]\nsearcher: {name: autotune, metric: throughput, smaller_is_better: false, "
      "max_length: {batches: 4}, tuner_type: " +
      tuner + ", tuner_num_trials: " + std::to_string(trials) +
      ", tuner_early_stopping: " + std::to_string(patience) + "}\n";
  auto search = experiment::make_search_method(trial::ExperimentConfig::parse(yaml, "t.yaml"));
  std::vector<experiment::Action> pending = search->initial_trials();
  std::vector<std::string> ran;
  while (!pending.empty()) {
    REQUIRE(pending.size() == 1);  // one trial at a time
    const experiment::Action a = pending.front();
    const std::string point = a.hparams["config"];
    ran.push_back(point);
    search->trial_created(a.request_id);
    search->validation_completed(a.request_id, 4, metric_of(point));
    // (a restart of the runner between trials changes nothing)
    const nlohmann::json state = search->snapshot();
    search = experiment::make_search_method(trial::ExperimentConfig::parse(yaml, "t.yaml"));
    search->restore(state);
    pending = search->trial_exited(a.request_id);
  }
  return ran;
}

std::vector<std::string> space() {
  std::vector<std::string> out;
  for (int stage = 0; stage < 4; ++stage)
    for (int m : {1, 2, 4, 8, 16, 32})
      out.push_back("z" + std::to_string(stage) + "_mbs" + std::to_string(m) + "_gas" +
                    std::to_string(64 / m) + ".json");
  return out;
}

// A smooth made-up throughput: rises with the micro-batch and bends past 16; ZeRO stages cost.
double made_up(const std::string& point) {
  const int stage = point[1] - '0';
  const double m = std::stod(point.substr(point.find("mbs") + 3));
  const double lm = std::log2(m);
  return 1000.0 * (1 + 0.9 * lm - 0.12 * lm * lm) * (1 - 0.06 * stage);
}

}  // namespace

TEST_CASE(
    "the autotune searcher: gridsearch in order, random a permutation, model_based finds "
    "the best of 24 points in at most half the trials") {
  const auto points = space();
  CHECK(drive("gridsearch", 100, 100, points, made_up) == points);
  auto shuffled = drive("random", 100, 100, points, made_up);
  CHECK(shuffled != points);
  std::sort(shuffled.begin(), shuffled.end());
  auto sorted = points;
  std::sort(sorted.begin(), sorted.end());
  CHECK(shuffled == sorted);
  CHECK(drive("random", 5, 100, points, made_up).size() == 5);
  // The best by the made-up metric, against what model_based ran in 12 trials.
  const std::string best = *std::max_element(
      points.begin(), points.end(),
      [](const std::string& a, const std::string& b) { return made_up(a) < made_up(b); });
  const auto model = drive("model_based", 12, 100, points, made_up);
  CHECK(model.size() == 12);
  double found = 0;
  for (const auto& p : model) found = std::max(found, made_up(p));
  CHECK_MESSAGE(found >= 0.95 * made_up(best), "model_based ran ", model.size(), " trials, best ",
                found, " against ", made_up(best), " (", best, ")");
  // tuner_early_stopping: gridsearch stops 2 trials after the best so far stops improving.
  const auto stopped = drive("gridsearch", 100, 2, points, made_up);
  CHECK(stopped.size() < points.size());
  CHECK(experiment::autotune_stale({made_up(stopped[stopped.size() - 3]),
                                    made_up(stopped[stopped.size() - 2]), made_up(stopped.back())},
                                   2, "throughput"));
  CHECK_THROWS_WITH_AS(
      drive("gridsearch", 10, 10, {"big.json"}, made_up),
      doctest::Contains("'big.json' is not one of `tessera autotune`'s point files"), Error);
}
