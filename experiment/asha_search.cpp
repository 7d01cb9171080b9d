// Asynchronous successive halving that stops trials, adaptive_asha's brackets of it, and the
// tournament that runs brackets side by side: Determined's asha_stopping.go,
// adaptive_asha.go and tournament.go, decision for decision.
#include <algorithm>
#include <cmath>
#include <limits>

#include "searchers.h"
#include "tessera/error.h"
#include "tessera/io/json_fields.h"

namespace tessera::experiment {

namespace {
// A trial that exited early ranks last in its rung.
constexpr double kExitedMetric = std::numeric_limits<double>::max();
}  // namespace

std::vector<int64_t> asha_rung_lengths(int64_t num_rungs, double divisor, int64_t max_length) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < num_rungs; ++i) {
    const double rate = std::pow(divisor, static_cast<double>(num_rungs - i - 1));
    out.push_back(
        std::max<int64_t>(static_cast<int64_t>(static_cast<double>(max_length) / rate), 1));
  }
  return out;
}

std::vector<Bracket> adaptive_asha_brackets(const trial::ExperimentConfig::Searcher& s,
                                            int64_t max_length) {
  const double d = s.number("divisor");
  const int64_t max_trials = s.count("max_trials"), concurrent = s.count("max_concurrent_trials");
  std::vector<int64_t> rungs = s.counts("bracket_rungs");
  if (rungs.empty()) {
    // The top rung must be reachable by a trial and by the number of trials.
    const std::string mode = s.choice("mode");
    const int64_t max_rungs = std::min(
        {s.count("max_rungs"),
         static_cast<int64_t>(std::log(static_cast<double>(max_length)) / std::log(d)) + 1,
         static_cast<int64_t>(std::log(static_cast<double>(max_trials)) / std::log(d)) + 1});
    const int64_t first = mode == "aggressive" ? max_rungs
                          : mode == "standard" ? (max_rungs - 1) / 2 + 1
                                               : 1;
    for (int64_t r = first; r <= max_rungs; ++r) rungs.push_back(r);
  }
  std::sort(rungs.rbegin(), rungs.rend());  // most early stopping first
  // Trials per bracket: roughly equal budget (divisor^(rungs - 1) / rungs per trial).
  std::vector<double> weight;
  double total = 0;
  for (int64_t r : rungs) {
    weight.push_back(std::pow(d, static_cast<double>(r - 1)) / static_cast<double>(r));
    total += weight.back();
  }
  std::vector<Bracket> out;
  int64_t allocated = 0;
  for (size_t i = 0; i < rungs.size(); ++i) {
    const auto n = std::max<int64_t>(
        static_cast<int64_t>(weight[i] / total * static_cast<double>(max_trials)), 1);
    out.push_back({rungs[i], n, 0});
    allocated += n;
  }
  out[0].max_trials += std::max<int64_t>(max_trials - allocated, 0);
  // Concurrency: max_concurrent_trials split evenly (remainder to the first brackets), or
  // without it the smallest bracket's trials (at least the divisor).
  const auto nb = static_cast<int64_t>(out.size());
  int64_t each = 0, remainder = 0;
  if (concurrent == 0) {
    each = std::max(out.back().max_trials, static_cast<int64_t>(d));
  } else {
    const int64_t c = std::max(concurrent, nb);
    each = c / nb;
    remainder = c % nb;
  }
  for (int64_t i = 0; i < nb; ++i)
    out[static_cast<size_t>(i)].max_concurrent_trials = each + (i < remainder);
  return out;
}

size_t AsyncHalvingSearch::Rung::insert(int64_t id, double metric) {
  const auto at = std::find_if(metrics.begin(), metrics.end(),
                               [metric](const auto& m) { return m.second >= metric; });
  const auto index = static_cast<size_t>(at - metrics.begin());
  metrics.insert(at, {id, metric});
  return index;
}

AsyncHalvingSearch::AsyncHalvingSearch(std::shared_ptr<SearchContext> c, int64_t num_rungs,
                                       double divisor, int64_t max_length, int64_t max_trials,
                                       int64_t max_concurrent, bool smaller_is_better)
    : SearchMethod(std::move(c)),
      num_rungs_(num_rungs),
      max_trials_(max_trials),
      max_concurrent_(max_concurrent),
      divisor_(divisor),
      smaller_is_better_(smaller_is_better) {
  TS_CHECK(num_rungs >= 1 && divisor > 1 && max_length >= 1 && max_trials >= 1, "ASHA: num_rungs ",
           num_rungs, ", divisor ", divisor, ", max_length ", max_length, ", max_trials ",
           max_trials, " (each must be >= 1, the divisor > 1)");
  for (int64_t units : asha_rung_lengths(num_rungs, divisor, max_length))
    rungs_.push_back({units, {}});
}

std::vector<Action> AsyncHalvingSearch::initial_trials() {
  // Without a concurrency limit: enough trials that one can reach the top rung.
  const int64_t n =
      max_concurrent_ > 0
          ? std::min(max_concurrent_, max_trials_)
          : std::clamp<int64_t>(
                static_cast<int64_t>(std::pow(divisor_, static_cast<double>(num_rungs_ - 1))), 1,
                max_trials_);
  std::vector<Action> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(context_->create_sampled());
  return out;
}

std::vector<Action> AsyncHalvingSearch::trial_created(int64_t id) {
  trial_rungs_[id] = 0;
  return {};
}

std::vector<Action> AsyncHalvingSearch::validation_completed(int64_t id, int64_t length,
                                                             double metric) {
  std::vector<Action> out = early_stopping(id, length, smaller_is_better_ ? metric : -metric);
  const auto trials = static_cast<int64_t>(trial_rungs_.size()) - invalid_;
  if (!out.empty() && trials < max_trials_) out.push_back(context_->create_sampled());
  return out;
}

// Walks up the rungs this validation qualifies for: a trial continues while it is in the top
// 1/divisor of a rung (or the best while the rung has fewer than divisor entries).
std::vector<Action> AsyncHalvingSearch::early_stopping(int64_t id, int64_t length, double metric) {
  auto it = trial_rungs_.find(id);
  TS_CHECK(it != trial_rungs_.end(), "ASHA: a validation of trial ", id,
           ", which this searcher did not create");
  for (int64_t r = it->second; r < num_rungs_; ++r) {
    Rung& rung = rungs_[static_cast<size_t>(r)];
    it->second = r;
    if (length < rung.units_needed) return {};
    const size_t index = rung.insert(id, metric);
    if (r == num_rungs_ - 1) return {{Action::Stop, id, {}}};
    const auto keep = std::max<size_t>(
        static_cast<size_t>(static_cast<double>(rung.metrics.size()) / divisor_), 1);
    if (index >= keep) return {{Action::Stop, id, {}}};
  }
  return {};
}

std::vector<Action> AsyncHalvingSearch::trial_exited(int64_t) {
  ++completed_;
  return {};
}

std::vector<Action> AsyncHalvingSearch::trial_exited_early(int64_t id, ExitReason reason) {
  early_exits_.insert(id);
  const int64_t top = trial_rungs_.count(id) ? trial_rungs_[id] : 0;
  if (reason == ExitReason::InvalidHP) {
    // Its metrics leave every rung; a new trial takes its place.
    ++invalid_;
    for (int64_t r = 0; r <= top; ++r) {
      auto& m = rungs_[static_cast<size_t>(r)].metrics;
      m.erase(std::remove_if(m.begin(), m.end(), [id](const auto& e) { return e.first == id; }),
              m.end());
    }
    return {{Action::Stop, id, {}}, context_->create_sampled()};
  }
  rungs_[static_cast<size_t>(top)].insert(id, kExitedMetric);
  const auto trials = static_cast<int64_t>(trial_rungs_.size()) - invalid_;
  if (trials < max_trials_) return {context_->create_sampled()};
  return {};
}

nlohmann::json AsyncHalvingSearch::snapshot(bool with_context) const {
  nlohmann::json rungs = nlohmann::json::array();
  for (const Rung& r : rungs_)
    rungs.push_back({{"units_needed", r.units_needed}, {"metrics", r.metrics}});
  nlohmann::json s{{"rungs", rungs},
                   {"trial_rungs", trial_rungs_},
                   {"early_exits", early_exits_},
                   {"completed", completed_},
                   {"invalid", invalid_}};
  if (with_context) s["context"] = context_state();
  return s;
}

void AsyncHalvingSearch::restore(const nlohmann::json& state, bool with_context) {
  const io::JsonFields f(state, "ASHA searcher state");
  const nlohmann::json& rungs = state.at("rungs");
  TS_CHECK(rungs.is_array() && rungs.size() == rungs_.size(), f.where(), ": ", rungs.size(),
           " rungs saved, the searcher has ", rungs_.size());
  for (size_t i = 0; i < rungs_.size(); ++i)
    rungs_[i].metrics = rungs[i].at("metrics").get<std::vector<std::pair<int64_t, double>>>();
  trial_rungs_ = state.at("trial_rungs").get<std::map<int64_t, int64_t>>();
  early_exits_ = state.at("early_exits").get<std::set<int64_t>>();
  completed_ = f.integer("completed", 0);
  invalid_ = f.integer("invalid", 0);
  if (with_context) restore_context(state.at("context"));
}

TournamentSearch::TournamentSearch(std::shared_ptr<SearchContext> c,
                                   std::vector<std::unique_ptr<SearchMethod>> subs)
    : SearchMethod(std::move(c)), subs_(std::move(subs)) {}

std::vector<Action> TournamentSearch::mark(size_t sub, std::vector<Action> actions) {
  for (const Action& a : actions)
    if (a.kind == Action::Create) table_[a.request_id] = sub;
  return actions;
}

SearchMethod& TournamentSearch::owner(int64_t id) {
  auto it = table_.find(id);
  TS_CHECK(it != table_.end(), "searcher: trial ", id, " was not created by this searcher");
  return *subs_[it->second];
}

std::vector<Action> TournamentSearch::initial_trials() {
  std::vector<Action> out;
  for (size_t i = 0; i < subs_.size(); ++i)
    for (Action& a : mark(i, subs_[i]->initial_trials())) out.push_back(std::move(a));
  return out;
}

std::vector<Action> TournamentSearch::trial_created(int64_t id) {
  const size_t sub = table_.at(id);
  return mark(sub, owner(id).trial_created(id));
}

std::vector<Action> TournamentSearch::validation_completed(int64_t id, int64_t length,
                                                           double metric) {
  SearchMethod& s = owner(id);
  return mark(table_.at(id), s.validation_completed(id, length, metric));
}

std::vector<Action> TournamentSearch::trial_exited(int64_t id) {
  SearchMethod& s = owner(id);
  return mark(table_.at(id), s.trial_exited(id));
}

std::vector<Action> TournamentSearch::trial_exited_early(int64_t id, ExitReason reason) {
  SearchMethod& s = owner(id);
  return mark(table_.at(id), s.trial_exited_early(id, reason));
}

nlohmann::json TournamentSearch::snapshot(bool with_context) const {
  nlohmann::json subs = nlohmann::json::array();
  for (const auto& s : subs_) subs.push_back(s->snapshot(false));
  nlohmann::json out{{"table", table_}, {"subs", subs}};
  if (with_context) out["context"] = context_state();
  return out;
}

void TournamentSearch::restore(const nlohmann::json& state, bool with_context) {
  table_ = state.at("table").get<std::map<int64_t, size_t>>();
  const nlohmann::json& subs = state.at("subs");
  TS_CHECK(subs.is_array() && subs.size() == subs_.size(), "searcher state: ", subs.size(),
           " brackets saved, the searcher has ", subs_.size());
  for (size_t i = 0; i < subs_.size(); ++i) subs_[i]->restore(subs[i], false);
  if (with_context) restore_context(state.at("context"));
}

}  // namespace tessera::experiment
