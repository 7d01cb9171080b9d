// `tessera experiment create|list|describe|logs|pause|activate|kill|resume|best`: Determined's
// `det experiment` on one machine (tessera/experiment/experiment_runner.h runs them).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "cli.h"
#include "tessera/error.h"
#include "tessera/experiment/experiment_runner.h"
#include "tessera/experiment/experiment_serve.h"
#include "tessera/experiment/experiment_store.h"
#include "tessera/experiment/experiment_view.h"
#include "tessera/io/files.h"

namespace fs = std::filesystem;

namespace tessera::cli {

using experiment::best_checkpoint;
using experiment::describe_experiment;
using experiment::experiments_summary;
using experiment::serve_experiments;
using experiment::trials_table;

namespace {

const char* kExperimentHelp = R"(usage: tessera experiment <command> [--store DIR] [--json]

  create EXP.yaml [--follow] [--device D]   start a search (Determined's YAML); --follow runs it
                                            here with a live table, else in the background
  list                                      every experiment: id, name, state, trials
  describe ID                               its trials: state, batches, restarts, metric, hparams
  logs TRIAL_ID                             a trial's output (every restart appended)
  pause ID | activate ID                    trials checkpoint and stop | continue
  kill ID                                   trials killed at once; the experiment CANCELED
  resume ID [--follow] [--device D]         continue after the runner stopped or was killed
  best ID                                   the checkpoint with the best searcher metric (for
                                            `tessera export PATH/model0 OUT`)
  serve [--port P] [--host H]               a web page of the experiments, trials and curves
                                            (default 127.0.0.1:8080)

The store (an SQLite database, experiments.db, and each experiment's files) is --store DIR,
else $TESSERA_STORE, else ~/.local/share/tessera/experiments. A runner stopped by Ctrl-C (or
SIGTERM) has its trials checkpoint first; `resume` continues them bit for bit. A trial that dies
restarts from its latest checkpoint up to max_restarts times.
)";

std::string store_dir_of(const Args& a) {
  if (a.has("store")) return fs::absolute(a.get("store", "")).string();
  if (const char* env = std::getenv("TESSERA_STORE"); env && *env)
    return fs::absolute(env).string();
  const char* data = std::getenv("XDG_DATA_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = data && *data ? fs::path(data)
                        : home        ? fs::path(home) / ".local" / "share"
                                      : fs::path(".");
  return (base / "tessera" / "experiments").string();
}

experiment::ExperimentStore open_store(const std::string& dir) {
  fs::create_directories(dir);
  return experiment::ExperimentStore((fs::path(dir) / "experiments.db").string());
}

// Only `create` makes a store: any other command on a directory without one (a mistyped
// --store) is an error, not a new empty store.
void require_store(const std::string& dir, const char* command) {
  TS_CHECK(fs::exists(fs::path(dir) / "experiments.db"), "experiment ", command,
           ": no experiment store in ", io::quoted(dir),
           " (give --store DIR or set TESSERA_STORE; `tessera experiment create` makes one)");
}

int64_t id_argument(const Args& a, const char* what) {
  TS_CHECK(a.positional().size() == 1, "experiment: expected one ", what, " (see --help)");
  const std::string& s = a.positional()[0];
  size_t end = 0;
  int64_t id = 0;
  try {
    id = std::stoll(s, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  TS_CHECK(end == s.size() && id >= 1, "experiment: ", what, " must be a positive integer, got '",
           s, "'");
  return id;
}

// Runs the experiment here until it ends or the runner is stopped; the live table on stderr.
std::string follow(experiment::ExperimentStore& store, const std::string& dir, int64_t id,
                   const std::string& device, bool table) {
  experiment::RunnerLock lock(dir, id, 60.0);
  experiment::RunnerOptions o;
  o.device = device;
  // On a terminal the table is redrawn in place (below the last event line); elsewhere it is
  // printed when the trials' states change.
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto drawn = std::make_shared<int>(0);           // lines of the table on the terminal
  auto summary = std::make_shared<std::string>();  // its first line when last printed
  o.log = [drawn](const std::string& line) {
    std::cerr << line << std::endl;
    *drawn = 0;
  };
  if (table)
    o.on_change = [&store, tty, drawn, summary](int64_t e) {
      const std::string text = trials_table(describe_experiment(store, e));
      const std::string first = text.substr(0, text.find('\n'));
      if (!tty && first == *summary) return;
      if (tty && *drawn > 0) std::cerr << "\033[" << *drawn << "F\033[J";
      std::cerr << text << std::flush;
      *drawn = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
      *summary = first;
    };
  const std::string state = experiment::ExperimentRunner(store, dir, id, o).run();
  if (table) std::cerr << trials_table(describe_experiment(store, id));
  if (state == "ACTIVE" || state == "PAUSED")
    std::cerr << "experiment " << id << " left " << state << ": `tessera experiment resume " << id
              << "` continues it\n";
  return state;
}

// Starts `tessera experiment resume ID --detached` in its own session, output to runner.log.
void start_detached(const std::string& dir, int64_t id, const std::string& device) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string log = (fs::path(experiment::experiment_dir(dir, id)) / "runner.log").string();
  std::vector<std::string> args = {self,      "experiment", "resume",    std::to_string(id),
                                   "--store", dir,          "--detached"};
  if (!device.empty()) args.insert(args.end(), {"--device", device});
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  TS_CHECK(pid >= 0, "experiment: cannot start the runner");
  if (pid == 0) {
    setsid();
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    if (fd >= 0) dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Until the runner holds the lock, so that an immediate `describe` sees it running.
  for (int i = 0; i < 100 && !experiment::RunnerLock::held(dir, id); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void print_json(const nlohmann::json& j) {
  // (A name that is not UTF-8, from an older store, shows as U+FFFD rather than failing.)
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}

// The --json line of an experiment run here to its end (or its runner's stop).
void print_result(const experiment::ExperimentStore& store, int64_t id) {
  nlohmann::json out = describe_experiment(store, id);
  out["experiment_id"] = id;
  print_json(out);
}

int create(const Args& a, const std::string& dir) {
  TS_CHECK(a.positional().size() == 1, "experiment create: expected one EXP.yaml");
  auto store = open_store(dir);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const int64_t id = experiment::create_experiment(store, dir, a.positional()[0], self);
  std::cerr << "experiment " << id << " created (store " << dir << ")\n";
  const std::string device = a.get("device", "");
  if (!a.has("follow")) {
    start_detached(dir, id, device);
    std::cerr << "running in the background: `tessera experiment describe " << id
              << "`, its runner's log " << experiment::experiment_dir(dir, id) << "/runner.log\n";
    if (a.has("json")) print_json({{"experiment_id", id}, {"state", "ACTIVE"}});
    return 0;
  }
  const std::string state = follow(store, dir, id, device, true);
  if (a.has("json")) print_result(store, id);
  return state == "COMPLETED" || state == "ACTIVE" || state == "PAUSED" ? 0 : 1;
}

int resume(const Args& a, const std::string& dir) {
  const int64_t id = id_argument(a, "experiment ID");
  require_store(dir, "resume");
  auto store = open_store(dir);
  const std::string state = store.experiment(id).state;
  TS_CHECK(state == "ACTIVE" || state == "PAUSED" || state.rfind("STOPPING", 0) == 0, "experiment ",
           id, " is ", state, ": nothing to resume");
  TS_CHECK(a.has("detached") || !experiment::RunnerLock::runner_alive(dir, id), "experiment ", id,
           " is already running (its runner's pid is in ", experiment::experiment_dir(dir, id),
           "/runner.lock)");
  if (experiment::RunnerLock::held(dir, id))
    std::cerr << "experiment " << id
              << ": waiting for the trials of its stopped runner to checkpoint and stop\n";
  if (!a.has("follow") && !a.has("detached")) {
    start_detached(dir, id, a.get("device", ""));
    std::cerr << "experiment " << id << " resumed in the background\n";
    if (a.has("json")) print_json({{"experiment_id", id}, {"state", state}});
    return 0;
  }
  const std::string end = follow(store, dir, id, a.get("device", ""), !a.has("detached"));
  if (a.has("json")) print_result(store, id);
  return end == "ERROR" ? 1 : 0;
}

// pause, activate, kill: the new state in the store, which the runner carries out.
int request(const Args& a, const std::string& dir, const std::string& verb) {
  const int64_t id = id_argument(a, "experiment ID");
  require_store(dir, verb.c_str());
  auto store = open_store(dir);
  const std::string state = store.experiment(id).state;
  TS_CHECK(!experiment::is_final_state(state), "experiment ", id, " has ended (", state, ")");
  const bool running = experiment::RunnerLock::runner_alive(dir, id);
  if (verb == "pause") {
    store.set_experiment_state(id, "PAUSED");
  } else if (verb == "activate") {
    store.set_experiment_state(id, "ACTIVE");
    if (!running) start_detached(dir, id, "");
  } else if (running) {
    store.set_experiment_state(id, "STOPPING_KILLED");
    for (int i = 0; i < 600 && store.experiment(id).state != "CANCELED"; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } else {
    for (const auto& t : store.trials(id))
      if (!experiment::is_final_state(t.state)) store.set_trial_state(t.id, "CANCELED");
    store.set_experiment_state(id, "CANCELED");
  }
  const std::string now = store.experiment(id).state;
  std::cerr << "experiment " << id << ": " << now << "\n";
  if (a.has("json")) print_json({{"experiment_id", id}, {"state", now}});
  return 0;
}

int logs(const Args& a, const std::string& dir) {
  const int64_t trial = id_argument(a, "TRIAL_ID");
  require_store(dir, "logs");
  auto store = open_store(dir);
  const experiment::TrialRecord t = store.trial(trial);
  const fs::path path =
      fs::path(experiment::trial_dir(dir, t.experiment_id, t.request_id)) / "trial.log";
  std::ifstream in(path);
  TS_CHECK(in, "trial ", trial, " has no log yet (", path.string(), ")");
  std::cout << in.rdbuf();
  return 0;
}

}  // namespace

std::string experiment_store_dir(const Args& a) {
  return store_dir_of(a);
}

int experiment_main(int argc, char** argv) {
  const std::string sub = argc > 2 ? argv[2] : "";
  const Args a(argc, argv, 3, {"json", "help", "follow", "detached"},
               {"store", "device", "port", "host"});
  if (sub.empty() || sub == "--help" || sub == "-h" || a.has("help")) {
    std::cout << kExperimentHelp;
    return sub.empty() ? 2 : 0;
  }
  const std::string dir = store_dir_of(a);
  if (sub == "create") return create(a, dir);
  if (sub == "resume") return resume(a, dir);
  if (sub == "pause" || sub == "activate" || sub == "kill") return request(a, dir, sub);
  if (sub == "logs") return logs(a, dir);
  if (sub == "serve") {
    const int64_t port = a.get_int("port", 8080);
    TS_CHECK(port >= 1 && port <= 65535, "experiment serve: --port must be 1..65535, got ", port);
    require_store(dir, "serve");
    return serve_experiments(dir, a.get("host", "127.0.0.1"), static_cast<int>(port));
  }
  if (sub == "list") {
    if (!fs::exists(fs::path(dir) / "experiments.db")) {  // (listing creates nothing)
      std::cerr << "no experiments: no store in " << io::quoted(dir) << " yet\n";
      if (a.has("json")) print_json({{"experiments", nlohmann::json::array()}});
      return 0;
    }
    const nlohmann::json all = experiments_summary(open_store(dir));
    for (const auto& e : all["experiments"])
      std::printf("%4lld  %-24s %-16s %s\n", static_cast<long long>(e["id"].get<int64_t>()),
                  e["name"].get<std::string>().c_str(), e["state"].get<std::string>().c_str(),
                  e.contains("error") ? e["error"].get<std::string>().c_str()
                                      : (e["trials"].dump() + " trials").c_str());
    if (a.has("json")) print_json(all);
    return 0;
  }
  if (sub == "describe") {
    const int64_t id = id_argument(a, "experiment ID");
    require_store(dir, "describe");
    auto store = open_store(dir);
    const nlohmann::json d = describe_experiment(store, id);
    std::cout << trials_table(d);  // a result: stdout (with --json, the last line is JSON)
    if (a.has("json")) print_json(d);
    return 0;
  }
  if (sub == "best") {
    const int64_t id = id_argument(a, "experiment ID");
    require_store(dir, "best");
    auto store = open_store(dir);
    const auto best = best_checkpoint(store, id);
    TS_CHECK(best, "experiment ", id, " has no checkpoint with a validation yet");
    std::cout << (*best)["path"].get<std::string>() << "\n";
    if (a.has("json")) print_json(*best);
    return 0;
  }
  fail("experiment: unknown command '", sub, "' (see tessera experiment --help)");
}

}  // namespace tessera::cli
