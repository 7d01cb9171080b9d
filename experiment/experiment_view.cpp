#include "tessera/experiment/experiment_view.h"

#include <cstdio>
#include <map>

#include "tessera/experiment/searcher_registry.h"
#include "tessera/trial/experiment_config.h"

namespace tessera::experiment {

namespace {

std::string number(const nlohmann::json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v.get<double>());
  return buf;
}

}  // namespace

nlohmann::json describe_experiment(const ExperimentStore& store, int64_t id) {
  const ExperimentRecord e = store.experiment(id);
  const trial::ExperimentConfig c =
      trial::ExperimentConfig::parse(e.config, "experiment " + std::to_string(id));
  const std::string& metric = c.searcher.metric;
  nlohmann::json trials = nlohmann::json::array();
  for (const TrialRecord& t : store.trials(id)) {
    nlohmann::json best = nlohmann::json::object(), latest = nlohmann::json::object();
    if (const auto b = store.best_validation(t.id, metric, c.searcher.smaller_is_better))
      best[metric] = *b;
    const auto validations = store.metrics(t.id, "validation");
    if (!validations.empty() && validations.back().metrics.contains(metric))
      latest[metric] = validations.back().metrics[metric];
    trials.push_back({{"id", t.id},
                      {"request_id", t.request_id},
                      {"state", t.state},
                      {"hparams", t.hparams},
                      {"batches", t.batches},
                      {"best_validation", best},
                      {"latest_validation", latest},
                      {"restarts", t.restarts},
                      {"checkpoints", store.checkpoints(t.id).size()}});
  }
  return {{"id", e.id},
          {"name", e.name},
          {"state", e.state},
          {"searcher",
           {{"name", c.searcher.name},
            {"metric", metric},
            {"smaller_is_better", c.searcher.smaller_is_better}}},
          {"trials", trials}};
}

std::string trials_table(const nlohmann::json& d) {
  std::map<std::string, int> count;
  for (const auto& t : d["trials"]) ++count[t["state"].get<std::string>()];
  std::string out = "experiment " + std::to_string(d["id"].get<int64_t>()) + " (" +
                    d["name"].get<std::string>() + ") " + d["state"].get<std::string>() + ":";
  for (const auto& [state, n] : count) out += " " + std::to_string(n) + " " + state;
  out += "\n";
  const std::string metric = d["searcher"]["metric"];
  char line[512];
  std::snprintf(line, sizeof line, "%6s %6s  %-10s %8s %8s  %-24s %s\n", "trial", "id", "state",
                "batches", "restarts", (metric + " latest/best").c_str(), "hparams");
  out += line;
  for (const auto& t : d["trials"]) {
    const auto& latest = t["latest_validation"];
    const auto& best = t["best_validation"];
    const std::string m = number(latest.contains(metric) ? latest[metric] : nlohmann::json()) +
                          " / " + number(best.contains(metric) ? best[metric] : nlohmann::json());
    std::snprintf(line, sizeof line, "%6lld %6lld  %-10s %8lld %8lld  %-24s %s\n",
                  static_cast<long long>(t["request_id"].get<int64_t>()),
                  static_cast<long long>(t["id"].get<int64_t>()),
                  t["state"].get<std::string>().c_str(),
                  static_cast<long long>(t["batches"].get<int64_t>()),
                  static_cast<long long>(t["restarts"].get<int64_t>()), m.c_str(),
                  t["hparams"].dump().c_str());
    out += line;
  }
  return out;
}

nlohmann::json experiments_summary(const ExperimentStore& store) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& e : store.experiment_rows()) {
    nlohmann::json row{{"id", e.id}, {"name", e.name}, {"state", e.state}};
    try {  // one bad record is shown as such; the others are listed
      row["trials"] = store.trials(e.id).size();
    } catch (const std::exception&) {
      row["trials"] = nullptr;
      row["error"] = "its trials cannot be read";
    }
    all.push_back(row);
  }
  return {{"experiments", all}};
}

namespace {

// Where the searcher decides (ASHA's rungs), for the chart; none when it says nothing or
// max_length is not in batches (the chart's axis).
std::vector<int64_t> rung_lengths(const trial::ExperimentConfig& c) {
  const auto& s = c.searcher;
  if (s.max_length.unit != trial::Length::Batches) return {};
  const SearcherEntry& entry = find_searcher(s.name);
  return entry.decision_lengths ? entry.decision_lengths(s) : std::vector<int64_t>{};
}

}  // namespace

nlohmann::json experiment_detail(const ExperimentStore& store, int64_t id) {
  nlohmann::json d = describe_experiment(store, id);
  const trial::ExperimentConfig c = trial::ExperimentConfig::parse(
      store.experiment(id).config, "experiment " + std::to_string(id));
  d["rungs"] = rung_lengths(c);
  std::string training_metric;
  nlohmann::json curves = nlohmann::json::array();
  for (const auto& t : store.trials(id)) {
    nlohmann::json train = nlohmann::json::array(), val = nlohmann::json::array();
    for (const auto& m : store.metrics(t.id)) {
      if (m.kind == "training" && training_metric.empty())
        for (const auto& [k, v] : m.metrics.items())
          if (v.is_number() && k != "batches" && k != "epochs" &&
              (training_metric.empty() || k == "loss"))
            training_metric = k;
      const std::string& name = m.kind == "training" ? training_metric : c.searcher.metric;
      if (m.metrics.contains(name) && m.metrics[name].is_number())
        (m.kind == "training" ? train : val).push_back({m.batches, m.metrics[name]});
    }
    curves.push_back({{"trial", t.request_id}, {"training", train}, {"validation", val}});
  }
  d["training_metric"] = training_metric;
  d["curves"] = curves;
  return d;
}

std::optional<nlohmann::json> best_checkpoint(const ExperimentStore& store, int64_t id) {
  const ExperimentRecord e = store.experiment(id);
  const trial::ExperimentConfig c =
      trial::ExperimentConfig::parse(e.config, "experiment " + std::to_string(id));
  const std::string& metric = c.searcher.metric;
  std::optional<nlohmann::json> best;
  for (const TrialRecord& t : store.trials(id))
    for (const CheckpointRecord& k : store.checkpoints(t.id)) {
      if (!k.metrics.is_object() || !k.metrics.contains(metric) || !k.metrics[metric].is_number())
        continue;
      const double v = k.metrics[metric];
      const bool better =
          !best || (c.searcher.smaller_is_better ? v < (*best)["metric"].get<double>()
                                                 : v > (*best)["metric"].get<double>());
      if (better)
        best = nlohmann::json{{"path", k.path},       {"uuid", k.uuid}, {"trial_id", t.id},
                              {"batches", k.batches}, {"metric", v},    {"metric_name", metric}};
    }
  return best;
}

}  // namespace tessera::experiment
