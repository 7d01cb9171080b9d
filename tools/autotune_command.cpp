// `tessera autotune CONFIG [--ranks N] [--memory-limit SIZE] [--store DIR] [--dry_run]`:
// DeepSpeed's autotuning through the experiment runner (experiment/autotuner.h).
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "tessera/experiment/autotuner.h"
#include "tessera/experiment/autotuning_config.h"
#include "tessera/io/files.h"

namespace tessera::cli {

namespace {

const char* kAutotuneHelp =
    R"(usage: tessera autotune CONFIG.json [--ranks N] [--memory-limit SIZE] [--store DIR]
                        [--device D] [--dry_run] [--json]

DeepSpeed's autotuning (its "autotuning" section: metric, start/end_profile_step, fast,
micro-batch bounds, num_tuning_micro_batch_sizes, tuner_type gridsearch|random|model_based,
tuner_num_trials, tuner_early_stopping, results_dir, exps_dir, overwrite). Every ZeRO stage
(0-3) with the largest num_tuning_micro_batch_sizes micro-batches that divide the config's
train_batch_size over the data-parallel ranks (fast: false adds reduce_bucket_size and
overlap_comm variants) is sized by estimate-memory; points above --memory-limit bytes per
rank (K, M, G suffixes; default this machine's memory over the ranks) are pruned without
running. The rest run one at a time as trials of an experiment in the store (`tessera
experiment describe ID`, the web view; model_based: a ridge-regression cost model fitted to
the finished trials picks each next point), each for end_profile_step steps, timing steps
[start_profile_step, end_profile_step). Writes results_dir/ds_config_optimal.json (the
config with the best point's keys) and results_dir/summary.txt (the ranked table).

  --ranks N        processes per trial (mpirun -np N), default 1
  --dry_run        print the points and their predicted memory; run nothing
  --json           the last line on stdout: {"experiment", "metric", "best", "optimal_config",
                   "stopped_early", "points": [{"name", "stage", "micro_batch", "accumulation",
                   "predicted_bytes", "fits", "state", "metric"}]}
)";

// "512M", "2G", "1024" -> bytes (powers of 1024).
int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("--memory-limit '", text, "': expected a size such as 8G, 512M or 1000000");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty()                 ? 1.0
                       : unit == "K" || unit == "k" ? 1024.0
                       : unit == "M" || unit == "m" ? 1024.0 * 1024
                       : unit == "G" || unit == "g" ? 1024.0 * 1024 * 1024
                       : unit == "T" || unit == "t" ? 1024.0 * 1024 * 1024 * 1024
                                                    : -1.0;
  TS_CHECK(scale > 0 && v > 0 && v * scale < 9e18, "--memory-limit '", text,
           "': expected a positive size such as 8G, 512M or 1000000");
  return static_cast<int64_t>(v * scale);
}

nlohmann::json points_json(const std::vector<experiment::AutotunePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : points)
    out.push_back({{"name", p.name},
                   {"stage", p.stage},
                   {"micro_batch", p.micro_batch},
                   {"accumulation", p.accumulation},
                   {"predicted_bytes", p.predicted_bytes},
                   {"fits", p.fits},
                   {"state", p.state},
                   {"metric", p.metric ? nlohmann::json(*p.metric) : nlohmann::json()}});
  return out;
}

}  // namespace

int autotune_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"help", "dry_run", "json"},
               {"ranks", "memory-limit", "store", "device"});
  if (a.has("help")) {
    std::cout << kAutotuneHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "autotune: expected one CONFIG.json (see --help)");
  experiment::AutotuneOptions o;
  o.config_path = a.positional()[0];
  const int64_t ranks = a.get_int("ranks", 1);
  TS_CHECK(ranks >= 1 && ranks <= 4096, "--ranks ", ranks, ": expected 1 to 4096");
  o.ranks = static_cast<int>(ranks);
  o.memory_limit = a.has("memory-limit") ? parse_size(a.get("memory-limit", ""))
                                         : experiment::default_memory_limit(o.ranks);
  o.store_dir = experiment_store_dir(a);
  o.device = a.get("device", "");
  o.tessera = std::filesystem::read_symlink("/proc/self/exe").string();
  o.log = [](const std::string& line) { std::cerr << line << std::endl; };
  if (a.has("dry_run")) {
    experiment::AutotuneResult r;
    r.points = experiment::autotune_points(io::read_text_file(o.config_path), o.config_path,
                                           o.ranks, o.memory_limit);
    r.metric = "throughput";
    std::cout << experiment::autotune_table(r, o.memory_limit);
    if (a.has("json"))
      std::cout << nlohmann::json{{"points", points_json(r.points)}}.dump() << "\n";
    return 0;
  }
  const experiment::AutotuneResult r = experiment::autotune(o);
  std::cerr << experiment::autotune_table(r, o.memory_limit);
  if (r.best)
    std::cerr << "best: " << r.points[*r.best].name << " (" << r.metric << " "
              << *r.points[*r.best].metric << "), written to " << r.optimal_config << "\n";
  else
    std::cerr << "no trial reported its " << r.metric << ": see `tessera experiment logs`\n";
  if (a.has("json"))
    std::cout << nlohmann::json{{"experiment", r.experiment},
                                {"metric", r.metric},
                                {"best", r.best ? nlohmann::json(r.points[*r.best].name)
                                                : nlohmann::json()},
                                {"optimal_config", r.optimal_config},
                                {"stopped_early", r.stopped_early},
                                {"points", points_json(r.points)}}
                     .dump()
              << "\n";
  return r.best ? 0 : 1;
}

}  // namespace tessera::cli
