// The shared context, the factory, and the two simple searchers (random/single, grid).
#include <cmath>

#include "searchers.h"
#include "tessera/error.h"
#include "tessera/experiment/searcher_registry.h"
#include "tessera/io/json_fields.h"

namespace tessera::experiment {

Action SearchContext::create(nlohmann::json hparams_sample) {
  return {Action::Create, next_id++, std::move(hparams_sample)};
}

nlohmann::json SearchMethod::context_state() const {
  return {{"random", context_->random.state()}, {"next_id", context_->next_id}};
}

void SearchMethod::restore_context(const nlohmann::json& state) {
  const io::JsonFields f(state, "searcher state");
  context_->random.set_state(f.string("random"));
  context_->next_id = f.integer("next_id", 1);
}

RandomSearch::RandomSearch(std::shared_ptr<SearchContext> c, int64_t max_trials,
                           int64_t max_concurrent)
    : SearchMethod(std::move(c)), max_trials_(max_trials), max_concurrent_(max_concurrent) {}

std::vector<Action> RandomSearch::initial_trials() {
  const int64_t n = max_concurrent_ > 0 ? std::min(max_trials_, max_concurrent_) : max_trials_;
  std::vector<Action> out;
  for (int64_t i = 0; i < n; ++i, ++created_, ++pending_) out.push_back(context_->create_sampled());
  return out;
}

std::vector<Action> RandomSearch::trial_exited(int64_t) {
  --pending_;
  if (created_ >= max_trials_) return {};
  ++created_, ++pending_;
  return {context_->create_sampled()};
}

std::vector<Action> RandomSearch::trial_exited_early(int64_t, ExitReason reason) {
  --pending_;
  if (reason == ExitReason::InvalidHP) --created_;  // does not count against max_trials
  return {};
}

nlohmann::json RandomSearch::snapshot(bool with_context) const {
  nlohmann::json s{{"created", created_}, {"pending", pending_}};
  if (with_context) s["context"] = context_state();
  return s;
}

void RandomSearch::restore(const nlohmann::json& state, bool with_context) {
  const io::JsonFields f(state, "random searcher state");
  created_ = f.integer("created", 0);
  pending_ = f.integer("pending", 0);
  if (with_context) restore_context(state.at("context"));
}

GridSearch::GridSearch(std::shared_ptr<SearchContext> c, int64_t max_concurrent, int64_t max_points)
    : SearchMethod(std::move(c)), max_concurrent_(max_concurrent), max_points_(max_points) {
  grid_point_count(context_->hparams, max_points_);
}

Action GridSearch::next() {
  nlohmann::json point = std::move(remaining_.back());
  remaining_.pop_back();
  ++pending_;
  return context_->create(std::move(point));
}

std::vector<Action> GridSearch::initial_trials() {
  remaining_ = hparam_grid(context_->hparams, max_points_);
  int64_t n = static_cast<int64_t>(remaining_.size());
  if (max_concurrent_ > 0) n = std::min(n, max_concurrent_);
  std::vector<Action> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(next());
  return out;
}

std::vector<Action> GridSearch::trial_exited(int64_t) {
  --pending_;
  if (remaining_.empty()) return {};
  return {next()};
}

nlohmann::json GridSearch::snapshot(bool with_context) const {
  nlohmann::json s{{"pending", pending_}, {"remaining", remaining_}};
  if (with_context) s["context"] = context_state();
  return s;
}

void GridSearch::restore(const nlohmann::json& state, bool with_context) {
  const io::JsonFields f(state, "grid searcher state");
  pending_ = f.integer("pending", 0);
  remaining_ = state.at("remaining").get<std::vector<nlohmann::json>>();
  if (with_context) restore_context(state.at("context"));
}

std::unique_ptr<SearchMethod> make_search_method(const trial::ExperimentConfig& config) {
  const auto& s = config.searcher;
  const SearcherEntry& entry = find_searcher(s.name);
  TS_CHECK(s.max_length.unit == trial::Length::Batches || !entry.lengths_in_batches, "searcher ",
           s.name, ": max_length must be in batches here (", s.max_length.str(), ")");
  auto context = std::make_shared<SearchContext>();
  context->hparams = config.hyperparameters;
  context->random = SearchRandom(config.experiment_seed);
  return entry.build(std::move(context), s);
}

}  // namespace tessera::experiment
