#include "tessera/experiment/autotuner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "tessera/experiment/autotuning_config.h"
#include "tessera/experiment/experiment_runner.h"
#include "tessera/io/files.h"
#include "tessera/launch/job.h"
#include "tessera/launch/memory_estimate.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::experiment {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The original config with `over` laid on top (objects merged key by key).
json merged(json base, const json& over) {
  for (const auto& [k, v] : over.items()) {
    if (v.is_object() && base.contains(k) && base[k].is_object())
      base[k] = merged(base[k], v);
    else
      base[k] = v;
  }
  return base;
}

// The micro-batch sizes in range that divide the train batch over the data-parallel ranks.
std::vector<int64_t> micro_batches(const io::TrainConfig& cfg, const AutotuningConfig& a,
                                   int64_t data_ranks) {
  std::vector<int64_t> out;
  const int64_t per_rank = cfg.train_batch_size / data_ranks;
  for (int64_t m = a.min_train_micro_batch_size_per_gpu;
       m <= std::min(per_rank, a.max_train_micro_batch_size_per_gpu); ++m)
    if (per_rank % m == 0) out.push_back(m);
  TS_CHECK(!out.empty(), cfg.source, ": no micro-batch size in autotuning's [",
           a.min_train_micro_batch_size_per_gpu, ", ", a.max_train_micro_batch_size_per_gpu,
           "] divides the train batch ", cfg.train_batch_size, " over ", data_ranks,
           " data-parallel ranks");
  return out;
}

// One point's keys; fast mode tunes the stage and micro-batch only.
json point_keys(const AutotunePoint& p, int64_t train_batch) {
  json zero = {{"stage", p.stage}};
  if (p.reduce_bucket_size > 0) zero["reduce_bucket_size"] = p.reduce_bucket_size;
  if (p.overlap_comm) zero["overlap_comm"] = *p.overlap_comm;
  return {{"train_batch_size", train_batch},
          {"train_micro_batch_size_per_gpu", p.micro_batch},
          {"gradient_accumulation_steps", p.accumulation},
          {"zero_optimization", zero}};
}

std::string point_name(const AutotunePoint& p) {
  std::string name = "z" + std::to_string(p.stage) + "_mbs" + std::to_string(p.micro_batch) +
                     "_gas" + std::to_string(p.accumulation);
  if (p.reduce_bucket_size > 0) name += "_rbs" + std::to_string(p.reduce_bucket_size);
  if (p.overlap_comm) name += *p.overlap_comm ? "_overlap" : "_nooverlap";
  return name;
}

// The points of one (stage, micro-batch) pair: itself, or with fast off its bucket and overlap
// variants (stages 1-3, which reduce in buckets).
std::vector<AutotunePoint> variants(AutotunePoint base, bool fast) {
  if (fast || base.stage == 0) return {base};
  std::vector<AutotunePoint> out;
  for (int64_t bucket : {int64_t{50'000'000}, int64_t{500'000'000}})
    for (bool overlap : {true, false}) {
      AutotunePoint p = base;
      p.reduce_bucket_size = bucket;
      p.overlap_comm = overlap;
      out.push_back(p);
    }
  return out;
}

}  // namespace

std::vector<AutotunePoint> autotune_points(const std::string& config_text,
                                           const std::string& source, int ranks,
                                           int64_t memory_limit) {
  const io::TrainConfig cfg = launch::parse_config(config_text, ranks, source);
  parallel::refuse_pipeline_stages(cfg, "autotuning",
                                   "it sizes whole or tensor-parallel models (a pipeline's "
                                   "search space is not built)");
  const AutotuningConfig& a = autotuning_config(cfg);
  const int64_t data_ranks = cfg.world_size;
  const auto vocab = launch::config_vocab_size(cfg);
  TS_CHECK(vocab, cfg.source, ": autotuning needs the vocabulary size (data.path or a tokenizer)");
  const json original = json::parse(config_text);
  std::vector<AutotunePoint> out;
  for (int stage = 0; stage <= 3; ++stage) {
    std::vector<AutotunePoint> fitting, pruned;
    for (int64_t m : micro_batches(cfg, a, data_ranks)) {
      AutotunePoint p;
      p.stage = stage, p.micro_batch = m, p.accumulation = cfg.train_batch_size / (m * data_ranks);
      const json keys = point_keys(p, cfg.train_batch_size);
      const io::TrainConfig c = launch::parse_config(merged(original, keys).dump(), ranks,
                                                     cfg.source + " (" + point_name(p) + ")");
      const launch::MemoryEstimate e = launch::estimate_memory(c, *vocab);
      p.predicted_bytes = e.by_zero_stage[static_cast<size_t>(stage)].total() + e.activations;
      p.fits = p.predicted_bytes <= memory_limit;
      (p.fits ? fitting : pruned).push_back(p);
    }
    // The largest num_tuning_micro_batch_sizes that fit (larger batches use the cores better).
    if (fitting.size() > static_cast<size_t>(a.num_tuning_micro_batch_sizes))
      fitting.erase(fitting.begin(), fitting.end() - a.num_tuning_micro_batch_sizes);
    for (const AutotunePoint& p : fitting)
      for (AutotunePoint v : variants(p, a.fast)) out.push_back(v);
    for (const AutotunePoint& p : pruned) out.push_back(p);
  }
  for (AutotunePoint& p : out) {
    p.name = point_name(p);
    p.tuned_keys = point_keys(p, cfg.train_batch_size);
  }
  return out;
}

int64_t default_memory_limit(int ranks) {
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size / std::max(ranks, 1)
                               : int64_t{1} << 40;
}

}  // namespace tessera::experiment

namespace tessera::experiment {

namespace {

void write_json(const fs::path& path, const json& j) {
  io::write_file_atomically(path.string(), [&](std::ostream& out) { out << j.dump(2) << "\n"; });
}

// A point's trial config: its keys over the original, the profile reported (autotuning
// enabled), one validation batch, and no monitor, profiler or trace writing files.
json trial_config(const json& original, const AutotunePoint& p) {
  json c = merged(original, p.tuned_keys);
  c["autotuning"]["enabled"] = true;
  c["train"]["eval_iters"] = 1;
  for (const char* key :
       {"csv_monitor", "tensorboard", "wandb", "comet", "flops_profiler", "trace"})
    if (c.contains(key) && c[key].is_object()) c[key]["enabled"] = false;
  return c;
}

// The experiment: the fitting points' configs as one categorical hyperparameter, searched by
// the autotune searcher (autotune_search.cpp) one trial at a time (each timed alone) for
// end_profile_step batches, validated once at the end.
std::string experiment_yaml(const std::string& name, const std::string& model_type,
                            const std::vector<std::string>& files, const AutotuningConfig& a,
                            int ranks) {
  std::ostringstream y;
  y << "name: autotune " << json(name).dump() << "\nentrypoint: builtin:" << model_type
    << "\nhyperparameters:\n  config:\n    type: categorical\n    vals:\n";
  for (const std::string& f : files) y << "      - " << json(f).dump() << "\n";
  y << "searcher:\n  name: autotune\n  metric: " << a.metric
    << "\n  smaller_is_better: " << (a.metric == "latency" ? "true" : "false")
    << "\n  max_length: {batches: " << a.end_profile_step << "}\n  tuner_type: " << a.tuner_type
    << "\n  tuner_num_trials: " << a.tuner_num_trials
    << "\n  tuner_early_stopping: " << a.tuner_early_stopping << "\n"
    << "min_validation_period: {batches: " << a.end_profile_step << "}\n"
    << "scheduling_unit: " << a.end_profile_step << "\n"
    << "resources: {slots_per_trial: " << ranks << ", max_slots: " << ranks << "}\n"
    << "max_restarts: 0\ncheckpoint_policy: none\n";
  return y.str();
}

// The points that fit, in gridsearch's order (the searcher picks among them).
std::vector<size_t> fitting_points(const std::vector<AutotunePoint>& points) {
  std::vector<size_t> out;
  for (size_t i = 0; i < points.size(); ++i)
    if (points[i].fits) out.push_back(i);
  return out;
}

bool better(double a, double b, const std::string& metric) {
  return metric == "latency" ? a < b : a > b;
}

// The finished trials' (point name, metric) in the order they ran.
std::vector<std::pair<std::string, double>> finished_trials(const ExperimentStore& store,
                                                            int64_t experiment,
                                                            const std::string& metric) {
  std::vector<std::pair<std::string, double>> out;
  std::vector<TrialRecord> trials = store.trials(experiment);
  std::sort(trials.begin(), trials.end(),
            [](const TrialRecord& a, const TrialRecord& b) { return a.request_id < b.request_id; });
  for (const TrialRecord& t : trials) {
    if (t.state != "COMPLETED") continue;
    const auto m = store.best_validation(t.id, metric, metric == "latency");
    if (m) out.emplace_back(fs::path(t.hparams.value("config", "")).stem().string(), *m);
  }
  return out;
}

}  // namespace

bool autotune_stale(const std::vector<double>& metrics, int64_t patience,
                    const std::string& metric) {
  if (metrics.empty()) return false;
  size_t best = 0;
  for (size_t i = 1; i < metrics.size(); ++i)
    if (better(metrics[i], metrics[best], metric)) best = i;
  return static_cast<int64_t>(metrics.size() - 1 - best) >= patience;
}

namespace {

// Writes each chosen point's trial config and the experiment file in exps_dir; returns the
// experiment file.
fs::path write_search_files(const AutotuneOptions& o, const io::TrainConfig& cfg,
                            const json& original, const AutotuneResult& r,
                            const std::vector<size_t>& chosen) {
  const AutotuningConfig& a = autotuning_config(cfg);
  const fs::path exps = a.exps_dir;
  fs::create_directories(exps);
  std::vector<std::string> files;
  for (size_t i : chosen) {
    files.push_back(r.points[i].name + ".json");
    write_json(exps / files.back(), trial_config(original, r.points[i]));
  }
  const fs::path yaml = exps / "autotune.yaml";
  io::write_file_atomically(yaml.string(), [&](std::ostream& out) {
    out << experiment_yaml(fs::path(o.config_path).filename().string(), cfg.model.type, files, a,
                           o.ranks);
  });
  return yaml;
}

// Runs the experiment to its end: a progress line with an ETA as each trial finishes, and
// tuner_early_stopping's stop.
void run_search(const AutotuneOptions& o, const AutotuningConfig& a, ExperimentStore& store,
                size_t trials, AutotuneResult& r) {
  auto log = [&o](const std::string& line) {
    if (o.log) o.log(line);
  };
  RunnerOptions ro;
  ro.device = o.device;
  ro.log = log;
  const auto start = std::chrono::steady_clock::now();
  size_t reported = 0;
  ro.on_change = [&](int64_t e) {
    const auto finished = finished_trials(store, e, a.metric);
    if (finished.size() == reported) return;
    reported = finished.size();
    const double spent =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = spent / static_cast<double>(reported) *
                       static_cast<double>(trials - std::min(reported, trials));
    std::ostringstream line;
    line << "autotune: " << reported << "/" << trials << " trials, last " << finished.back().first
         << " " << a.metric << " " << finished.back().second << ", ETA "
         << static_cast<int64_t>(eta) << " s";
    log(line.str());
  };
  RunnerLock lock(o.store_dir, r.experiment, 60.0);
  ExperimentRunner(store, o.store_dir, r.experiment, ro).run();
}

// Each point's trial state and metric from the store, and the best point.
void collect_results(const ExperimentStore& store, const std::string& metric, AutotuneResult& r) {
  for (const TrialRecord& t : store.trials(r.experiment)) {
    const std::string name = fs::path(t.hparams.value("config", "")).stem().string();
    for (size_t i = 0; i < r.points.size(); ++i) {
      if (r.points[i].name != name) continue;
      r.points[i].state = t.state;
      if (t.state == "COMPLETED")
        r.points[i].metric = store.best_validation(t.id, metric, metric == "latency");
      if (r.points[i].metric &&
          (!r.best || better(*r.points[i].metric, *r.points[*r.best].metric, metric)))
        r.best = i;
    }
  }
}

// ds_config_optimal.json (the original with the best point's keys) and summary.txt.
void write_results(const fs::path& results, const json& original, int64_t limit,
                   AutotuneResult& r) {
  fs::create_directories(results);
  if (r.best) {
    json optimal = merged(original, r.points[*r.best].tuned_keys);
    // (A config that turned the section on for its trials gets it off: it trains.)
    if (optimal.contains("autotuning") && optimal["autotuning"].value("enabled", false))
      optimal["autotuning"]["enabled"] = false;
    r.optimal_config = (results / "ds_config_optimal.json").string();
    write_json(r.optimal_config, optimal);
  }
  const std::string table = autotune_table(r, limit);
  io::write_file_atomically((results / "summary.txt").string(),
                            [&](std::ostream& out) { out << table; });
}

}  // namespace

AutotuneResult autotune(const AutotuneOptions& o) {
  const std::string text = io::read_text_file(o.config_path);
  const io::TrainConfig cfg = launch::parse_config(text, o.ranks, o.config_path);
  const AutotuningConfig& a = autotuning_config(cfg);
  const int64_t limit = o.memory_limit > 0 ? o.memory_limit : default_memory_limit(o.ranks);
  AutotuneResult r;
  r.metric = a.metric;
  r.points = autotune_points(text, o.config_path, o.ranks, limit);
  TS_CHECK(a.overwrite || (!fs::exists(fs::path(a.exps_dir) / "autotune.yaml") &&
                           !fs::exists(fs::path(a.results_dir) / "ds_config_optimal.json")),
           "autotune: ", a.exps_dir, " or ", a.results_dir,
           " holds an earlier search and autotuning.overwrite is false");
  const std::vector<size_t> chosen = fitting_points(r.points);
  TS_CHECK(!chosen.empty(), "autotune: no point fits in ", limit,
           " bytes per rank (the smallest predicted: ",
           std::min_element(r.points.begin(), r.points.end(),
                            [](const AutotunePoint& x, const AutotunePoint& y) {
                              return x.predicted_bytes < y.predicted_bytes;
                            })
               ->predicted_bytes,
           "); raise --memory-limit or use more ranks");
  const json original = json::parse(text);
  const fs::path yaml = write_search_files(o, cfg, original, r, chosen);
  fs::create_directories(o.store_dir);
  ExperimentStore store((fs::path(o.store_dir) / "experiments.db").string());
  r.experiment = create_experiment(store, o.store_dir, yaml.string(), o.tessera);
  if (o.log)
    o.log(
        "autotune: experiment " + std::to_string(r.experiment) + ", " +
        std::to_string(chosen.size()) + " of " + std::to_string(r.points.size()) + " points fit; " +
        a.tuner_type + " runs at most " +
        std::to_string(std::min<int64_t>(a.tuner_num_trials, static_cast<int64_t>(chosen.size()))));
  const size_t budget = std::min(chosen.size(), static_cast<size_t>(a.tuner_num_trials));
  run_search(o, a, store, budget, r);
  collect_results(store, a.metric, r);
  size_t ran = 0;
  for (const AutotunePoint& p : r.points) ran += p.state.empty() ? 0 : 1;
  r.stopped_early = ran < budget;  // (tuner_early_stopping ended the search)
  if (r.stopped_early && o.log)
    o.log("autotune: stopped after " + std::to_string(ran) +
          " trials: " + std::to_string(a.tuner_early_stopping) + " without a better " + a.metric +
          " (tuner_early_stopping)");
  write_results(a.results_dir, original, limit, r);
  return r;
}

std::string autotune_table(const AutotuneResult& r, int64_t memory_limit) {
  std::vector<size_t> order(r.points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const auto &a = r.points[x].metric, &b = r.points[y].metric;
    if (a && b) return better(*a, *b, r.metric);
    return a.has_value() && !b.has_value();
  });
  std::ostringstream t;
  t << "| rank | point | ZeRO stage | micro-batch | accumulation | predicted MB | " << r.metric
    << (r.metric == "latency" ? " (s/step)" : " (samples/s)") << " | trial |\n"
    << "|---|---|---|---|---|---|---|---|\n";
  int rank = 0;
  for (size_t i : order) {
    const AutotunePoint& p = r.points[i];
    std::ostringstream metric;
    if (p.metric) metric << *p.metric;
    std::ostringstream pruned;
    pruned << "pruned: predicted > " << static_cast<double>(memory_limit) / 1e6 << " MB";
    const std::string state = p.fits ? (p.state.empty() ? "not run" : p.state) : pruned.str();
    t << "| " << (p.metric ? std::to_string(++rank) : "") << " | " << p.name << " | " << p.stage
      << " | " << p.micro_batch << " | " << p.accumulation << " | " << p.predicted_bytes / 1000000.0
      << " | " << metric.str() << " | " << state << " |\n";
  }
  return t.str();
}

}  // namespace tessera::experiment
