#include "tessera/trial/run.h"

#include <cstring>
#include <iostream>
#include <string>

#include "tessera/engine/stop_signals.h"
#include "tessera/error.h"
#include "tessera/rng.h"

namespace tessera::trial {

std::map<std::string, nlohmann::json> trial_hparams(const ExperimentConfig& config,
                                                    const nlohmann::json& chosen) {
  TS_CHECK(chosen.is_null() || chosen.is_object(),
           "--hparams must be a JSON object of hyperparameter names to values, got ",
           chosen.dump());
  std::map<std::string, nlohmann::json> out;
  for (const auto& [name, h] : config.hyperparameters) {
    if (chosen.is_object() && chosen.contains(name)) {
      out[name] = chosen[name];
    } else {
      TS_CHECK(h.type == Hyperparameter::Const, "hyperparameter '", name,
               "' is searched over; one trial needs a value for it: --hparams '{\"", name,
               "\": ...}' (or run the search with `tessera experiment`)");
      out[name] = h.val;
    }
  }
  if (chosen.is_object())
    for (const auto& [name, v] : chosen.items())
      TS_CHECK(config.hyperparameters.count(name),
               "--hparams: the experiment has no "
               "hyperparameter '",
               name, "'");
  return out;
}

namespace {

const char* kUsage =
    "usage: %s EXP.yaml [--trial-id N] [--hparams JSON] [--trial-dir DIR] [--device cpu|cuda]\n"
    "       [--json] [--quiet]\n"
    "  Trains one trial of the experiment (Determined's YAML) to searcher.max_length;\n"
    "  a stopped trial (SIGTERM, SIGINT) resumes when the same command runs again.\n"
    "  --trial-dir: the trial's files there instead of under checkpoint_storage (the\n"
    "  experiment runner gives each experiment's trials their own). --searcher-stdin (the\n"
    "  runner's): after each validation before the end, a line on stdin says continue or stop.\n";

struct Args {
  std::string config_path;
  int64_t trial_id = 1;
  nlohmann::json hparams;
  std::string trial_dir;        // "": trial_directory(config, trial_id)
  std::string experiment_uuid;  // the runner's experiment; "" for a trial run on its own
  std::string device = "cpu";
  bool json = false, quiet = false, searcher_stdin = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      TS_CHECK(i + 1 < argc, arg, " needs a value");
      return argv[++i];
    };
    if (arg == "--trial-id") {
      const std::string v = value();
      size_t end = 0;
      try {
        a.trial_id = std::stoll(v, &end);
      } catch (const std::exception&) {
        end = 0;
      }
      TS_CHECK(end == v.size() && a.trial_id >= 1, "--trial-id must be a positive integer, got '",
               v, "'");
    } else if (arg == "--hparams") {
      const std::string v = value();
      a.hparams = nlohmann::json::parse(v, nullptr, false);
      TS_CHECK(!a.hparams.is_discarded(), "--hparams is not valid JSON: ", v);
    } else if (arg == "--experiment-uuid") {
      a.experiment_uuid = value();
    } else if (arg == "--trial-dir") {
      a.trial_dir = value();
      TS_CHECK(!a.trial_dir.empty(), "--trial-dir needs a directory");
    } else if (arg == "--device") {
      a.device = value();
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--searcher-stdin") {
      a.searcher_stdin = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      fail("unknown option '", arg, "' (--help for usage)");
    } else {
      TS_CHECK(a.config_path.empty(), "one experiment config, got '", a.config_path, "' and '", arg,
               "'");
      a.config_path = arg;
    }
  }
  TS_CHECK(!a.config_path.empty(), "no experiment config given");
  return a;
}

}  // namespace

int run_trial_main(int argc, char** argv, const RunOneTrial& run_one,
                   const std::string& program_name, const CheckConfig& check) {
  const std::string program_text = !program_name.empty() ? program_name
                                   : argc > 0            ? argv[0]
                                                         : "trial";
  const char* program = program_text.c_str();
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf(kUsage, program);
      return 0;
    }
  // From the start: a SIGTERM while the job starts or the trial is built stops it at its
  // first batch boundary (with a checkpoint) instead of killing it. Kept until the process
  // exits (static): one after the trial ended, while MPI finalizes at exit, then stops
  // nothing instead of killing the rank, which made mpirun report a completed trial as failed.
  static engine::StopSignals signals(true);
  std::shared_ptr<parallel::ProcessGroup> group;
  try {
    const Args args = parse_args(argc, argv);
    TrialInfo info;
    info.config = ExperimentConfig::from_file(args.config_path);
    if (check) check(info.config);
    group = parallel::world();
    const bool chief = group->rank() == 0;
    if (chief)
      for (const auto& w : info.config.warnings) std::cerr << "warning: " << w << "\n";
    TS_CHECK(info.config.slots_per_trial == group->size(), args.config_path,
             ": resources.slots_per_trial is ", info.config.slots_per_trial, " but this runs as ",
             group->size(), " process(es): start it with mpirun -np ", info.config.slots_per_trial,
             " ", program, " ", args.config_path);
    info.hparams = trial_hparams(info.config, args.hparams);
    info.trial_id = args.trial_id;
    info.experiment_uuid = args.experiment_uuid;
    info.trial_seed = info.config.experiment_seed + static_cast<uint64_t>(args.trial_id);
    info.trial_dir =
        args.trial_dir.empty() ? trial_directory(info.config, args.trial_id) : args.trial_dir;
    info.group = group;
    info.device = Device::parse(args.device);
    // Every slot draws what one process would (dropout masks: its rows of the global batch).
    set_data_parallel_shard(group->rank(), group->size());
    manual_seed(info.trial_seed);
    HarnessOptions options;
    options.quiet = args.quiet || !chief;
    options.handle_signals = false;  // installed above
    if (args.searcher_stdin && chief)
      options.searcher_stops = [] {
        std::string answer;
        // EOF: the runner is gone; stop with a checkpoint.
        return !std::getline(std::cin, answer) || answer != "continue";
      };
    else if (args.searcher_stdin)
      options.searcher_stops = [] { return false; };  // (the chief's answer is all-reduced)
    const TrialResult result = run_one(info, options);
    if (args.json && chief) std::cout << result.to_json().dump() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << program << ": error: " << e.what() << "\n";
    if (group && group->size() > 1) parallel::abort_job(1, true);  // the other slots would wait
    return 1;
  }
}

}  // namespace tessera::trial
