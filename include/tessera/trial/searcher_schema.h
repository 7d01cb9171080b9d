// What a searcher reads from an experiment config's `searcher` section beyond the keys every
// searcher reads (name, metric, smaller_is_better, max_length): each key's kind, range, default
// and doc line. The experiment layer's searcher registry (tessera/experiment/searcher_registry.h)
// publishes every searcher's schema here, so that each program that reads an experiment config
// (a trial of one's own, `tessera trial`, the experiment runner) checks the section against it,
// and `tessera searchers` and docs/experiments.md print it.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::trial {

struct SearcherParam {
  enum class Kind { Count, Number, Choice, CountList };
  std::string name;  // searcher.<name>
  Kind kind = Kind::Count;
  // The value when the file has none; null: required (a CountList: unset, an empty list).
  nlohmann::json default_value;
  double min = 0;                    // Count, Number and each CountList entry: >= min ...
  bool min_exclusive = false;        // ... or > min
  std::optional<double> max;         // Number: <= max
  std::vector<std::string> choices;  // Choice: the values it takes
  std::string doc;

  bool required() const { return default_value.is_null() && kind != Kind::CountList; }
  // ">= 1", "> 1", "in (0, 1]", "aggressive, standard or conservative".
  std::string range_text() const;
  const char* kind_text() const;  // "integer", "number", "choice", "integers"
};

struct SearcherSchema {
  std::string type;  // searcher.name
  std::string doc;
  std::vector<SearcherParam> params;
  // max_length in batches only (its decisions count batches: ASHA's rungs); else records and
  // epochs too.
  bool lengths_in_batches = false;
};

// Registers a searcher's schema (the experiment layer's register_searcher does, for every
// searcher); a name registered twice is an error.
void register_searcher_schema(SearcherSchema schema);
// The schema of searcher.name `type`, or nullptr when none is registered.
const SearcherSchema* find_searcher_schema(const std::string& type);
// "single, random, grid, adaptive_asha, async_halving, tpe or autotune": the registered names.
std::string registered_searcher_schemas_text();

}  // namespace tessera::trial
