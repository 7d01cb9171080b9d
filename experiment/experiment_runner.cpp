#include "tessera/experiment/experiment_runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "trial_reports.h"

#include "tessera/engine/stop_signals.h"
#include "tessera/error.h"
#include "tessera/experiment/checkpoint_gc.h"
#include "tessera/experiment/search_method.h"
#include "tessera/experiment/trial_process.h"
#include "tessera/trial/checkpoint_index.h"
#include "tessera/trial/experiment_config.h"
#include "tessera/trial/metrics_report.h"

namespace fs = std::filesystem;

namespace tessera::experiment {

// (Named, not anonymous: Impl holds them, and an anonymous type in a member trips GCC's
// -Wsubobject-linkage once this file is part of a unity build.)
namespace runner_state {

// Why the runner stopped a trial process, which decides the trial's state after it exits.
enum class StopReason { None, Searcher, Pause, Kill, Runner, Invalid };

struct TrialRun {
  int64_t request_id = 0, id = 0;  // the searcher's id; the store's
  nlohmann::json hparams;
  std::string dir;
  std::unique_ptr<TrialProcess> process;
  std::unique_ptr<trial::MetricsTail> tail;
  int64_t last_training = -1, last_validation = -1;  // batches of the last reports stored
  std::set<std::string> checkpoints;                 // the uuids the store has
  std::string index_error;  // why its checkpoints.json was last unreadable (said once)
  StopReason stop = StopReason::None;
  std::string state = "ACTIVE";
  int64_t restarts = 0;
};

}  // namespace runner_state
using runner_state::StopReason;
using runner_state::TrialRun;

struct ExperimentRunner::Impl {
  ExperimentStore& store;
  std::string store_dir;
  int64_t experiment;
  RunnerOptions options;
  trial::ExperimentConfig config;
  ExperimentFiles files;
  std::unique_ptr<SearchMethod> searcher;
  std::map<int64_t, TrialRun> trials;    // by request id
  std::map<int64_t, int64_t> validated;  // request id -> batches the searcher has seen
  std::set<int64_t> exited;              // request ids whose exit the searcher has seen
  int64_t max_slots = 1;
  bool changed = true;
  std::chrono::steady_clock::time_point last_report{};

  Impl(ExperimentStore& s, std::string dir, int64_t e, RunnerOptions o)
      : store(s), store_dir(std::move(dir)), experiment(e), options(std::move(o)) {}

  void log(const std::string& line) const {
    if (options.log) options.log(line);
  }

  void load();
  void save_searcher() {
    nlohmann::json seen = nlohmann::json::object();
    for (const auto& [r, b] : validated) seen[std::to_string(r)] = b;
    store.save_searcher_state(experiment,
                              {{"searcher", searcher->snapshot()},
                               {"validated", seen},
                               {"exited", std::vector<int64_t>(exited.begin(), exited.end())}});
  }
  void apply(const std::vector<Action>& actions);
  void replay_unseen();
  void launch(TrialRun& t);
  std::string job_name(const TrialRun& t) const {
    return "tessera-e" + std::to_string(experiment) + "-t" + std::to_string(t.request_id);
  }
  void kill(TrialRun& t);
  void launch_queued();
  void read_reports(TrialRun& t);
  void sync_checkpoints(TrialRun& t);
  void on_validation(TrialRun& t, const nlohmann::json& metrics, int64_t batches);
  void on_exit(TrialRun& t, const ExitStatus& status);
  void end_trial(TrialRun& t, const std::string& state, bool early);
  void collect_checkpoints();
  void set_trial_state(TrialRun& t, const std::string& state) {
    if (t.state == state) return;
    store.set_trial_state(t.id, state);
    t.state = state;
    changed = true;
  }
  bool follow_requests(std::string& experiment_state);
  std::string finish();
  void report_change() {
    const auto now = std::chrono::steady_clock::now();
    if (!changed || now - last_report < std::chrono::seconds(1)) return;
    changed = false;
    last_report = now;
    if (options.on_change) options.on_change(experiment);
  }
};

void ExperimentRunner::Impl::load() {
  const ExperimentRecord rec = store.experiment(experiment);
  files = read_experiment_files(store_dir, experiment);
  config = trial::ExperimentConfig::parse(rec.config, files.yaml);
  config.path = files.yaml;
  // Slurm schedules its jobs itself: no limit here unless max_slots sets one.
  const auto cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  max_slots = config.max_slots > 0          ? config.max_slots
              : config.scheduler == "slurm" ? std::numeric_limits<int32_t>::max()
                                            : cores;
  searcher = make_search_method(config);
  // Each slot's share of the cores for the trials' OpenMP threads, unless the user chose.
  if (!std::getenv("OMP_NUM_THREADS") && config.scheduler == "local") {
    setenv("OMP_NUM_THREADS", std::to_string(std::max<int64_t>(1, cores / max_slots)).c_str(), 1);
  }
  for (const TrialRecord& t : store.trials(experiment)) {
    TrialRun& run = trials[t.request_id];
    run.request_id = t.request_id;
    run.id = t.id;
    run.hparams = t.hparams;
    run.state = t.state;
    run.restarts = t.restarts;
    run.dir = files.trial_dir(t.request_id);
    for (const MetricRecord& m : store.metrics(t.id))
      (m.kind == "training" ? run.last_training : run.last_validation) = m.batches;
    for (const CheckpointRecord& c : store.checkpoints(t.id)) run.checkpoints.insert(c.uuid);
  }
  if (rec.searcher_state.is_null()) {
    apply(searcher->initial_trials());
  } else {
    searcher->restore(rec.searcher_state.at("searcher"));
    for (const auto& [r, b] : rec.searcher_state.at("validated").items())
      validated[std::stoll(r)] = b.get<int64_t>();
    for (int64_t r : rec.searcher_state.at("exited")) exited.insert(r);
    replay_unseen();
  }
  save_searcher();
}

// Events the store has and the saved searcher state has not (the last runner died between
// recording one and saving the searcher): given to the searcher again, in order.
void ExperimentRunner::Impl::replay_unseen() {
  for (auto& [r, t] : trials) {
    for (const MetricRecord& m : store.metrics(t.id, "validation"))
      if (m.batches > validated[r] && m.metrics.contains(config.searcher.metric) &&
          m.metrics[config.searcher.metric].is_number()) {
        validated[r] = m.batches;
        apply(searcher->validation_completed(r, m.batches,
                                             m.metrics[config.searcher.metric].get<double>()));
      }
    if (is_final_state(t.state) && !exited.count(r)) {
      exited.insert(r);
      apply(t.state == "COMPLETED" ? searcher->trial_exited(r)
                                   : searcher->trial_exited_early(r, ExitReason::Errored));
    }
  }
}

void ExperimentRunner::Impl::apply(const std::vector<Action>& actions) {
  for (const Action& a : actions) {
    if (a.kind == Action::Create) {
      if (trials.count(a.request_id)) continue;  // recorded before the last runner died
      TrialRun& t = trials[a.request_id];
      t.request_id = a.request_id;
      t.hparams = a.hparams;
      t.id = store.add_trial(experiment, a.request_id, a.hparams);
      t.dir = files.trial_dir(a.request_id);
      log("trial " + std::to_string(a.request_id) + " created: " + a.hparams.dump());
      changed = true;
      apply(searcher->trial_created(a.request_id));
    } else {
      auto it = trials.find(a.request_id);
      if (it == trials.end() || is_final_state(it->second.state)) continue;
      TrialRun& t = it->second;
      if (t.process) {
        t.stop = StopReason::Searcher;  // answered "stop" at its validation (read_reports)
        log("trial " + std::to_string(a.request_id) + " stopped by the searcher at " +
            std::to_string(t.last_validation) + " batches");
      } else {
        end_trial(t, "COMPLETED", false);
      }
    }
  }
}

void ExperimentRunner::Impl::launch(TrialRun& t) {
  fs::create_directories(t.dir);
  std::vector<std::string> program = files.command;
  program.insert(program.end(),
                 {files.yaml, "--trial-id", std::to_string(t.request_id), "--hparams",
                  t.hparams.dump(), "--trial-dir", t.dir, "--json", "--searcher-stdin"});
  if (!files.uuid.empty()) program.insert(program.end(), {"--experiment-uuid", files.uuid});
  if (!options.device.empty()) program.insert(program.end(), {"--device", options.device});
  const std::vector<std::string> argv = trial_command_line(config, program, job_name(t));
  t.tail = std::make_unique<trial::MetricsTail>(t.dir);
  t.process = std::make_unique<TrialProcess>(argv, (fs::path(t.dir) / "trial.log").string());
  t.stop = StopReason::None;
  set_trial_state(t, "ACTIVE");
  log("trial " + std::to_string(t.request_id) + " running (pid " +
      std::to_string(t.process->pid()) + ", " + std::to_string(config.slots_per_trial) +
      " slot(s))");
}

// SIGKILL to the trial's processes; a Slurm job is also cancelled (srun killed outright may
// leave its tasks running).
void ExperimentRunner::Impl::kill(TrialRun& t) {
  if (!t.process) return;
  t.process->kill();
  if (config.scheduler == "slurm") {
    TrialProcess scancel({"scancel", "--name", job_name(t)},
                         (fs::path(t.dir) / "trial.log").string());
    for (int i = 0; i < 100 && !scancel.poll(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void ExperimentRunner::Impl::launch_queued() {
  int64_t used = 0;
  for (const auto& [r, t] : trials)
    if (t.process) used += config.slots_per_trial;
  for (auto& [r, t] : trials) {
    if (t.process || t.state != "ACTIVE") continue;
    if (used + config.slots_per_trial > max_slots) break;
    launch(t);
    used += config.slots_per_trial;
  }
}

void ExperimentRunner::Impl::read_reports(TrialRun& t) {
  if (!t.tail) return;
  using Kind = trial::MetricsReport::Kind;
  for (const trial::MetricsReport& r : t.tail->read_new()) {
    if (r.kind == Kind::Training && r.batches > t.last_training) {
      store.report_training(t.id, r.batches, r.metrics);
      t.last_training = r.batches;
      changed = true;
    } else if (r.kind == Kind::Validation && r.batches > t.last_validation) {
      store.report_validation(t.id, r.batches, r.metrics);
      t.last_validation = r.batches;
      changed = true;
      on_validation(t, r.metrics, r.batches);
    }
    // The trial waits for the searcher's answer (a repeated validation after a restart too).
    if (r.kind == Kind::Validation && r.awaits_decision && t.process)
      t.process->send(t.stop == StopReason::None ? "continue" : "stop");
  }
}

void ExperimentRunner::Impl::on_validation(TrialRun& t, const nlohmann::json& metrics,
                                           int64_t batches) {
  const std::string& name = config.searcher.metric;
  if (!metrics.contains(name) || !metrics[name].is_number()) {
    std::string has;
    for (const auto& [k, v] : metrics.items()) has += (has.empty() ? "" : ", ") + k;
    log("trial " + std::to_string(t.request_id) + ": its validation has no number '" + name +
        "' (searcher.metric); it reports: " + has);
    t.stop = StopReason::Invalid;
    kill(t);
    return;
  }
  if (batches <= validated[t.request_id]) return;
  validated[t.request_id] = batches;
  apply(searcher->validation_completed(t.request_id, batches, metrics[name].get<double>()));
  save_searcher();
}

// The store's checkpoints of the trial follow its checkpoints.json (the trial deletes what
// checkpoint_storage does not keep).
void ExperimentRunner::Impl::sync_checkpoints(TrialRun& t) {
  trial::CheckpointIndex index;
  try {
    index = trial::CheckpointIndex::read(t.dir);
  } catch (const Error& e) {  // (the trial writes it atomically: damaged on disk, not in flight)
    if (t.index_error != e.what())
      log("trial " + std::to_string(t.request_id) +
          ": its checkpoints are not followed: " + e.what());
    t.index_error = e.what();
    return;  // the store keeps what it had
  }
  t.index_error.clear();
  std::set<std::string> now;
  for (const trial::CheckpointIndexEntry& e : index.checkpoints) {
    now.insert(e.uuid);
    if (t.checkpoints.count(e.uuid)) continue;
    CheckpointRecord c;
    c.uuid = e.uuid;
    c.path = (fs::path(t.dir) / "checkpoints" / e.uuid).string();
    c.trial_id = t.id;
    c.batches = e.batches;
    if (e.searcher_metric) c.metrics = {{config.searcher.metric, *e.searcher_metric}};
    store.add_checkpoint(c);
    t.checkpoints.insert(e.uuid);
  }
  for (auto it = t.checkpoints.begin(); it != t.checkpoints.end();) {
    if (now.count(*it)) {
      ++it;
      continue;
    }
    store.delete_checkpoint(*it);
    it = t.checkpoints.erase(it);
  }
}

namespace {

// The state in the trial's last result line (`--json`): COMPLETED or STOPPED ("" if none).
std::string reported_state(const std::string& trial_dir) {
  std::ifstream in(fs::path(trial_dir) / "trial.log");
  std::string line, state;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("state") && j["state"].is_string())
      state = j["state"];
  }
  return state;
}

}  // namespace

void ExperimentRunner::Impl::on_exit(TrialRun& t, const ExitStatus& status) {
  read_reports(t);
  sync_checkpoints(t);
  t.process.reset();
  t.tail.reset();
  const std::string who = "trial " + std::to_string(t.request_id);
  switch (t.stop) {
    case StopReason::Searcher:
      return end_trial(t, "COMPLETED", false);
    case StopReason::Pause:
      log(who + " paused");
      return set_trial_state(t, "PAUSED");
    case StopReason::Kill:
      return end_trial(t, "CANCELED", true);
    case StopReason::Invalid:
      return end_trial(t, "ERROR", true);
    case StopReason::Runner:
      return;  // stays ACTIVE: the next runner resumes it
    case StopReason::None:
      break;
  }
  // Reached max_length, or ended by something else than the runner: a failure.
  if (status.ok() && reported_state(t.dir) == "COMPLETED") {
    log(who + " completed at " + std::to_string(t.last_training) + " batches");
    return end_trial(t, "COMPLETED", false);
  }
  const std::string why = status.ok() ? "stopped by someone else" : status.str();
  if (t.restarts < config.max_restarts) {
    store.count_restart(t.id);
    ++t.restarts;
    changed = true;
    log(who + " failed (" + why + "): restart " + std::to_string(t.restarts) + " of " +
        std::to_string(config.max_restarts) + " from its latest checkpoint");
    return;  // still ACTIVE: launched again when slots allow
  }
  log(who + " failed (" + why + ") after " + std::to_string(t.restarts) +
      " restarts (max_restarts): ERROR; its log: " + (fs::path(t.dir) / "trial.log").string());
  end_trial(t, "ERROR", true);
}

// checkpoint_storage's rules on the ended trials' checkpoints (checkpoint_gc.h).
void ExperimentRunner::Impl::collect_checkpoints() {
  std::vector<TrialCheckpoints> all;
  for (const auto& [r, t] : trials)
    all.push_back({is_final_state(t.state) && !t.process, store.checkpoints(t.id)});
  const std::vector<std::string> doomed = checkpoints_to_delete(all, config);
  for (auto& [r, t] : trials)
    for (const std::string& uuid : doomed)
      if (t.checkpoints.erase(uuid)) {
        try {
          delete_trial_checkpoint(t.dir, uuid);
        } catch (const Error& e) {
          log("trial " + std::to_string(t.request_id) + ": checkpoint " + uuid +
              " kept on disk: " + e.what());
        }
        store.delete_checkpoint(uuid);
      }
}

void ExperimentRunner::Impl::end_trial(TrialRun& t, const std::string& state, bool early) {
  set_trial_state(t, state);
  collect_checkpoints();
  if (exited.insert(t.request_id).second)
    apply(early ? searcher->trial_exited_early(t.request_id, state == "CANCELED"
                                                                 ? ExitReason::UserCanceled
                                                                 : ExitReason::Errored)
                : searcher->trial_exited(t.request_id));
  save_searcher();
}

// The experiment's state as `pause`, `activate` and `kill` set it, carried out on the trials.
// False once the experiment has ended.
bool ExperimentRunner::Impl::follow_requests(std::string& state) {
  state = store.experiment(experiment).state;
  for (auto& [r, t] : trials) {
    if (is_final_state(t.state)) continue;
    if (state == "PAUSED") {
      if (t.process && t.stop == StopReason::None) {
        t.stop = StopReason::Pause;
        t.process->send("stop");  // (if it waits for an answer)
        t.process->request_stop();
      } else if (!t.process) {
        set_trial_state(t, "PAUSED");
      }
    } else if (state == "ACTIVE" && t.state == "PAUSED" && !t.process) {
      set_trial_state(t, "ACTIVE");
    } else if (state == "STOPPING_KILLED") {
      if (t.process && t.stop != StopReason::Kill) {
        t.stop = StopReason::Kill;
        kill(t);
      } else if (!t.process) {
        end_trial(t, "CANCELED", true);
      }
    }
  }
  return !is_final_state(state);
}

std::string ExperimentRunner::Impl::finish() {
  bool all_errored = !trials.empty();
  for (const auto& [r, t] : trials) all_errored &= t.state == "ERROR";
  const std::string state = all_errored ? "ERROR" : "COMPLETED";
  store.set_experiment_state(experiment, state);
  log("experiment " + std::to_string(experiment) + " " + state);
  return state;
}

ExperimentRunner::ExperimentRunner(ExperimentStore& store, std::string store_dir,
                                   int64_t experiment, RunnerOptions options)
    : impl_(std::make_unique<Impl>(store, std::move(store_dir), experiment, std::move(options))) {}

ExperimentRunner::~ExperimentRunner() = default;

std::string ExperimentRunner::run() {
  Impl& m = *impl_;
  engine::StopSignals signals(true);
  m.load();
  const auto pause = std::chrono::duration<double>(m.options.poll_seconds);
  for (bool stopping = false;; std::this_thread::sleep_for(pause)) {
    if (!stopping && engine::stop_signal_received() != 0) {
      stopping = true;  // every trial checkpoints and stops; the experiment stays resumable
      m.log("runner stopping: the trials checkpoint and stop (resume continues them)");
      for (auto& [r, t] : m.trials)
        if (t.process && t.stop == StopReason::None) {
          t.stop = StopReason::Runner;
          t.process->send("stop");
          t.process->request_stop();
        }
    }
    std::string state;
    const bool going = m.follow_requests(state);
    if (state == "ACTIVE" && !stopping) m.launch_queued();
    bool running = false;
    for (auto& [r, t] : m.trials) {
      if (!t.process) continue;
      m.read_reports(t);
      m.sync_checkpoints(t);
      if (const auto status = t.process->poll()) m.on_exit(t, *status);
      running |= t.process != nullptr;
    }
    m.report_change();
    if (running) continue;
    if (stopping) return m.store.experiment(m.experiment).state;
    if (state == "STOPPING_KILLED") {
      m.store.set_experiment_state(m.experiment, "CANCELED");
      return "CANCELED";
    }
    if (!going) return state;
    bool open = false;
    for (const auto& [r, t] : m.trials) open |= !is_final_state(t.state);
    if (!open) return m.finish();
  }
}

}  // namespace tessera::experiment
