// `tessera profile CONFIG.json [--steps N] [--data PATH] [--device D] [--out FILE] [--json]`:
// DeepSpeed's flops profiler on the config's model and data, through the engine and Trainer
// (the config's flops_profiler section, enabled, without evaluation, sampling or checkpoints).
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/engine/trainer.h"
#include "tessera/io/files.h"
#include "tessera/launch/job.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/process_group.h"

namespace tessera::cli {

namespace {

const char* kProfileHelp =
    R"(usage: tessera profile CONFIG.json [--steps N] [--data PATH] [--device D] [--out FILE]
                       [--json]

Trains the config's model (as `tessera train` would) until the flops profiler's step has run
and prints DeepSpeed's flops profiler report: parameters, forward MACs and FLOPs per module,
forward/backward/step latency, FLOP/s (and MFU on a GPU whose peak is known), the top modules
per depth and the module tree. The config's flops_profiler section sets profile_step (default
1: after one warm-up step), module_depth, top_modules and detailed; evaluation, sampling,
checkpoints, monitors and traces are off (a training run's files are never written over; a
report file that exists is replaced, and said so).

--steps N     steps to train (default profile_step + 1; must be more than profile_step)
--data PATH   the corpus (default: the config's data.path)
--device D    cpu, cuda or cuda:N (default: the config's train.device)
--out FILE    write the report to FILE (written whole or not at all) instead of stdout
--json        last line: {"profile_step": S, "params": P, "flops": F, "macs": M,
              "fwd_latency_s": T}
)";

}  // namespace

int profile_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"data", "steps", "device", "out"});
  if (a.has("help")) {
    std::cout << kProfileHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "profile: expected one CONFIG.json (see --help)");
  auto world = parallel::world();
  io::TrainConfig cfg = launch::read_config(a.positional()[0], world->size());
  TS_CHECK(parallel::pipeline_config(cfg).stages == 1, "profile: pipeline.stages ",
           parallel::pipeline_config(cfg).stages,
           ": the flops profiler runs the whole model (set pipeline.stages to 1; `tessera train "
           "--json` reports each stage's bubble)");
  if (world->rank() == 0)
    for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
  if (a.has("data")) cfg.data.path = a.get("data", "");
  if (a.has("device")) cfg.train.device = a.get("device", "cpu");
  auto& fp = cfg.flops_profiler;
  fp.enabled = true;
  if (a.has("out")) fp.output_file = a.get("out", "");
  if (!fp.output_file.empty() && world->rank() == 0) {  // checked now, not after the training
    const std::string parent = std::filesystem::path(fp.output_file).parent_path().string();
    io::check_writable_directory(parent.empty() ? "." : parent, "--out");
  }
  cfg.train.steps = a.get_int("steps", fp.profile_step + 1);
  TS_CHECK(cfg.train.steps > fp.profile_step, "profile: --steps ", cfg.train.steps,
           " ends before flops_profiler.profile_step ", fp.profile_step,
           " runs (steps are counted from 0): give --steps ", fp.profile_step + 1, " or more");
  if (!fp.output_file.empty() && std::filesystem::exists(fp.output_file) && world->rank() == 0)
    std::cerr << "profile: replacing " << io::quoted(fp.output_file) << " (an earlier report)\n";
  // A profiling run writes its report only: a training run's monitors and traces stay.
  cfg.trace.enabled = false;
  for (auto& [key, monitor] : cfg.monitors) monitor.enabled = false;
  cfg.train.eval_interval = 0;
  cfg.train.checkpoint_interval = 0;
  cfg.train.sample_tokens = 0;

  const std::unique_ptr<launch::Job> job = launch::build(cfg, world);
  engine::Engine& eng = *job->engine;
  auto data = job->train_batches();
  engine::TrainerOptions options = engine::TrainerOptions::from_config(cfg);
  options.tokens_per_sample = cfg.model.block_size;
  engine::Trainer<models::Batch> trainer(eng, *data, options);
  const engine::TrainResult r = trainer.fit();
  if (r.stop_signal) return 128 + r.stop_signal;
  if (world->rank() != 0) return 0;
  const auto& profile = eng.flops_profile();
  TS_CHECK(profile.has_value(), "profile: the profiler did not run at step ", fp.profile_step);
  if (a.has("json"))
    std::cout << nlohmann::ordered_json{{"profile_step", fp.profile_step},
                                        {"params", profile->params},
                                        {"flops", profile->flops},
                                        {"macs", profile->macs},
                                        {"fwd_latency_s", profile->duration}}
                     .dump()
              << "\n";
  return 0;
}

}  // namespace tessera::cli
