// The shared context, the factory, and the two simple searchers (random/single, grid).
#include <cmath>

#include "searchers.h"
#include "tessera/error.h"
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
  auto context = std::make_shared<SearchContext>();
  context->hparams = config.hyperparameters;
  context->random = SearchRandom(config.experiment_seed);
  TS_CHECK(s.max_length.unit == trial::Length::Batches || s.name == "single" ||
               s.name == "random" || s.name == "grid" || s.name == "tpe",
           "searcher ", s.name, ": max_length must be in batches here (", s.max_length.str(), ")");
  if (s.name == "single") return std::make_unique<RandomSearch>(context, 1, 1);
  if (s.name == "random")
    return std::make_unique<RandomSearch>(context, s.max_trials, s.max_concurrent_trials);
  if (s.name == "grid")
    return std::make_unique<GridSearch>(context, s.max_concurrent_trials, s.max_grid_points);
  if (s.name == "tpe")
    return std::make_unique<TPESearch>(
        context,
        TPESearch::Options{s.max_trials, s.max_concurrent_trials, s.n_startup_trials,
                           s.n_ei_candidates, s.gamma, s.prior_weight, s.smaller_is_better});
  const int64_t length = s.max_length.value;
  if (s.name == "async_halving")
    return std::make_unique<AsyncHalvingSearch>(context, s.num_rungs, s.divisor, length,
                                                s.max_trials, s.max_concurrent_trials,
                                                s.smaller_is_better);
  TS_CHECK(s.name == "adaptive_asha", "searcher: unknown name '", s.name, "'");
  std::vector<std::unique_ptr<SearchMethod>> brackets;
  for (const Bracket& b : adaptive_asha_brackets(s, length))
    brackets.push_back(std::make_unique<AsyncHalvingSearch>(context, b.num_rungs, s.divisor, length,
                                                            b.max_trials, b.max_concurrent_trials,
                                                            s.smaller_is_better));
  return std::make_unique<TournamentSearch>(context, std::move(brackets));
}

}  // namespace tessera::experiment
