// The `tessera` command line.
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/engine/stop_signals.h"
#include "tessera/error.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/thread_share.h"

namespace {

const char* kUsage = R"(tessera: a native deep-learning training runtime

usage: tessera <command> [options]

commands:
  kernels list|check|bench   list the op set, check ops against float64 references, time an op
  bench gemm                 Tessera's GEMM rate beside OpenBLAS's, measured in one run
  train CONFIG.json          train GPT-2/BERT from a DeepSpeed-style config (configs/)
  models                     the model types a config can name (the model registry)
  optimizers                 the optimizers a config can name, their parameters and defaults
  schedules                  the LR schedules a config can name, their parameters and defaults
  pipeline-schedules         the pipeline schedules a config can name and what each takes
  monitors                   the monitor sections a config can enable (csv_monitor, ...)
  config-keys                every key a training config can state, its kind and default
  profile CONFIG.json        DeepSpeed's flops profiler report of the config's model at a step
  launch --hostfile H -- CMD  DeepSpeed's launcher: CMD on every slot of a hostfile (mpirun/srun)
  autotune CONFIG.json       DeepSpeed's autotuning: the fastest ZeRO stage and micro-batch that fit
  trial EXP.yaml             a built-in model as one Determined trial (periods, preemption)
  experiment create EXP.yaml a hyperparameter search (Determined's searchers), its trials as
                             processes, restarts, pause/resume; list/describe/logs/best
  searchers                  the searchers an experiment can name, their keys and defaults
  eval MODEL_DIR             loss (and gradient norms) of a Hugging Face GPT-2/BERT on a batch
  generate MODEL_DIR         sample text from a GPT-2 model directory with a KV cache
  zero-to-fp32 CKPT OUT      whole float32 weights (HF names) from a checkpoint of any ZeRO stage
  export CKPT OUT_DIR        a checkpoint as a Hugging Face model directory (weights, config,
                             tokenizer files)
  estimate-memory CONFIG     per-rank parameter/gradient/optimizer bytes for N ranks, any stage
  nvme-tune DIR              DeepSpeed's ds_nvme_tune: the fastest "aio" section for a swap directory
  plot RUN_DIR               a run's loss and lr curves to a PNG (from its monitor files)
  report                     what this build has compiled in and which devices are visible

Distributed: mpirun -np N tessera train CONFIG.json, or tessera launch with a hostfile
(see docs/parallelism.md).

Every command takes --help; with --json the last line on stdout is one JSON object.
tessera --version prints the version.
)";

// Prints "tessera <cmd>: error: ...", ends the other ranks of a distributed job (they may be
// waiting in a collective), and returns the exit status.
// An error that a stop signal caused (work it cut short, such as tokenising) ends with the
// signal's status (128 + N), as a stop during training does, so schedulers see a preemption.
int fail_command(const std::string& cmd, const std::string& what) {
  std::cerr << "tessera " << cmd << ": error: " << what << "\n";
  const int signal = tessera::engine::stop_signal_received();
  const int status = signal ? 128 + signal : 1;
  if (tessera::parallel::launched_distributed())
    tessera::parallel::abort_job(status, /*after_rank0=*/true);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "--version" || cmd == "version") {
    std::cout << "tessera " << TESSERA_VERSION << "\n";
    return 0;
  }
  try {
    // Ranks (or trials) side by side on one host take their share of its cores each; commands
    // that compute also count themselves in, so runs started by hand share the cores too.
    tessera::parallel::share_cores();
    if (cmd == "train" || cmd == "trial" || cmd == "eval" || cmd == "generate" || cmd == "profile")
      tessera::parallel::join_host_share();
    if (cmd == "kernels") return tessera::cli::kernels_main(argc, argv);
    if (cmd == "report") return tessera::cli::report_main(argc, argv);
    if (cmd == "bench") return tessera::cli::bench_main(argc, argv);
    if (cmd == "eval") return tessera::cli::eval_main(argc, argv);
    if (cmd == "train") return tessera::cli::train_main(argc, argv);
    if (cmd == "generate") return tessera::cli::generate_main(argc, argv);
    if (cmd == "zero-to-fp32") return tessera::cli::zero_to_fp32_main(argc, argv);
    if (cmd == "nvme-tune") return tessera::cli::nvme_tune_main(argc, argv);
    if (cmd == "estimate-memory") return tessera::cli::estimate_memory_main(argc, argv);
    if (cmd == "export") return tessera::cli::export_main(argc, argv);
    if (cmd == "plot") return tessera::cli::plot_main(argc, argv);
    if (cmd == "profile") return tessera::cli::profile_main(argc, argv);
    if (cmd == "trial") return tessera::cli::trial_main(argc, argv);
    if (cmd == "launch") return tessera::cli::launch_main(argc, argv);
    if (cmd == "autotune") return tessera::cli::autotune_main(argc, argv);
    if (cmd == "experiment") return tessera::cli::experiment_main(argc, argv);
    if (cmd == "models") return tessera::cli::models_main(argc, argv);
    if (cmd == "schedules") return tessera::cli::schedules_main(argc, argv);
    if (cmd == "optimizers") return tessera::cli::optimizers_main(argc, argv);
    if (cmd == "pipeline-schedules") return tessera::cli::pipeline_schedules_main(argc, argv);
    if (cmd == "searchers") return tessera::cli::searchers_main(argc, argv);
    if (cmd == "monitors") return tessera::cli::monitors_main(argc, argv);
    if (cmd == "config-keys") return tessera::cli::config_keys_main(argc, argv);
    std::cerr << "tessera: unknown command '" << cmd << "'\n\n" << kUsage;
    return 2;
  } catch (const tessera::Error& e) {
    return fail_command(cmd, e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    // Last resort: errors converted where they arise name their file; these name it here.
    return fail_command(cmd, e.code().message() + ": '" + e.path1().string() + "'" +
                                 (e.path2().empty() ? "" : " -> '" + e.path2().string() + "'"));
  } catch (const nlohmann::json::exception& e) {
    return fail_command(cmd, std::string("invalid JSON value: ") + e.what());
  } catch (const std::bad_alloc&) {
    return fail_command(cmd, "out of memory");
  } catch (const std::exception& e) {
    return fail_command(cmd, e.what());
  } catch (...) {
    return fail_command(cmd, "unknown error");
  }
}
