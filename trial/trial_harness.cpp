#include "tessera/trial/trial_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "harness_run.h"
#include "tessera/engine/stop_signals.h"
#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/identity.h"
#include "tessera/io/json_fields.h"
#include "tessera/trial/metrics_report.h"

namespace tessera::trial {

namespace fs = std::filesystem;

std::string trial_directory(const ExperimentConfig& config, int64_t trial_id) {
  fs::path root = config.checkpoint_storage.host_path.empty()
                      ? fs::path("checkpoints")
                      : fs::path(config.checkpoint_storage.host_path);
  if (!config.checkpoint_storage.storage_path.empty())
    root /= config.checkpoint_storage.storage_path;
  // The name is one file name, whatever it holds ("../x" stays under root).
  return (root / io::path_component(config.name, "experiment") /
          ("trial_" + std::to_string(trial_id)))
      .string();
}

nlohmann::json TrialResult::to_json() const {
  return {{"trial_id", trial_id},
          {"batches", batches},
          {"state", state},
          {"validation_metrics", validation_metrics},
          {"checkpoint", checkpoint}};
}

namespace {

std::string fmt_duration(double secs) {
  const int64_t s = std::isfinite(secs) && secs > 0 ? static_cast<int64_t>(secs) : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", static_cast<long>(s / 60), static_cast<long>(s % 60));
  return buf;
}

std::string fmt_metrics(const nlohmann::json& metrics) {
  std::string out;
  for (const auto& [k, v] : metrics.items()) {
    if (k == "batches" || k == "epochs") continue;
    char buf[64];
    if (v.is_number())
      std::snprintf(buf, sizeof buf, "%.6g", v.get<double>());
    else
      std::snprintf(buf, sizeof buf, "%s", v.dump().substr(0, 40).c_str());
    out += (out.empty() ? "" : ", ") + k + " " + buf;
  }
  return out;
}

nlohmann::json to_json(const Metrics& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

// Every slot's value of `text` from rank 0.
std::string from_chief(parallel::ProcessGroup& group, const std::string& text) {
  if (group.size() == 1) return text;
  return all_gather_strings(group, group.rank() == 0 ? text : std::string()).front();
}

}  // namespace

TrialHarness::Run::Run(TrialContext& c, TrialRunner& r, HarnessOptions o)
    : context(c), runner(r), options(o) {
  chief = context.distributed.is_chief();
  trial_dir = context.info().trial_dir;
}

void TrialHarness::Run::log(const std::string& line) const {
  if (chief && !options.quiet)
    std::cout << "trial " << context.get_trial_id() << ": " << line << std::endl;
}

int64_t TrialHarness::Run::length_in_batches(const Length& length) const {
  if (length.unit == Length::Epochs && !context.get_experiment_config().records_per_epoch)
    return length.value * epoch_len;  // epochs of the training data loader
  return context.get_experiment_config().batches(length, global_batch);
}

bool TrialHarness::Run::stop_agreed() {
  double stop = engine::stop_signal_received() != 0 || context.stop_requested_ ? 1.0 : 0.0;
  if (context.distributed.size > 1)
    stop = context.group().all_reduce_scalar(stop, parallel::ReduceOp::Max);
  return stop != 0.0;
}

void TrialHarness::Run::step_lr_schedulers(int64_t batch_idx) {
  if (!context.should_communicate_and_update()) return;  // only with an optimizer step
  const int64_t aggregation = context.get_experiment_config().aggregation_frequency;
  for (auto& s : context.schedulers_) {
    switch (s.mode) {
      case StepMode::STEP_EVERY_BATCH:
        for (int64_t i = batch_idx - aggregation + 1; i <= batch_idx; ++i)
          if ((i + 1) % s.frequency == 0) s.scheduler->step();
        break;
      case StepMode::STEP_EVERY_OPTIMIZER_STEP:
        if ((batch_idx + 1) % s.frequency == 0) s.scheduler->step();
        break;
      case StepMode::STEP_EVERY_EPOCH:  // when the next optimizer step lands in a later epoch
        for (int64_t e = batch_idx / epoch_len; e < (batch_idx + aggregation) / epoch_len; ++e)
          if ((e + 1) % s.frequency == 0) s.scheduler->step();
        break;
      case StepMode::MANUAL_STEP:
        break;
    }
  }
}

void TrialHarness::Run::report_training(const std::vector<Metrics>& local, int64_t records,
                                        double seconds) {
  std::vector<Metrics> per_batch =
      context.distributed.size > 1 ? average_training_metrics(context.group(), local) : local;
  // Determined's make_metrics: each metric's mean over the batches that report it.
  std::map<std::string, std::pair<double, int64_t>> sums;
  for (const auto& m : per_batch)
    for (const auto& [k, v] : m) sums[k].first += v, ++sums[k].second;
  nlohmann::json avg = nlohmann::json::object();
  for (const auto& [k, s] : sums) avg[k] = s.first / static_cast<double>(s.second);
  const nlohmann::json custom = context.reducers_.reduce_metrics(context.group(), true);
  for (const auto& [k, v] : custom.items()) avg[k] = v;
  std::vector<nlohmann::json> batch_json;
  for (const auto& m : per_batch) batch_json.push_back(to_json(m));
  for (auto& [name, cb] : runner.callbacks()) cb->on_training_workload_end(avg, batch_json);
  if (context.distributed.size > 1)
    records = static_cast<int64_t>(context.group().all_reduce_scalar(static_cast<double>(records)));
  if (!chief) return;

  const int64_t n = state.batches_trained;
  auto& tb = context.get_tensorboard_writer();
  std::set<std::string> seen;
  for (size_t i = 0; i < per_batch.size(); ++i)
    for (const auto& [k, v] : per_batch[i]) {
      tb.add_scalar("Determined/" + k, v, n - static_cast<int64_t>(per_batch.size() - i));
      seen.insert(k);
    }
  for (const auto& [k, v] : avg.items())
    if (!seen.count(k) && v.is_number()) tb.add_scalar("Determined/" + k, v.get<double>(), n);
  tb.flush();
  avg["batches"] = n;
  avg["epochs"] = state.epochs_trained;
  MetricsReport report{MetricsReport::Kind::Training, n,    state.epochs_trained, avg,
                       nlohmann::json(batch_json),    false};
  report.append_to(trial_dir);

  const double rate = seconds > 0 ? static_cast<double>(records) / seconds : 0.0;
  const double per_batch_s =
      train_seconds / static_cast<double>(std::max<int64_t>(1, n - batches_at_start));
  char head[160];
  std::snprintf(head, sizeof head, "batch %ld/%ld (%.1f%%), epoch %ld | ", static_cast<long>(n),
                static_cast<long>(total_batches), 100.0 * static_cast<double>(n) / total_batches,
                static_cast<long>(state.epochs_trained));
  char tail[96];
  std::snprintf(tail, sizeof tail, " | %.1f records/s | ETA %s", rate,
                fmt_duration(per_batch_s * static_cast<double>(total_batches - n)).c_str());
  log(head + fmt_metrics(avg) + tail);
}

void TrialHarness::Run::set_training(bool on) {
  for (const auto& m : context.models()) m->train(on);
  if (auto* ds = dynamic_cast<DeepSpeedTrialContext*>(&context))
    for (const auto& e : ds->engines()) e->train(on);
}

void TrialHarness::Run::train() {
  while (state.batches_trained < total_batches) {
    set_training(true);
    context.reducers_.reset_reducers();
    std::vector<Metrics> batch_metrics;
    int64_t records = 0;
    bool validate_now = false, checkpoint_now = false, stop = false;
    const auto t0 = Clock::now();
    for (;;) {
      const int64_t batch_idx = state.batches_trained;
      const int64_t epoch_idx = batch_idx / epoch_len, in_epoch = batch_idx % epoch_len;
      context.current_batch_idx_ = batch_idx;
      if (in_epoch == 0)
        for (auto& [name, cb] : runner.callbacks()) cb->on_training_epoch_start(epoch_idx);
      runner.train_batch(epoch_idx, batch_idx, batch_metrics, records);
      step_lr_schedulers(batch_idx);
      ++state.batches_trained;
      if (in_epoch == epoch_len - 1) {
        for (auto& [name, cb] : runner.callbacks()) cb->on_training_epoch_end(epoch_idx);
        ++state.epochs_trained;
      }
      const int64_t n = state.batches_trained;
      // The end validates before it checkpoints, so the last checkpoint holds the last
      // validation (a rerun of a finished trial then has nothing left to do).
      validate_now |= (validation_period > 0 && n % validation_period == 0) || n >= total_batches;
      checkpoint_now |= checkpoint_period > 0 && n % checkpoint_period == 0;
      // A stop waits for the end of an aggregation window: accumulated gradients are not saved.
      if (context.should_communicate_and_update()) stop = stop_agreed();
      if (n % report_period == 0 || n >= total_batches || validate_now || checkpoint_now || stop)
        break;
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += seconds;
    report_training(batch_metrics, records, seconds);
    if (validate_now && !validation_current()) {
      const bool ask = options.searcher_stops && state.batches_trained < total_batches;
      validate(ask);
      if (ask && searcher_agrees_to_stop()) stop = true;
    }
    if (checkpoint_now && !checkpoint_current()) checkpoint();
    if (stop) throw StopTraining{};
  }
  if (!validation_current()) validate();
  if (!checkpoint_current()) checkpoint();
}

bool TrialHarness::Run::searcher_agrees_to_stop() {
  double stop = chief && options.searcher_stops() ? 1.0 : 0.0;
  if (context.distributed.size > 1)
    stop = context.group().all_reduce_scalar(stop, parallel::ReduceOp::Max);
  return stop != 0.0;
}

void TrialHarness::Run::validate(bool await_decision) {
  set_training(false);
  context.reducers_.reset_reducers();
  for (auto& [name, cb] : runner.callbacks()) cb->on_validation_start();
  for (auto& [name, cb] : runner.callbacks()) cb->on_validation_epoch_start();
  const auto t0 = Clock::now();
  TrialRunner::Evaluation e = runner.evaluate();
  nlohmann::json metrics = nlohmann::json::object();
  auto& group = context.group();
  if (!e.full_dataset) {
    std::vector<nlohmann::json> outputs;
    for (const auto& m : e.batch_metrics) outputs.push_back(to_json(m));
    for (auto& [name, cb] : runner.callbacks()) cb->on_validation_epoch_end(outputs);
    for (size_t i = 1; i < e.batch_metrics.size(); ++i) {
      std::string a, b;
      for (const auto& [k, v] : e.batch_metrics[0]) a += " " + k;
      for (const auto& [k, v] : e.batch_metrics[i]) b += " " + k;
      TS_CHECK(a == b,
               "evaluate_batch: validation metric names must match across batches: "
               "batch 0 has",
               a, ", batch ", i, " has", b);
    }
    double batches = static_cast<double>(e.batch_metrics.size());
    if (context.distributed.size > 1) batches = group.all_reduce_scalar(batches);
    TS_CHECK(batches > 0, "the validation data loader is empty (no batch to evaluate)");
    const Metrics reduced =
        std::holds_alternative<Reducer>(e.reducer)
            ? reduce_batch_metrics(group, e.batch_metrics, std::get<Reducer>(e.reducer))
            : reduce_batch_metrics(group, e.batch_metrics,
                                   std::get<std::map<std::string, Reducer>>(e.reducer));
    metrics = to_json(reduced);
  } else {
    metrics = nlohmann::json::parse(from_chief(group, e.metrics.dump()));
  }
  if (context.distributed.size > 1)
    e.records = static_cast<int64_t>(group.all_reduce_scalar(static_cast<double>(e.records)));
  const nlohmann::json custom = context.reducers_.reduce_metrics(group, false);
  for (const auto& [k, v] : custom.items()) metrics[k] = v;
  for (auto& [name, cb] : runner.callbacks()) cb->on_validation_end(metrics);
  state.last_val = state.batches_trained;
  last_validation = metrics;

  const auto& searcher = context.get_experiment_config().searcher;
  auto it = metrics.find(searcher.metric);
  TS_CHECK(it != metrics.end() && it->is_number(), "searcher.metric '", searcher.metric,
           "' is not a scalar among the validation metrics the trial returned (",
           fmt_metrics(metrics).empty() ? std::string("none") : fmt_metrics(metrics), ")");
  const double value = it->get<double>();
  const bool best =
      !state.best_validation || (searcher.smaller_is_better ? value < *state.best_validation
                                                            : value > *state.best_validation);
  if (best) state.best_validation = value;

  if (chief) {
    const int64_t n = state.batches_trained;
    auto& tb = context.get_tensorboard_writer();
    for (const auto& [k, v] : metrics.items())
      if (v.is_number())
        tb.add_scalar("Determined/" + (k.rfind("val", 0) == 0 ? k : "val_" + k), v.get<double>(),
                      n);
    tb.flush();
    nlohmann::json reported = metrics;
    reported["batches"] = n;
    reported["epochs"] = state.epochs_trained;
    const MetricsReport report{MetricsReport::Kind::Validation,
                               n,
                               state.epochs_trained,
                               reported,
                               nlohmann::json(),
                               await_decision};
    report.append_to(trial_dir);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    char tail[96];
    std::snprintf(tail, sizeof tail, " (%ld records in %.2f s)%s", static_cast<long>(e.records), s,
                  best ? ", best so far" : "");
    log("validation at batch " + std::to_string(n) + ": " + fmt_metrics(metrics) + tail);
  }
  const std::string& policy = context.get_experiment_config().checkpoint_policy;
  if (!checkpoint_current() && (policy == "all" || (policy == "best" && best))) checkpoint();
}

TrialHarness::TrialHarness(TrialContext& context, TrialRunner& runner, HarnessOptions options)
    : context_(context), runner_(runner), options_(options) {}

TrialHarness::~TrialHarness() = default;

namespace {

// on_trial_shutdown for every callback, however run() ends.
class ShutdownCallbacks {
 public:
  explicit ShutdownCallbacks(Callbacks& callbacks) : callbacks_(callbacks) {}
  ~ShutdownCallbacks() {
    for (auto& [name, cb] : callbacks_) {
      try {
        cb->on_trial_shutdown();
      } catch (const std::exception& e) {
        std::cerr << "callback '" << name << "': on_trial_shutdown failed: " << e.what() << "\n";
      }
    }
  }
  ShutdownCallbacks(const ShutdownCallbacks&) = delete;
  ShutdownCallbacks& operator=(const ShutdownCallbacks&) = delete;

 private:
  Callbacks& callbacks_;
};

// The epoch length every slot uses: the shortest of the slots' loaders (slots without one
// report 0 and are left out), as Determined's DeepSpeedTrial agrees on it.
int64_t agreed_epoch_length(TrialContext& context, int64_t local) {
  if (context.distributed.size == 1) return local;
  int64_t shortest = 0, longest = 0;
  for (const auto& s : all_gather_strings(context.group(), std::to_string(local))) {
    const int64_t n = std::stoll(s);
    if (n <= 0) continue;
    shortest = shortest == 0 ? n : std::min(shortest, n);
    longest = std::max(longest, n);
  }
  if (shortest < longest && context.distributed.is_chief())
    std::cerr << "warning: the training data loaders' lengths differ across slots (" << shortest
              << " to " << longest << " batches per epoch); epochs are " << shortest
              << " batches\n";
  return shortest;
}

}  // namespace

TrialResult TrialHarness::run() {
  Run r(context_, runner_, options_);
  const ExperimentConfig& c = context_.get_experiment_config();
  if (r.chief)
    io::check_writable_directory(r.trial_dir, "the trial's directory (checkpoint_storage)");
  if (r.chief && fs::is_directory(fs::path(r.trial_dir) / "checkpoints"))
    for (const auto& e : fs::directory_iterator(fs::path(r.trial_dir) / "checkpoints"))
      if (e.path().extension() == ".tmp") fs::remove_all(e.path());  // cut short by a crash
  if (context_.distributed.size > 1) context_.group().barrier();
  const std::optional<std::string> latest = r.find_latest();
  int64_t first_batch = 0;
  if (latest) {
    const auto state = io::JsonFields::parse_file(
        (fs::path(r.trial_dir) / "checkpoints" / *latest / "state.json").string());
    first_batch = state.value("batches_trained", int64_t{0});
  }
  for (auto& [name, cb] : runner_.callbacks()) cb->on_trial_startup(first_batch, latest);
  ShutdownCallbacks shutdown(runner_.callbacks());

  runner_.build_data_loaders();
  r.epoch_len = agreed_epoch_length(context_, runner_.local_epoch_length());
  TS_CHECK(r.epoch_len > 0,
           "the training data loader yields no batch (too few records for the "
           "per-slot batch size, with drop_last?)");
  context_.epoch_len_ = r.epoch_len;
  r.global_batch = context_.get_global_batch_size();
  r.total_batches = r.length_in_batches(c.searcher.max_length);
  TS_CHECK(r.total_batches > 0, "searcher.max_length (", c.searcher.max_length.str(),
           ") is less than one batch");
  if (c.min_validation_period) r.validation_period = r.length_in_batches(*c.min_validation_period);
  if (c.min_checkpoint_period) r.checkpoint_period = r.length_in_batches(*c.min_checkpoint_period);
  r.report_period = c.scheduling_unit;

  if (latest) {
    r.load(*latest);
  } else if (context_.distributed.size > 1) {
    for (const auto& m : context_.models())  // every slot starts from rank 0's weights
      for (auto& [name, t] : m->named_parameters()) context_.group().broadcast(*t, 0);
  }
  context_.initial_batch_ = r.batches_at_start = r.state.batches_trained;
  std::ostringstream head;
  head << (latest ? "resuming from checkpoint " + *latest + " at batch " +
                        std::to_string(r.state.batches_trained) + "; "
                  : std::string("starting; "))
       << r.total_batches << " batches of " << r.global_batch << " records on "
       << context_.distributed.size << " slot(s), " << r.epoch_len << " batches per epoch";
  if (r.validation_period) head << ", validation every " << r.validation_period;
  if (r.checkpoint_period) head << ", checkpoint every " << r.checkpoint_period;
  head << "; files in " << r.trial_dir;
  r.log(head.str());
  for (auto& [name, cb] : runner_.callbacks()) cb->on_training_start();

  engine::StopSignals signals(options_.handle_signals);
  TrialResult result;
  result.trial_id = context_.get_trial_id();
  try {
    if (c.perform_initial_validation && r.state.batches_trained == 0 && !r.validation_current())
      r.validate();
    r.train();
    result.state = "COMPLETED";
  } catch (const StopTraining&) {
    if (!r.checkpoint_current()) r.checkpoint();
    result.state = "STOPPED";
    r.log("stopped at batch " + std::to_string(r.state.batches_trained) +
          " with a checkpoint; run the same command again to continue");
  }
  result.batches = r.state.batches_trained;
  result.validation_metrics = r.last_validation;
  result.checkpoint = r.latest_checkpoint;
  if (result.state == "COMPLETED")
    r.log("completed " + std::to_string(result.batches) +
          " batches; last validation: " + fmt_metrics(r.last_validation));
  return result;
}

}  // namespace tessera::trial
