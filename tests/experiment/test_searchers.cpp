// Determined's searchers without processes, against hand-derived expectations: the grid's
// points and creation order, random sampling (ranges, reproducibility, max_trials and
// concurrency), ASHA's stop/continue decisions on a synthetic metric stream (worked out by
// hand from asha_stopping.go's rule below), adaptive ASHA's brackets for each mode, and a
// search restored from its snapshot deciding as the original.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "tessera/error.h"
#include "tessera/experiment/search_method.h"

using namespace tessera;
using experiment::Action;
using trial::ExperimentConfig;

namespace {

ExperimentConfig config(const std::string& hparams, const std::string& searcher) {
  return ExperimentConfig::parse(
      "name: t\nentrypoint: x\nhyperparameters:\n" + hparams + "searcher:\n" + searcher,
      "exp.yaml");
}

Action stop(int64_t id) {
  return {Action::Stop, id, {}};
}

std::vector<int64_t> created(const std::vector<Action>& actions) {
  std::vector<int64_t> ids;
  for (const Action& a : actions)
    if (a.kind == Action::Create) ids.push_back(a.request_id);
  return ids;
}

}  // namespace

TEST_CASE("grid: every point, the first name varying slowest, created from the last point") {
  const auto c = config(R"(  a: {type: int, minval: 1, maxval: 3, count: 3}
  b: {type: categorical, vals: [x, y]}
  c: 5
  d: {type: log, base: 10, minval: -3, maxval: -1, count: 3}
  e: {type: double, minval: 0, maxval: 1, count: 1}
  f: {type: int, minval: 0, maxval: 1, count: 5}
)",
                        "  name: grid\n  metric: loss\n  max_length: {batches: 10}\n"
                        "  max_concurrent_trials: 4\n");
  const auto grid = experiment::hparam_grid(c.hyperparameters);
  REQUIRE(grid.size() == 3 * 2 * 1 * 3 * 1 * 2);  // f's 5 points clamp to its 2 integers
  CHECK(grid.front() ==
        nlohmann::json{{"a", 1}, {"b", "x"}, {"c", 5}, {"d", 0.001}, {"e", 0.5}, {"f", 0}});
  CHECK(grid[1]["f"] == 1);
  CHECK(grid[2]["d"] == 0.01);
  CHECK(grid.back() ==
        nlohmann::json{{"a", 3}, {"b", "y"}, {"c", 5}, {"d", 0.1}, {"e", 0.5}, {"f", 1}});
  auto search = experiment::make_search_method(c);
  const auto first = search->initial_trials();
  REQUIRE(first.size() == 4);  // max_concurrent_trials
  CHECK(first[0] == Action{Action::Create, 1, grid[35]});
  CHECK(first[3] == Action{Action::Create, 4, grid[32]});
  std::set<std::string> seen;
  for (const Action& a : first) seen.insert(a.hparams.dump());
  for (int64_t id = 1; id <= 36; ++id)
    for (const Action& a : search->trial_exited(id)) seen.insert(a.hparams.dump());
  CHECK(seen.size() == 36);  // every point once, then nothing more
  CHECK_THROWS_WITH_AS(
      experiment::hparam_grid(config("  w: {type: double, minval: 0, maxval: 1}\n",
                                     "  name: grid\n  metric: l\n  max_length: {batches: 1}\n")
                                  .hyperparameters),
      doctest::Contains("'w' needs a 'count'"), Error);
}

TEST_CASE("random: samples in range, reproducible from the seed, max_trials and concurrency") {
  const std::string space = R"(  n: {type: int, minval: 2, maxval: 4}
  lr: {type: log, base: 10, minval: -4, maxval: -2}
  act: {type: categorical, vals: [relu, gelu, tanh]}
  p: {type: double, minval: 0.1, maxval: 0.2}
)";
  auto make = [&](int seed, int trials) {
    auto c = config(space,
                    "  name: random\n  metric: l\n  max_length: {batches: 5}\n"
                    "  max_trials: " +
                        std::to_string(trials) + "\n  max_concurrent_trials: 2\n");
    c.experiment_seed = static_cast<uint64_t>(seed);
    return experiment::make_search_method(c);
  };
  auto a = make(7, 5), b = make(7, 5), other = make(8, 5);
  const auto first = a->initial_trials();
  CHECK(created(first) == std::vector<int64_t>{1, 2});
  CHECK(first == b->initial_trials());
  CHECK(first != other->initial_trials());
  // Exits refill up to max_trials (5); an invalid-hyperparameter exit does not count.
  CHECK(created(a->trial_exited(1)) == std::vector<int64_t>{3});
  CHECK(a->trial_exited_early(2, experiment::ExitReason::InvalidHP).empty());
  CHECK(created(a->trial_exited(3)) == std::vector<int64_t>{4});
  CHECK(created(a->trial_exited(4)) == std::vector<int64_t>{5});
  CHECK(created(a->trial_exited(5)) == std::vector<int64_t>{6});
  CHECK(a->trial_exited(6).empty());
  // Ranges: many samples cover the ints' both ends and every value, nothing outside.
  auto many = make(1, 400);
  many->initial_trials();
  std::set<int64_t> ints;
  std::set<std::string> acts;
  for (int64_t id = 1; id <= 400; ++id)
    for (const Action& x : many->trial_exited(id)) {
      ints.insert(x.hparams["n"].get<int64_t>());
      acts.insert(x.hparams["act"].get<std::string>());
      const double lr = x.hparams["lr"], p = x.hparams["p"];
      CHECK((lr >= 1e-4 && lr < 1e-2 && p >= 0.1 && p < 0.2));
    }
  CHECK(ints == std::set<int64_t>{2, 3, 4});
  CHECK(acts.size() == 3);
}

// async_halving, 3 rungs, divisor 2, max_length 8: rungs at 2, 4 and 8 batches. A trial entering
// a rung continues only while it is in the top floor(entries / 2) (at least the best one).
TEST_CASE("ASHA: stop and continue decisions on a metric stream, worked out by hand") {
  for (const bool smaller : {true, false}) {
    CAPTURE(smaller);
    const double sign = smaller ? 1.0 : -1.0;  // larger-is-better sees the negated stream
    auto c = config("  lr: {type: double, minval: 0, maxval: 1}\n",
                    "  name: async_halving\n  metric: loss\n  max_length: {batches: 8}\n"
                    "  num_rungs: 3\n  divisor: 2\n  max_trials: 6\n  max_concurrent_trials: 3\n"
                    "  smaller_is_better: " +
                        std::string(smaller ? "true" : "false") + "\n");
    CHECK(experiment::asha_rung_lengths(3, 2, 8) == std::vector<int64_t>{2, 4, 8});
    auto s = experiment::make_search_method(c);
    CHECK(created(s->initial_trials()) == std::vector<int64_t>{1, 2, 3});
    for (int64_t id : {1, 2, 3}) s->trial_created(id);
    auto v = [&](int64_t id, int64_t len, double m) {
      return s->validation_completed(id, len, sign * m);
    };
    CHECK(v(1, 2, 0.5).empty());  // rung 0: [0.5], the best: on (rung 1 needs 4)
    auto a = v(2, 2, 0.7);        // rung 0: [0.5 0.7], keep 1: 2nd stops
    REQUIRE(a.size() == 2);
    CHECK(a[0] == stop(2));
    CHECK(created(a) == std::vector<int64_t>{4});
    s->trial_created(4);
    a = v(3, 2, 0.6);  // [0.5 0.6 0.7], keep 1
    CHECK(a[0] == stop(3));
    CHECK(created(a) == std::vector<int64_t>{5});
    s->trial_created(5);
    CHECK(v(1, 4, 0.4).empty());  // rung 1: [0.4]
    CHECK(v(4, 2, 0.2).empty());  // rung 0: [0.2 ...] 4 entries, keep 2: first
    a = v(4, 4, 0.45);            // rung 1: [0.4 0.45], keep 1: second stops
    CHECK(a[0] == stop(4));
    CHECK(created(a) == std::vector<int64_t>{6});
    s->trial_created(6);
    a = v(5, 2, 0.55);  // rung 0: [0.2 0.5 0.55 0.6 0.7], keep 2: third stops; 6 trials made
    CHECK(a == std::vector<Action>{stop(5)});
    CHECK(v(1, 8, 0.3) == std::vector<Action>{stop(1)});  // the top rung: done
    // One validation past several rungs: best of rung 0 and of rung 1, then the top rung.
    CHECK(v(6, 8, 0.1) == std::vector<Action>{stop(6)});
    // A trial that errors ranks last in its rung; no new trial past max_trials.
    CHECK(s->trial_exited_early(6, experiment::ExitReason::Errored).empty());
  }
}

TEST_CASE("adaptive ASHA: brackets per mode (max_trials 20, max_length 100, divisor 4)") {
  trial::ExperimentConfig::Searcher s;
  s.name = "adaptive_asha";
  // max_rungs reachable: min(5, floor(log4 100) + 1 = 4, floor(log4 20) + 1 = 3) = 3
  s.params = {{"max_trials", 20},
              {"max_rungs", 5},
              {"divisor", 4.0},
              {"bracket_rungs", nlohmann::json::array()}};
  auto brackets = [&](const std::string& mode, int64_t concurrent) {
    s.params["mode"] = mode;
    s.params["max_concurrent_trials"] = concurrent;
    std::vector<std::vector<int64_t>> out;
    for (const auto& b : experiment::adaptive_asha_brackets(s, 100))
      out.push_back({b.num_rungs, b.max_trials, b.max_concurrent_trials});
    return out;
  };
  using V = std::vector<std::vector<int64_t>>;
  // Weights divisor^(rungs-1) / rungs: 16/3, 4/2, 1/1; trials floor(weight share x 20), the
  // remainder to the first bracket; concurrency 16 split evenly, remainder first.
  CHECK(brackets("aggressive", 16) == V{{3, 20, 16}});
  CHECK(brackets("standard", 16) == V{{3, 15, 8}, {2, 5, 8}});
  CHECK(brackets("conservative", 16) == V{{3, 14, 6}, {2, 4, 5}, {1, 2, 5}});
  // Without a concurrency limit: the smallest bracket's trials, at least the divisor.
  CHECK(brackets("standard", 0) == V{{3, 15, 5}, {2, 5, 5}});
  CHECK(experiment::asha_rung_lengths(3, 4, 100) == std::vector<int64_t>{6, 25, 100});
  // The searcher starts each bracket's concurrent trials, the most aggressive bracket first.
  auto c = config("  lr: {type: double, minval: 0, maxval: 1}\n",
                  "  name: adaptive_asha\n  metric: loss\n  max_length: {batches: 100}\n"
                  "  max_trials: 20\n  max_concurrent_trials: 4\n  mode: standard\n");
  CHECK(created(experiment::make_search_method(c)->initial_trials()) ==
        std::vector<int64_t>{1, 2, 3, 4});
}

TEST_CASE("a restored searcher decides as the original (adaptive ASHA)") {
  auto c = config("  lr: {type: log, base: 10, minval: -4, maxval: -1}\n",
                  "  name: adaptive_asha\n  metric: loss\n  max_length: {batches: 64}\n"
                  "  max_trials: 12\n  max_concurrent_trials: 4\n  mode: conservative\n");
  c.experiment_seed = 3;
  auto a = experiment::make_search_method(c);
  std::vector<int64_t> live = created(a->initial_trials());
  for (int64_t id : live) a->trial_created(id);
  // A synthetic stream: trial i reports metric (i * 37 % 11) / 10 at 4, 16 and 64 batches.
  auto feed = [](experiment::SearchMethod& s, int64_t id, int64_t len) {
    return s.validation_completed(id, len, static_cast<double>(id * 37 % 11) / 10.0);
  };
  for (int64_t id : live) feed(*a, id, 4);
  const nlohmann::json saved = a->snapshot();
  auto b = experiment::make_search_method(c);
  b->restore(nlohmann::json::parse(saved.dump()));
  for (int64_t id : live)
    for (int64_t len : {16, 64}) {
      const auto x = feed(*a, id, len), y = feed(*b, id, len);
      CHECK(x == y);
      for (int64_t n : created(x)) a->trial_created(n), b->trial_created(n);
    }
  CHECK(a->snapshot() == b->snapshot());
}
