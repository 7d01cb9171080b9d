// `tessera train CONFIG.json [--data PATH] [--steps N] [--save DIR] [--resume DIR] [--json]`:
// the built-in models through engine::Trainer (the loop lives in engine/).
#include <omp.h>
#include <csignal>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/engine/pipeline_trainer.h"
#include "tessera/engine/stop_signals.h"
#include "tessera/engine/trainer.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/launch/job.h"
#include "tessera/launch/train_data.h"
#include "tessera/parallel/process_group.h"

namespace tessera::cli {

namespace {

const char* kTrainHelp =
    R"(usage: tessera train CONFIG.json [--data PATH] [--steps N] [--device D] [--save DIR]
                     [--resume DIR] [--strict] [--json]

Trains the model a DeepSpeed-style JSON config describes (see configs/): model.type gpt2
(GPT-2, the default) or bert (BERT pretraining), the models the model registry holds. The corpus (data.path, or --data: a text file or a directory of text files) is
tokenised once into a cache beside it; a causal LM (GPT) reads it in shuffled non-overlapping
windows, epoch after epoch. Prints a progress line (step, loss, learning rate, tokens/s, ETA), the validation
loss every train.eval_interval steps, and for GPT a text sample at the end. Ctrl-C (SIGINT) or
SIGTERM stops after the current step with a checkpoint in train.checkpoint_dir or --save, exit
status 130 or 143 (a second Ctrl-C stops at once).

--steps N     train until global step N (a resumed run continues from its checkpoint's step)
--device D    cpu, cuda or cuda:N (overrides train.device; default cpu). On a GPU, bf16 or
              fp16 in the config trains in 16 bits with float32 master weights.
--save DIR    write a checkpoint (tag "step<N>") there at the end
--resume DIR  continue from the latest checkpoint in DIR (model, optimizer, schedule, loss
              scaler, RNG and data position: the numbers continue exactly)
--strict      an unknown config key is an error, not a warning (as "strict": true)
--json        last line: {"step": S, "train_loss": L, "val_loss": V, "steps_run": N,
              "tokens_per_s": R, "rank": 0, "world_size": N, "memory": {"params": B, ...}};
              a missing loss is null with "train_loss_missing" / "val_loss_missing" saying why;
              with MoE layers also "moe_aux_loss" (the last step's load-balancing loss)
              (under mpirun every rank prints its own line)

On N processes: mpirun -np N tessera train CONFIG.json (CPU, MPI). The batch triple is
resolved for N ranks; zero_optimization.stage picks plain data parallelism (0) or ZeRO 1-3.
Only rank 0 prints progress, validation, checkpoints and the sample.
)";

// The config with the command line's overrides; every place the run will write is checked
// now, not after the training it would lose.
io::TrainConfig read_config(const Args& a, parallel::ProcessGroup& world) {
  io::TrainConfig cfg = launch::read_config(a.positional()[0], world.size());
  if (a.has("strict")) cfg.refuse_unknown_keys();
  // Before any group is made from the world: each inherits its timeout.
  world.set_timeout(cfg.distributed.timeout());
  if (world.rank() == 0)
    for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
  if (a.has("data")) cfg.data.path = a.get("data", "");
  if (a.has("device")) cfg.train.device = a.get("device", "cpu");
  if (a.has("steps")) cfg.train.steps = a.get_int("steps", cfg.train.steps);
  TS_CHECK(cfg.train.steps >= 0, "--steps must be >= 0");
  if (a.has("save")) io::check_writable_directory(a.get("save", ""), "--save");
  if (!cfg.train.checkpoint_dir.empty() && cfg.train.checkpoint_interval > 0)
    io::check_writable_directory(cfg.train.checkpoint_dir, "train.checkpoint_dir");
  for (const auto& [key, monitor] : cfg.monitors)
    if (monitor.enabled && world.rank() == 0)
      io::check_writable_directory(monitor.output_path, key + ".output_path");
  if (cfg.trace.enabled) io::check_writable_directory(cfg.trace.output_path, "trace.output_path");
  if (cfg.flops_profiler.enabled && !cfg.flops_profiler.output_file.empty() && world.rank() == 0) {
    const std::string parent =
        std::filesystem::path(cfg.flops_profiler.output_file).parent_path().string();
    io::check_writable_directory(parent.empty() ? "." : parent, "flops_profiler.output_file");
  }
  return cfg;
}

void print_json_line(const engine::TrainResult& r, engine::Engine& eng, bool comms,
                     const engine::PipelineEngine* pipe = nullptr) {
  const parallel::MemoryStats mem = eng.memory();
  nlohmann::ordered_json line{
      {"step", r.step},
      {"train_loss", nullptr},
      {"val_loss", r.val_loss},
      {"tokens_per_s", r.tokens_per_s},
      {"rank", eng.rank()},
      {"world_size", eng.world_size()},
      {"threads", omp_get_max_threads()},
      {"zero_stage", eng.zero_stage()},
      {"memory",
       {{"params", mem.params},
        {"grads", mem.grads},
        {"optimizer", mem.optimizer},
        {"buffers", mem.buffers},
        {"disk", mem.disk},
        {"swap", mem.swap},
        {"activations", pipe ? pipe->activation_bytes() : eng.activation_bytes()}}}};
  // A null is never silent: say why the value is missing.
  line["steps_run"] = r.steps_run;
  if (std::isfinite(r.train_loss))
    line["train_loss"] = r.train_loss;
  else
    line["train_loss_missing"] = r.stop_signal != 0 && r.steps_run == 0
                                     ? "stopped by a signal before the first step"
                                     : "no step ran: the run was already at step " +
                                           std::to_string(r.step) + " of train.steps";
  if (std::isfinite(r.moe_aux_loss)) line["moe_aux_loss"] = r.moe_aux_loss;  // (MoE layers)
  if (!std::isfinite(r.val_loss))
    line["val_loss_missing"] =
        r.stop_signal != 0 ? "stopped by a signal before the evaluation" : "no validation data";
  if (auto* tp = eng.tensor_parallel_group()) {  // rank / world_size are data-parallel
    line["tp_rank"] = tp->rank();
    line["tp_size"] = tp->size();
  }
  if (pipe)
    line["pipeline"] = {{"stage", pipe->module().stage_id()},
                        {"stages", pipe->module().num_stages()},
                        {"schedule", pipe->schedule()},
                        {"micro_batches", pipe->micro_batches()},
                        {"bubble_fraction", pipe->bubble_fraction()},
                        {"peak_in_flight", pipe->peak_in_flight()}};
  auto ops = [](const std::map<std::string, parallel::CommsLogger::OpStats>& totals) {
    nlohmann::ordered_json c = nlohmann::ordered_json::object();
    for (const auto& [op, st] : totals)
      c[op] = {{"calls", st.calls},
               {"message_bytes", st.message_bytes},
               {"bus_bytes", st.bus_bytes},
               {"seconds", st.seconds}};
    return c;
  };
  if (comms) {
    line["comms"] = ops(r.comms);
    if (eng.tensor_parallel_group()) line["tp_comms"] = ops(r.tp_comms);
    if (eng.expert_parallel_group()) {
      line["ep_comms"] = ops(r.ep_comms);
      line["expert_dp_comms"] = ops(r.expert_dp_comms);
    }
  }
  std::cout << line.dump() << "\n" << std::flush;
}

// The config's Trainer options with --save's directory; train_main handles the signals.
engine::TrainerOptions trainer_options(const Args& a, const io::TrainConfig& cfg) {
  engine::TrainerOptions options = engine::TrainerOptions::from_config(cfg);
  options.handle_signals = false;  // (train_main's, installed at start)
  options.save_dir = a.get("save", "");
  options.tokens_per_sample = cfg.model.block_size;
  return options;
}

// What every layout's trainer shares: the checkpoints' extras, --resume (the checkpoint's
// vocabulary must be this corpus's), the start-up line, training and the reports after it.
int fit_and_report(const Args& a, launch::Job& job, engine::TrainLoop& trainer) {
  const io::TrainConfig& cfg = job.config;
  const int64_t vocab_size = job.corpus.vocab_size;
  trainer.client_state = [vocab_size] { return nlohmann::json{{"vocab_size", vocab_size}}; };
  trainer.extra_files = [&job] { return job.tokenizer_files(); };
  if (a.has("resume")) {
    // (A checkpoint of an older tessera has no Trainer state: its weights' shapes are checked.)
    const nlohmann::json user = trainer.resume(a.get("resume", ""));
    if (user.is_object() && user.contains("vocab_size")) {
      const int64_t vocab = io::JsonFields(user, "train --resume: the checkpoint's client_state")
                                .integer("vocab_size");
      TS_CHECK(vocab == vocab_size, "train --resume: the checkpoint's vocabulary (", vocab,
               ") differs from this corpus's (", vocab_size, ")");
    }
  }
  parallel::ProcessGroup& world = *job.groups.world;
  const bool lead = world.rank() == 0;  // prints for the job
  if (lead) std::cerr << job.summary() << "\n";
  const engine::TrainResult r = trainer.fit();
  if (cfg.comms_logger.enabled && lead) std::cerr << world.logger().summary(0, world.size());
  if (job.checkpointing && parallel::activation_checkpointing_config(cfg).profile) {
    if (!job.is_pipeline() && lead)
      std::cerr << job.checkpointing->profile_report();
    else if (job.is_pipeline() && job.data_rank() == 0)  // one report per stage
      std::cerr << "stage " << job.groups.stage << " " << job.checkpointing->profile_report();
  }
  if (a.has("json"))
    print_json_line(r, job.stage_engine(), cfg.comms_logger.enabled, job.pipeline_engine.get());
  return r.stop_signal ? 128 + r.stop_signal : 0;
}

}  // namespace

int train_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help", "strict"},
               {"data", "steps", "save", "resume", "device"});
  if (a.has("help")) {
    std::cout << kTrainHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "train: expected one CONFIG.json (see --help)");
  // SIGINT/SIGTERM from here to the process's exit: during start-up it stops training at the
  // first step (with a checkpoint); after training, while MPI finalizes, it changes nothing
  // instead of killing a rank (mpirun would report the finished job as failed).
  static engine::StopSignals stop_signals(true);
  auto world = parallel::world();
  const std::unique_ptr<launch::Job> job = launch::build(read_config(a, *world), world);
  const io::TrainConfig& cfg = job->config;
  const auto train_data = job->train_batches();
  const engine::TrainerOptions options = trainer_options(a, cfg);
  auto val_data = [&job] { return job->val_batches(); };
  if (job->is_pipeline()) {  // DeepSpeed's PipelineModule and PipelineEngine
    engine::PipelineTrainer<models::Batch> trainer(
        *job->pipeline_engine, *train_data,
        [&job](const models::Batch& b) { return job->pipe_micro_batch(b); }, options);
    trainer.set_eval_data(val_data);
    return fit_and_report(a, *job, trainer);
  }
  engine::Trainer<models::Batch> trainer(*job->engine, *train_data, options);
  trainer.set_eval_data(val_data);
  if (job->pretrained_model && job->pretrained_model->context_length() > 0 &&
      cfg.train.sample_tokens > 0 && !a.has("json"))
    trainer.sample = [&] { return launch::sample_text(*job->pretrained_model, cfg, job->corpus); };
  return fit_and_report(a, *job, trainer);
}

}  // namespace tessera::cli
