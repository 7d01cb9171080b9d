#include <algorithm>
#include <cmath>

#include "searchers.h"

#include "tessera/error.h"
#include "tessera/experiment/parzen_estimator.h"
#include "tessera/io/json_fields.h"

namespace tessera::experiment {

namespace {

using H = trial::Hyperparameter;

// A value in the space the estimator works in: a log hyperparameter's exponent, an int's value,
// a categorical's index.
double to_space(const H& h, const nlohmann::json& v) {
  if (h.type == H::Log) return std::log(v.get<double>()) / std::log(h.base);
  if (h.type == H::Categorical)
    return static_cast<double>(std::find(h.vals.begin(), h.vals.end(), v) - h.vals.begin());
  return v.get<double>();
}

// One hyperparameter's value: the best of `n` candidates drawn from l by log l(x) - log g(x).
nlohmann::json suggest_one(const H& h, const std::vector<double>& below,
                           const std::vector<double>& above, int64_t n, double prior_weight,
                           SearchRandom& random) {
  if (h.type == H::Categorical) {
    auto indices = [](const std::vector<double>& v) {
      return std::vector<int64_t>(v.begin(), v.end());
    };
    const auto k = static_cast<int64_t>(h.vals.size());
    const CategoricalEstimator l(indices(below), k, prior_weight),
        g(indices(above), k, prior_weight);
    int64_t best = 0;
    double best_score = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = l.sample(random);
      const double score = l.log_pmf(c) - g.log_pmf(c);
      if (score > best_score) best = c, best_score = score;
    }
    return h.vals[static_cast<size_t>(best)];
  }
  // An int spans [min - 0.5, max + 0.5] and rounds (each value its own bin).
  const double pad = h.type == H::Int ? 0.5 : 0.0;
  const ParzenEstimator l(below, h.minval - pad, h.maxval + pad, prior_weight),
      g(above, h.minval - pad, h.maxval + pad, prior_weight);
  double best = 0.0, best_score = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const double x = l.sample(random);
    const double score = l.log_pdf(x) - g.log_pdf(x);
    if (score > best_score) best = x, best_score = score;
  }
  if (h.type == H::Int)
    return std::clamp(static_cast<int64_t>(std::llround(best)), static_cast<int64_t>(h.minval),
                      static_cast<int64_t>(h.maxval));
  if (h.type == H::Log) return std::pow(h.base, best);
  return best;
}

}  // namespace

TPESearch::TPESearch(std::shared_ptr<SearchContext> c, Options options)
    : SearchMethod(std::move(c)), options_(options) {}

Action TPESearch::next() {
  ++created_, ++pending_;
  Action a = context_->create(suggest());
  hparams_[a.request_id] = a.hparams;
  return a;
}

nlohmann::json TPESearch::suggest() {
  const auto n = static_cast<int64_t>(observations_.size());
  if (n < options_.n_startup_trials) return sample_hparams(context_->hparams, context_->random);
  // The best gamma fraction (Optuna's default gamma: min(ceil(0.1 n), 25)) against the rest.
  std::vector<std::pair<nlohmann::json, double>> sorted = observations_;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const auto& a, const auto& b) {
    return options_.smaller_is_better ? a.second < b.second : a.second > b.second;
  });
  const auto n_below = std::min<int64_t>(
      25, static_cast<int64_t>(std::ceil(options_.gamma * static_cast<double>(n))));
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, h] : context_->hparams) {
    if (h.type == H::Const) {
      out[name] = h.val;
      continue;
    }
    std::vector<double> below, above;
    for (int64_t i = 0; i < n; ++i)
      (i < n_below ? below : above)
          .push_back(to_space(h, sorted[static_cast<size_t>(i)].first[name]));
    out[name] = suggest_one(h, below, above, options_.n_ei_candidates, options_.prior_weight,
                            context_->random);
  }
  return out;
}

std::vector<Action> TPESearch::initial_trials() {
  const int64_t n = options_.max_concurrent > 0
                        ? std::min(options_.max_trials, options_.max_concurrent)
                        : options_.max_trials;
  std::vector<Action> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(next());
  return out;
}

std::vector<Action> TPESearch::validation_completed(int64_t id, int64_t, double metric) {
  last_metric_[id] = metric;
  return {};
}

std::vector<Action> TPESearch::trial_exited(int64_t id) {
  --pending_;
  if (auto it = last_metric_.find(id); it != last_metric_.end())
    observations_.emplace_back(hparams_.at(id), it->second);
  last_metric_.erase(id);
  if (created_ >= options_.max_trials) return {};
  return {next()};
}

std::vector<Action> TPESearch::trial_exited_early(int64_t id, ExitReason reason) {
  --pending_;
  last_metric_.erase(id);
  if (reason == ExitReason::InvalidHP) --created_;
  if (created_ >= options_.max_trials) return {};
  return {next()};  // the failed trial's place goes to a new one
}

nlohmann::json TPESearch::snapshot(bool with_context) const {
  nlohmann::json obs = nlohmann::json::array(), hp = nlohmann::json::object(),
                 last = nlohmann::json::object();
  for (const auto& [h, m] : observations_) obs.push_back({{"hparams", h}, {"metric", m}});
  for (const auto& [id, h] : hparams_) hp[std::to_string(id)] = h;
  for (const auto& [id, m] : last_metric_) last[std::to_string(id)] = m;
  nlohmann::json s{{"created", created_},
                   {"pending", pending_},
                   {"observations", obs},
                   {"hparams", hp},
                   {"last_metric", last}};
  if (with_context) s["context"] = context_state();
  return s;
}

void TPESearch::restore(const nlohmann::json& state, bool with_context) {
  const io::JsonFields f(state, "tpe searcher state");
  created_ = f.integer("created", 0);
  pending_ = f.integer("pending", 0);
  observations_.clear();
  for (const auto& o : state.at("observations"))
    observations_.emplace_back(o.at("hparams"), o.at("metric").get<double>());
  hparams_.clear();
  for (const auto& [id, h] : state.at("hparams").items()) hparams_[std::stoll(id)] = h;
  last_metric_.clear();
  for (const auto& [id, m] : state.at("last_metric").items())
    last_metric_[std::stoll(id)] = m.get<double>();
  if (with_context) restore_context(state.at("context"));
}

}  // namespace tessera::experiment
