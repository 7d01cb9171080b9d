// The built-in searchers as registry entries: Determined's single, random, grid, async_halving
// and adaptive_asha (keys and defaults as Determined's searcher config), and Optuna's TPE.
#include "tessera/experiment/searcher_registry.h"

#include <set>

#include "searchers.h"
#include "tessera/named_registry.h"

namespace tessera::experiment {

namespace {

using Kind = trial::SearcherParam::Kind;
using Searcher = trial::ExperimentConfig::Searcher;
using Context = std::shared_ptr<SearchContext>;

trial::SearcherParam max_trials() {
  return {.name = "max_trials", .kind = Kind::Count, .min = 1, .doc = "trials created in all"};
}
// `zero`: what 0 means to the searcher.
trial::SearcherParam max_concurrent_trials(const std::string& zero = "no limit") {
  return {.name = "max_concurrent_trials",
          .kind = Kind::Count,
          .default_value = 16,
          .min = 0,
          .doc = "trials running at once (0: " + zero + ")"};
}
trial::SearcherParam divisor() {
  return {.name = "divisor",
          .kind = Kind::Number,
          .default_value = 4.0,
          .min = 1,
          .min_exclusive = true,
          .doc = "a rung keeps the top 1/divisor; rungs at max_length / divisor^k"};
}

SearcherEntry single() {
  SearcherEntry e{{.type = "single", .doc = "one trial with the hyperparameters' values"}};
  e.build = [](Context c, const Searcher&) { return std::make_unique<RandomSearch>(c, 1, 1); };
  return e;
}

SearcherEntry random() {
  SearcherEntry e{{.type = "random",
                   .doc = "max_trials trials, each hyperparameter drawn independently",
                   .params = {max_trials(), max_concurrent_trials()}}};
  e.build = [](Context c, const Searcher& s) {
    return std::make_unique<RandomSearch>(c, s.count("max_trials"),
                                          s.count("max_concurrent_trials"));
  };
  return e;
}

SearcherEntry grid() {
  SearcherEntry e{{.type = "grid",
                   .doc = "every point of the grid (each int/double/log hyperparameter needs "
                          "`count`)",
                   .params = {max_concurrent_trials(),
                              {.name = "max_grid_points",
                               .kind = Kind::Count,
                               .default_value = 100000,
                               .min = 1,
                               .doc = "Tessera's: a larger grid is refused before it is built"}}}};
  e.build = [](Context c, const Searcher& s) {
    return std::make_unique<GridSearch>(c, s.count("max_concurrent_trials"),
                                        s.count("max_grid_points"));
  };
  return e;
}

SearcherEntry async_halving() {
  SearcherEntry e{{.type = "async_halving",
                   .doc = "ASHA: a trial continues past a rung only in its top 1/divisor",
                   .params = {{.name = "num_rungs",
                               .kind = Kind::Count,
                               .min = 1,
                               .doc = "rungs, the last at max_length"},
                              divisor(),
                              max_trials(),
                              max_concurrent_trials()},
                   .lengths_in_batches = true}};
  e.build = [](Context c, const Searcher& s) {
    return std::make_unique<AsyncHalvingSearch>(
        c, s.count("num_rungs"), s.number("divisor"), s.max_length.value, s.count("max_trials"),
        s.count("max_concurrent_trials"), s.smaller_is_better);
  };
  e.decision_lengths = [](const Searcher& s) {
    return asha_rung_lengths(s.count("num_rungs"), s.number("divisor"), s.max_length.value);
  };
  return e;
}

SearcherEntry adaptive_asha() {
  SearcherEntry e{
      {.type = "adaptive_asha",
       .doc = "brackets of ASHA with 1..max_rungs rungs by mode, trials split between them",
       .params = {max_trials(),
                  {.name = "max_rungs",
                   .kind = Kind::Count,
                   .default_value = 5,
                   .min = 1,
                   .doc = "rungs of the most aggressive bracket"},
                  divisor(),
                  {.name = "mode",
                   .kind = Kind::Choice,
                   .default_value = "standard",
                   .choices = {"aggressive", "standard", "conservative"},
                   .doc =
                       "which brackets: the most aggressive only, the more aggressive half, all"},
                  {.name = "bracket_rungs",
                   .kind = Kind::CountList,
                   .min = 1,
                   .doc = "the brackets' rung counts (instead of mode)"},
                  max_concurrent_trials("the smallest bracket's trials, at least divisor, per "
                                        "bracket")},
       .lengths_in_batches = true}};
  e.build = [](Context c, const Searcher& s) {
    std::vector<std::unique_ptr<SearchMethod>> brackets;
    for (const Bracket& b : adaptive_asha_brackets(s, s.max_length.value))
      brackets.push_back(std::make_unique<AsyncHalvingSearch>(
          c, b.num_rungs, s.number("divisor"), s.max_length.value, b.max_trials,
          b.max_concurrent_trials, s.smaller_is_better));
    return std::make_unique<TournamentSearch>(c, std::move(brackets));
  };
  e.decision_lengths = [](const Searcher& s) {
    std::set<int64_t> rungs;
    for (const Bracket& b : adaptive_asha_brackets(s, s.max_length.value))
      for (int64_t r : asha_rung_lengths(b.num_rungs, s.number("divisor"), s.max_length.value))
        rungs.insert(r);
    return std::vector<int64_t>(rungs.begin(), rungs.end());
  };
  return e;
}

SearcherEntry tpe() {
  const TPESearch::Options d;  // its defaults are Optuna's
  SearcherEntry e{
      {.type = "tpe",
       .doc = "Optuna's TPE sampler: random for n_startup_trials, then l(x)/g(x) of Parzen "
              "estimators of the best and the other finished trials",
       .params = {max_trials(),
                  max_concurrent_trials(),
                  {.name = "n_startup_trials",
                   .kind = Kind::Count,
                   .default_value = d.n_startup_trials,
                   .min = 1,
                   .doc = "trials drawn at random before TPE"},
                  {.name = "n_ei_candidates",
                   .kind = Kind::Count,
                   .default_value = d.n_ei_candidates,
                   .min = 1,
                   .doc = "candidates drawn per hyperparameter, the best by l(x)/g(x) taken"},
                  {.name = "gamma",
                   .kind = Kind::Number,
                   .default_value = d.gamma,
                   .min = 0,
                   .min_exclusive = true,
                   .max = 1,
                   .doc = "the best fraction (at most 25 trials) that l(x) is fitted to"},
                  {.name = "prior_weight",
                   .kind = Kind::Number,
                   .default_value = d.prior_weight,
                   .min = 0,
                   .min_exclusive = true,
                   .doc = "weight of the prior among the estimators' components"}}}};
  e.build = [](Context c, const Searcher& s) {
    return std::make_unique<TPESearch>(
        c, TPESearch::Options{s.count("max_trials"), s.count("max_concurrent_trials"),
                              s.count("n_startup_trials"), s.count("n_ei_candidates"),
                              s.number("gamma"), s.number("prior_weight"), s.smaller_is_better});
  };
  return e;
}

NamedRegistry<SearcherEntry>& searcher_registry() {
  static NamedRegistry<SearcherEntry> registry = [] {
    std::vector<SearcherEntry> builtin{single(),        random(),        grid(),
                                       adaptive_asha(), async_halving(), tpe()};
    // The config reader checks sections against the schemas from here on.
    for (const SearcherEntry& e : builtin) trial::register_searcher_schema(e);
    return NamedRegistry<SearcherEntry>("searcher", std::move(builtin));
  }();
  return registry;
}

// Publishes the built-in schemas when the library loads: a program that reads an experiment
// config before it asks for a searcher checks it against them too.
[[maybe_unused]] const bool kBuiltinSearchersPublished = (searcher_registry(), true);

}  // namespace

void register_searcher(SearcherEntry entry) {
  NamedRegistry<SearcherEntry>& registry = searcher_registry();
  registry.check_new(entry, "register_searcher");
  trial::register_searcher_schema(entry);
  registry.add(std::move(entry), "register_searcher");
}

const SearcherEntry& find_searcher(const std::string& type) {
  return searcher_registry().find(type);
}

std::vector<std::string> registered_searchers() {
  return searcher_registry().types();
}

}  // namespace tessera::experiment
