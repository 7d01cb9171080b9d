// The searcher registry: each searcher.name an experiment config can state is one
// SearcherEntry: its schema (the keys of its own, with kinds, ranges, defaults and doc lines,
// which every program reading an experiment config checks the section against), its factory,
// and what the web view marks on the metric chart. make_search_method builds through it and
// `tessera searchers` (docs/experiments.md's table) prints it. A searcher of one's own is a
// SearchMethod and one line:
//   const experiment::RegisterSearcher kMine{{{.type = "mine", .doc = "...", .params = {...}},
//                                             [](auto context, const auto& searcher) {...}}};
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/experiment/search_method.h"
#include "tessera/trial/experiment_config.h"
#include "tessera/trial/searcher_schema.h"

namespace tessera::experiment {

struct SearcherEntry : trial::SearcherSchema {
  // The search method of a searcher section (its params filled from the schema) over the
  // experiment's shared context (hyperparameter space, seeded random stream, trial ids).
  std::function<std::unique_ptr<SearchMethod>(std::shared_ptr<SearchContext>,
                                              const trial::ExperimentConfig::Searcher&)>
      build;
  // The lengths (in max_length's unit) at which it decides, for the web view's chart (ASHA's
  // rungs); optional.
  std::function<std::vector<int64_t>(const trial::ExperimentConfig::Searcher&)> decision_lengths;
};

// Registers `entry` and publishes its schema to the experiment config reader; a name
// registered twice is an error.
void register_searcher(SearcherEntry entry);
// The entry of searcher.name `type`; an unknown one is an error listing the registered names.
const SearcherEntry& find_searcher(const std::string& type);
std::vector<std::string> registered_searchers();

// The one registry line: `const experiment::RegisterSearcher kMine{mine_entry()};`.
struct RegisterSearcher {
  explicit RegisterSearcher(SearcherEntry entry) { register_searcher(std::move(entry)); }
};

}  // namespace tessera::experiment
