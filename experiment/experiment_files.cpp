// An experiment's files and its creation (experiment_runner.h).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "tessera/error.h"
#include "tessera/experiment/experiment_runner.h"
#include "tessera/experiment/experiment_validation.h"
#include "tessera/experiment/search_method.h"
#include "tessera/io/files.h"
#include "tessera/io/identity.h"
#include "tessera/models/model_registry.h"
#include "tessera/trial/experiment_config.h"

namespace fs = std::filesystem;

namespace tessera::experiment {

namespace {

// The command that runs one trial of `config`, without its arguments.
std::vector<std::string> trial_command(const trial::ExperimentConfig& config, const fs::path& yaml,
                                       const std::string& tessera) {
  const std::string& e = config.entrypoint;
  TS_CHECK(!e.empty(), yaml.string(),
           ": no 'entrypoint': ", models::registered_model_list("builtin:"),
           ", or your trial program (a path relative to this file, built with "
           "tessera/trial/run.h)");
  if (e.rfind("builtin:", 0) == 0) {
    TS_CHECK(models::has_model(e.substr(8)), yaml.string(), ": entrypoint '", e,
             "' is not a built-in trial (", models::registered_model_list("builtin:"), ")");
    return {tessera, "trial"};
  }
  if (e.find('/') == std::string::npos) return {e};  // a command on PATH
  const fs::path program = fs::absolute(yaml.parent_path() / e);
  TS_CHECK(access(program.c_str(), X_OK) == 0, yaml.string(), ": entrypoint '", e, "' (",
           program.string(), ") is not an executable program");
  return {program.string()};
}

}  // namespace

std::vector<std::string> trial_command_line(const trial::ExperimentConfig& c,
                                            const std::vector<std::string>& program,
                                            const std::string& job_name) {
  std::vector<std::string> argv;
  const std::string slots = std::to_string(c.slots_per_trial);
  if (c.scheduler == "slurm") {
    argv = {"srun",      "--mpi=pmix", "--ntasks", slots,
            "--input=0", "--job-name", job_name,   "--kill-on-bad-exit=1"};
    if (!c.slurm.partition.empty()) argv.insert(argv.end(), {"--partition", c.slurm.partition});
    if (!c.slurm.time_limit.empty()) argv.insert(argv.end(), {"--time", c.slurm.time_limit});
    if (c.slurm.gpus_per_slot > 0)
      argv.push_back("--gpus-per-task=" + std::to_string(c.slurm.gpus_per_slot));
    argv.insert(argv.end(), c.slurm.srun_args.begin(), c.slurm.srun_args.end());
  } else if (c.slots_per_trial > 1) {
    argv = {"mpirun", "-np", slots};
  }
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

std::string experiment_dir(const std::string& store_dir, int64_t experiment) {
  return (fs::path(store_dir) / ("experiment_" + std::to_string(experiment))).string();
}

ExperimentFiles read_experiment_files(const std::string& store_dir, int64_t experiment) {
  const fs::path path = fs::path(experiment_dir(store_dir, experiment)) / "experiment.json";
  std::ifstream in(path);
  TS_CHECK(in, "experiment ", experiment, ": its file ", path.string(),
           " is missing (was the store directory moved?)");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  TS_CHECK(!j.is_discarded() && j.is_object() && j.contains("yaml") && j["yaml"].is_string() &&
               j.contains("command") && j["command"].is_array() && j.contains("trials_root") &&
               j["trials_root"].is_string(),
           path.string(), ": not an experiment file");
  const std::string uuid = j.contains("uuid") && j["uuid"].is_string() ? j["uuid"] : "";
  return {j["yaml"], j["command"].get<std::vector<std::string>>(), j["trials_root"], uuid};
}

std::string ExperimentFiles::trial_dir(int64_t request_id) const {
  return (fs::path(trials_root) / ("trial_" + std::to_string(request_id))).string();
}

std::string trial_dir(const std::string& store_dir, int64_t experiment, int64_t request_id) {
  return read_experiment_files(store_dir, experiment).trial_dir(request_id);
}

int64_t create_experiment(ExperimentStore& store, const std::string& store_dir,
                          const std::string& yaml_path, const std::string& tessera) {
  const trial::ExperimentConfig config = trial::ExperimentConfig::from_file(yaml_path);
  const fs::path yaml = fs::absolute(yaml_path);
  const std::vector<std::string> command = trial_command(config, yaml, tessera);
  validate_experiment(config);  // its errors before anything is recorded
  std::ifstream in(yaml);
  std::stringstream text;
  text << in.rdbuf();
  const int64_t id = store.create_experiment(config.name, text.str());
  // Trials' files are named by the experiment's UUID, never by its name or its id in this
  // store: two stores sharing a host_path (or a store deleted while its checkpoints stay)
  // never meet each other's trials.
  const std::string uuid = io::new_uuid();
  fs::path root = experiment_dir(store_dir, id);
  const auto& storage = config.checkpoint_storage;
  if (!storage.host_path.empty())
    root = fs::absolute(storage.host_path) / storage.storage_path / ("experiment_" + uuid);
  fs::create_directories(experiment_dir(store_dir, id));
  const nlohmann::json files = {{"yaml", yaml.string()},
                                {"command", command},
                                {"trials_root", fs::absolute(root).string()},
                                {"uuid", uuid}};
  io::write_file_atomically((fs::path(experiment_dir(store_dir, id)) / "experiment.json").string(),
                            [&](std::ostream& out) { out << files.dump(1) << "\n"; });
  return id;
}

RunnerLock::RunnerLock(const std::string& store_dir, int64_t experiment, double wait_seconds) {
  const fs::path path = fs::path(experiment_dir(store_dir, experiment)) / "runner.lock";
  // Not O_CLOEXEC: the trial processes inherit it, so the lock outlives a killed runner until
  // its trials have stopped.
  fd_ = open(path.c_str(), O_RDWR | O_CREAT, 0644);
  TS_CHECK(fd_ >= 0, "cannot open ", path.string(), ": ", std::strerror(errno));
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  while (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (std::chrono::steady_clock::now() >= until) {
      close(fd_);
      fd_ = -1;
      fail("experiment ", experiment, " is running (another runner, or its trials, hold its lock ",
           path.string(), ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // (only runner_alive reads it; a lock without the pid still works)
  }
}

RunnerLock::~RunnerLock() {
  if (fd_ >= 0) close(fd_);  // (trials still running keep it held)
}

bool RunnerLock::runner_alive(const std::string& store_dir, int64_t experiment) {
  if (!held(store_dir, experiment)) return false;
  std::ifstream in(fs::path(experiment_dir(store_dir, experiment)) / "runner.lock");
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return false;
  // Alive and a tessera runner (not a recycled pid): its command line names the experiment.
  std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
  std::string args((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  return args.find("experiment") != std::string::npos;
}

bool RunnerLock::held(const std::string& store_dir, int64_t experiment) {
  const fs::path path = fs::path(experiment_dir(store_dir, experiment)) / "runner.lock";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool free = flock(fd, LOCK_SH | LOCK_NB) == 0;
  close(fd);
  return !free;
}

}  // namespace tessera::experiment
