// The searcher registry: a searcher of one's own (it stops a trial whose first validation
// misses a threshold) in one class and one RegisterSearcher line is read from an experiment
// config (its keys checked: required, range, kind, unknown), built by make_search_method and
// decides as derived by hand; the built-in searchers' keys, ranges and defaults are Determined's
// (transcribed below from determined-ai/determined's schemas/expconf/v0/searcher-*.json at
// c1e9c6d, 2025-03-20).
#include <doctest/doctest.h>

#include <map>

#include "tessera/error.h"
#include "tessera/experiment/searcher_registry.h"

using namespace tessera;
using experiment::Action;
using trial::ExperimentConfig;

namespace {

// Creates max_trials trials one at a time; a trial whose first validation is above `threshold`
// (smaller is better) is stopped there.
class ThresholdSearch : public experiment::SearchMethod {
 public:
  ThresholdSearch(std::shared_ptr<experiment::SearchContext> c, int64_t max_trials,
                  double threshold)
      : SearchMethod(std::move(c)), max_trials_(max_trials), threshold_(threshold) {}
  std::vector<Action> initial_trials() override { return next(); }
  std::vector<Action> validation_completed(int64_t id, int64_t, double metric) override {
    if (!validated_.insert(id).second || metric <= threshold_) return {};
    return {{Action::Stop, id, {}}};
  }
  std::vector<Action> trial_exited(int64_t) override { return next(); }
  nlohmann::json snapshot(bool with_context) const override {
    nlohmann::json s{{"created", created_}};
    if (with_context) s["context"] = context_state();
    return s;
  }
  void restore(const nlohmann::json& state, bool with_context) override {
    created_ = state.at("created").get<int64_t>();
    if (with_context) restore_context(state.at("context"));
  }

 private:
  std::vector<Action> next() {
    if (created_ >= max_trials_) return {};
    ++created_;
    return {context_->create_sampled()};
  }
  int64_t max_trials_, created_ = 0;
  double threshold_;
  std::set<int64_t> validated_;
};

experiment::SearcherEntry threshold_entry() {
  using Kind = trial::SearcherParam::Kind;
  experiment::SearcherEntry e{
      {.type = "threshold",
       .doc = "one trial at a time; a first validation above the threshold stops it",
       .params = {{.name = "max_trials", .kind = Kind::Count, .min = 1, .doc = "trials in all"},
                  {.name = "threshold",
                   .kind = Kind::Number,
                   .default_value = 1.0,
                   .min = 0,
                   .doc = "the first validation's largest metric that continues"}}}};
  e.build = [](std::shared_ptr<experiment::SearchContext> c, const ExperimentConfig::Searcher& s) {
    return std::make_unique<ThresholdSearch>(c, s.count("max_trials"), s.number("threshold"));
  };
  return e;
}

const experiment::RegisterSearcher kThreshold{threshold_entry()};

ExperimentConfig config(const std::string& searcher_keys) {
  return ExperimentConfig::parse(
      "name: t\nentrypoint: x\nhyperparameters:\n  lr: {type: double, minval: 0.1, maxval: "
      "0.2}\nsearcher:\n  metric: validation_loss\n  max_length: {batches: 10}\n" +
          searcher_keys,
      "exp.yaml");
}

std::string error_of(const std::string& searcher_keys) {
  try {
    config(searcher_keys);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a searcher of one's own: read, checked and built from the experiment config") {
  const ExperimentConfig c = config("  name: threshold\n  max_trials: 3\n  threshold: 0.5\n");
  CHECK(c.searcher.params == nlohmann::json{{"max_trials", 3}, {"threshold", 0.5}});
  CHECK(c.warnings.empty());
  // The default where the file has none.
  CHECK(config("  name: threshold\n  max_trials: 2\n").searcher.number("threshold") == 1.0);
  CHECK(error_of("  name: threshold\n")
            .find("exp.yaml:6: 'searcher.max_trials' is required by "
                  "the threshold searcher") != std::string::npos);
  CHECK(error_of("  name: threshold\n  max_trials: 0\n")
            .find("'searcher.max_trials' is 0, expected >= 1") != std::string::npos);
  CHECK(error_of("  name: threshold\n  max_trials: 2\n  threshold: -1\n")
            .find("'searcher.threshold' is -1, expected >= 0") != std::string::npos);
  CHECK(error_of("  name: threshold\n  max_trials: 2\n  threshold: .inf\n")
            .find("'searcher.threshold' is inf, expected a finite number") != std::string::npos);
  CHECK(error_of("  name: threshold\n  max_trials: 2\n  threshold: .nan\n")
            .find("'searcher.threshold' is nan, expected a finite number") != std::string::npos);
  CHECK(error_of("  name: threshold\n  max_trials: 2\n  threshold: low\n")
            .find("'searcher.threshold' must be a number, found 'low'") != std::string::npos);
  // A misspelt key: the required one's error names it, and so does its warning.
  CHECK(error_of("  name: threshold\n  max_trial: 2\n")
            .find("'searcher.max_trials' is required by the threshold searcher (is "
                  "'searcher.max_trial' it, misspelt?)") != std::string::npos);
  const ExperimentConfig m = config("  name: threshold\n  max_trials: 2\n  treshold: 3\n");
  REQUIRE(m.warnings.size() == 1);
  CHECK(m.warnings[0] ==
        "exp.yaml:10: unknown key 'searcher.treshold' (ignored) (did you mean "
        "'searcher.threshold'?)");
  // Another searcher's key is unknown to this one.
  const ExperimentConfig w = config("  name: threshold\n  max_trials: 2\n  divisor: 3\n");
  REQUIRE(w.warnings.size() == 1);
  CHECK(w.warnings[0].find("unknown key 'searcher.divisor'") != std::string::npos);
  // An unknown name lists every registered searcher, this one included.
  CHECK(error_of("  name: thresh\n")
            .find("'searcher.name' is 'thresh'; expected single, random, "
                  "grid, adaptive_asha, async_halving, tpe, autotune or "
                  "threshold") != std::string::npos);
  CHECK_THROWS_WITH_AS(experiment::register_searcher(threshold_entry()),
                       doctest::Contains("'threshold' is registered twice"), Error);
}

TEST_CASE("a searcher of one's own decides through make_search_method as derived by hand") {
  const ExperimentConfig c = config("  name: threshold\n  max_trials: 3\n  threshold: 0.5\n");
  auto s = experiment::make_search_method(c);
  auto ids = [](const std::vector<Action>& a) {
    std::vector<std::pair<int, int64_t>> out;
    for (const Action& x : a) out.push_back({x.kind, x.request_id});
    return out;
  };
  using V = std::vector<std::pair<int, int64_t>>;
  const auto first = s->initial_trials();
  REQUIRE(ids(first) == V{{Action::Create, 1}});
  const double lr = first[0].hparams["lr"].get<double>();
  CHECK((lr >= 0.1 && lr < 0.2));                                          // its range
  CHECK(ids(s->validation_completed(1, 5, 0.7)) == V{{Action::Stop, 1}});  // 0.7 > 0.5
  CHECK(ids(s->trial_exited(1)) == V{{Action::Create, 2}});                // the next one
  CHECK(ids(s->validation_completed(2, 5, 0.3)).empty());                  // 0.3 continues
  CHECK(ids(s->validation_completed(2, 10, 0.9)).empty());                 // not its first
  const nlohmann::json state = s->snapshot();
  CHECK(ids(s->trial_exited(2)) == V{{Action::Create, 3}});
  CHECK(ids(s->trial_exited(3)).empty());  // max_trials 3 made
  // Restored from the snapshot: the same third trial (id and hyperparameters).
  auto again = experiment::make_search_method(c);
  again->restore(state);
  const auto third = again->trial_exited(2);
  REQUIRE(ids(third) == V{{Action::Create, 3}});
  // The web view marks nothing for it (no decision_lengths).
  CHECK_FALSE(experiment::find_searcher("threshold").decision_lengths);
}

TEST_CASE("the built-in searchers' keys, ranges and defaults are Determined's") {
  // (key: default or "required", minimum, exclusive) from searcher-{random,grid,async-halving,
  // adaptive-asha}.json; mode's enum is aggressive, standard, conservative.
  struct Key {
    nlohmann::json default_value;
    double min;
    bool exclusive;
  };
  const nlohmann::json required = nullptr;
  const std::map<std::string, std::map<std::string, Key>> determined{
      {"random", {{"max_trials", {required, 1, false}}, {"max_concurrent_trials", {16, 0, false}}}},
      {"grid", {{"max_concurrent_trials", {16, 0, false}}}},
      {"async_halving",
       {{"num_rungs", {required, 1, false}},
        {"max_trials", {required, 1, false}},
        {"divisor", {4, 1, true}},
        {"max_concurrent_trials", {16, 0, false}}}},
      {"adaptive_asha",
       {{"max_trials", {required, 1, false}},
        {"max_rungs", {5, 1, false}},
        {"divisor", {4, 1, true}},
        {"max_concurrent_trials", {16, 0, false}}}}};
  // (No structured bindings: clang 14's lambdas cannot capture them.)
  for (const auto& searcher : determined) {
    const experiment::SearcherEntry& e = experiment::find_searcher(searcher.first);
    for (const auto& key : searcher.second) {
      INFO(searcher.first, ".", key.first);
      const auto p =
          std::find_if(e.params.begin(), e.params.end(),
                       [&](const trial::SearcherParam& x) { return x.name == key.first; });
      REQUIRE(p != e.params.end());
      CHECK(p->default_value == key.second.default_value);
      CHECK(p->required() == key.second.default_value.is_null());
      CHECK(p->min == key.second.min);
      CHECK(p->min_exclusive == key.second.exclusive);
    }
  }
  const auto& asha = experiment::find_searcher("adaptive_asha").params;
  const auto mode =
      std::find_if(asha.begin(), asha.end(), [](auto& p) { return p.name == "mode"; });
  REQUIRE(mode != asha.end());
  CHECK(mode->default_value == "standard");
  CHECK(mode->choices == std::vector<std::string>{"aggressive", "standard", "conservative"});
  CHECK(experiment::find_searcher("single").params.empty());
  // Its decisions count batches: a max_length in epochs is refused when the search is built.
  CHECK(experiment::find_searcher("async_halving").lengths_in_batches);
  CHECK_FALSE(experiment::find_searcher("random").lengths_in_batches);
}
