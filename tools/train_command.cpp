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
#include "tessera/models/bert_pipeline.h"
#include "tessera/models/gpt2_pipeline.h"
#include "tessera/parallel/process_group.h"
#include "train_data.h"

namespace tessera::cli {

namespace {

const char* kTrainHelp =
    R"(usage: tessera train CONFIG.json [--data PATH] [--steps N] [--device D] [--save DIR]
                     [--resume DIR] [--strict] [--json]

Trains the GPT-2 or BERT reference model a DeepSpeed-style JSON config describes (see
configs/). The corpus (data.path, or --data: a text file or a directory of text files) is
tokenised once into a cache beside it; GPT reads it in shuffled non-overlapping windows, epoch
after epoch. Prints a progress line (step, loss, learning rate, tokens/s, ETA), the validation
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
              a missing loss is null with "train_loss_missing" / "val_loss_missing" saying why
              (under mpirun every rank prints its own line)

On N processes: mpirun -np N tessera train CONFIG.json (CPU, MPI). The batch triple is
resolved for N ranks; zero_optimization.stage picks plain data parallelism (0) or ZeRO 1-3.
Only rank 0 prints progress, validation, checkpoints and the sample.
)";

// The config with the command line's overrides; every place the run will write is checked
// now, not after the training it would lose.
io::TrainConfig read_config(const Args& a, parallel::ProcessGroup& world) {
  io::TrainConfig cfg = io::TrainConfig::from_file(a.positional()[0], world.size());
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
  if (cfg.csv_monitor.enabled && world.rank() == 0)
    io::check_writable_directory(cfg.csv_monitor.output_path, "csv_monitor.output_path");
  if (cfg.tensorboard.enabled && world.rank() == 0)
    io::check_writable_directory(cfg.tensorboard.output_path, "tensorboard.output_path");
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

// The config's GPT-2 or BERT as this stage's part of a pipeline, starting from the whole
// model's weights (as one process draws them, or model.init_from's), saving checkpoints under
// the whole model's names and config (one process, export and zero-to-fp32 read them).
// With `tp` (3D), its tensor-parallel layers, each rank holding its shard of those weights.
std::unique_ptr<parallel::PipelineModule> build_pipeline_model(
    io::TrainConfig& cfg, int64_t vocab, int stage, std::shared_ptr<parallel::ProcessGroup> tp) {
  const parallel::PipelineModuleOptions po = pipeline_module_options(cfg, tp);
  std::unique_ptr<models::PretrainedModel> whole = build_model(cfg, vocab);
  std::unique_ptr<parallel::PipelineModule> model;
  if (auto* bert = dynamic_cast<models::BertForPreTraining*>(whole.get())) {
    const models::BertConfig& bc = bert->config;
    model = std::make_unique<parallel::PipelineModule>(
        models::bert_pipeline_layers(bc, bert->with_nsp, tp, cfg.tensor_parallel.sequence_parallel),
        models::bert_pipeline_loss(tp), stage, po);
    model->set_saved_names([n = bc.num_hidden_layers](const std::string& name) {
      return models::bert_name_of_pipeline_parameter(name, n);
    });
  } else {
    auto& gpt = dynamic_cast<models::GPT2LMHeadModel&>(*whole);
    model = std::make_unique<parallel::PipelineModule>(
        models::gpt2_pipeline_layers(gpt.config, tp, cfg.tensor_parallel.sequence_parallel),
        models::gpt2_pipeline_loss(tp), stage, po);
    model->set_saved_names([n = gpt.config.n_layer](const std::string& name) {
      return models::gpt2_name_of_pipeline_parameter(name, n);
    });
  }
  model->load_saved_state(whole->state_dict(), tp ? tp->rank() : 0, tp ? tp->size() : 1);
  model->set_config_json(whole->config_json());
  return model;
}

// The built-in model as a pipeline of pipeline.stages stages (DeepSpeed's PipelineModule and
// PipelineEngine), pipelines side by side over the rest of the job.
int train_pipeline(const Args& a, io::TrainConfig& cfg,
                   std::shared_ptr<parallel::ProcessGroup> world) {
  TS_CHECK(Device::parse(cfg.train.device).is_cpu(), "pipeline: train.device ", cfg.train.device,
           ": pipelines run on the CPU (MPI) so far");
  // 3D: stages x data-parallel replicas x tensor-parallel ranks (the last varies fastest).
  const int64_t tp = cfg.tensor_parallel.autotp_size;
  TS_CHECK(!cfg.tensor_parallel.sequence_parallel || cfg.model.block_size % tp == 0,
           "tensor_parallel.sequence_parallel: model.block_size ", cfg.model.block_size,
           " does not divide among autotp_size ", tp,
           " ranks (each stage passes every rank's chunk of the sequence)");
  const auto topo = engine::pipe_model_data_topology(cfg.pipeline.stages, tp);
  const int stage = topo.coords_of(world->rank()).at("pipe");
  auto pipe_group = topo.group_for(*world, "pipe");
  auto data_group = topo.group_for(*world, "data");
  auto tp_group = tp > 1 ? topo.group_for(*world, "model") : nullptr;
  const io::TokenizedCorpus corpus = shared_corpus(cfg, *world);
  const std::unique_ptr<parallel::PipelineModule> built =
      build_pipeline_model(cfg, corpus.vocab_size, stage, tp_group);
  parallel::PipelineModule& model = *built;
  TS_CHECK(cfg.zero.stage == 0 || model.num_parameters() > 0, "pipeline: stage ", stage,
           " holds no parameters of its own (its layers: ", model.bounds()[stage], " to ",
           model.bounds()[stage + 1] - 1,
           ", e.g. a tied head whose weights the first stage owns), "
           "and zero_optimization.stage ",
           cfg.zero.stage,
           " partitions each stage's parameters; "
           "use pipeline.partition \"parameters\" or fewer pipeline.stages");
  engine::InitializeOptions init;
  init.group = data_group;
  init.tensor_parallel_group = tp_group;
  engine::PipelineEngine pipe(model, pipe_group, cfg, std::move(init),
                              {.topology = topo});  // (the config's schedule)
  const int dp_rank = data_group->rank(), dp_size = data_group->size();
  auto train_data = train_batches(cfg, corpus, dp_rank, dp_size);
  val_batches(cfg, corpus, dp_rank, dp_size);  // its errors now, not after training
  const engine::TrainerOptions options = trainer_options(a, cfg);
  const bool bert = cfg.model.type == "bert";
  auto convert = [&pipe, bert](const models::Batch& b) {
    if (!bert) return engine::PipeMicroBatch{{b.input_ids}, {b.targets}};
    // The last stage weighs the loss as the engine weighs a whole model's (nn/loss_model.h).
    const double weight =
        pipe.is_last_stage() ? pipe.stage_engine().loss_weight(b.loss_terms()) : 0.0;
    return engine::PipeMicroBatch{models::bert_pipeline_inputs(b),
                                  models::bert_pipeline_labels(b, weight)};
  };
  engine::PipelineTrainer<models::Batch> trainer(pipe, *train_data, convert, options);
  trainer.set_eval_data([&] { return val_batches(cfg, corpus, dp_rank, dp_size); });
  trainer.client_state = [&] { return nlohmann::json{{"vocab_size", corpus.vocab_size}}; };
  trainer.extra_files = [&] { return tokenizer_files(cfg, corpus); };
  if (a.has("resume")) trainer.resume(a.get("resume", ""));
  const auto& b = model.bounds();
  if (world->rank() == 0) {
    const int64_t v = model.num_chunks();
    std::cerr << (bert ? "BERT" : "GPT2") << " pipeline: " << cfg.pipeline.stages << " stages x "
              << dp_size << " data-parallel"
              << (tp > 1 ? " x " + std::to_string(tp) + " tensor-parallel" : std::string()) << ", "
              << cfg.pipeline.schedule << " schedule, layers per "
              << (v > 1 ? "part (stage s holds parts s, s + stages, ...):" : "stage:");
    for (size_t s = 0; s + 1 < b.size(); ++s) std::cerr << " " << b[s + 1] - b[s];
    std::cerr << " (partition " << cfg.pipeline.partition << ")";
    if (const int64_t k = model.options().activation_checkpoint_interval; k > 0)
      std::cerr << ", activation checkpoints of " << k << " layer" << (k > 1 ? "s" : "");
    std::cerr << ", vocab " << corpus.vocab_size;
    if (tp > 1 && corpus.vocab_size % tp != 0)  // (Megatron's padding: no probability)
      std::cerr << " (padded to " << (corpus.vocab_size + tp - 1) / tp * tp << " over " << tp
                << " tensor-parallel ranks)";
    std::cerr << ", block " << cfg.model.block_size << ", batch " << cfg.train_batch_size << " ("
              << cfg.micro_batch_size << " x " << cfg.gradient_accumulation_steps
              << " micro-batches), " << pipe.optimizer().name() << ", " << cfg.train.steps
              << " steps\n";
  }
  const engine::TrainResult r = trainer.fit();
  if (cfg.comms_logger.enabled && world->rank() == 0)
    std::cerr << world->logger().summary(0, world->size());
  if (cfg.activation_checkpointing.profile && dp_rank == 0)  // one report per stage
    std::cerr << "stage " << stage << " " << model.options().checkpointing->profile_report();
  if (a.has("json")) print_json_line(r, pipe.stage_engine(), cfg.comms_logger.enabled, &pipe);
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
  const bool lead = world->rank() == 0;  // prints and writes files for the job
  io::TrainConfig cfg = read_config(a, *world);
  if (cfg.pipeline.stages > 1) return train_pipeline(a, cfg, world);
  const TrainGroups groups = train_groups(cfg, world);
  const int dp_rank = groups.dp->rank(), dp_size = groups.dp->size();
  const io::TokenizedCorpus corpus = shared_corpus(cfg, *world);
  // The whole model, or with tensor_parallel.autotp_size this rank's shard of it.
  std::unique_ptr<models::PretrainedModel> whole;
  std::unique_ptr<nn::Module> shard;
  if (groups.tp)
    shard = build_tensor_parallel_model(cfg, corpus.vocab_size, groups.tp);
  else
    whole = build_model(cfg, corpus.vocab_size);
  nn::Module& model = whole ? static_cast<nn::Module&>(*whole) : *shard;
  const auto checkpointing = attach_activation_checkpointing(model, cfg, groups.tp);
  engine::InitializeOptions init;
  init.group = groups.dp;
  init.tensor_parallel_group = groups.tp;
  auto eng = engine::initialize(model, cfg, std::move(init));
  auto train_data = train_batches(cfg, corpus, dp_rank, dp_size);
  val_batches(cfg, corpus, dp_rank, dp_size);  // its errors now, not after training
  const engine::TrainerOptions options = trainer_options(a, cfg);
  engine::Trainer<models::Batch> trainer(*eng, *train_data, options);
  trainer.set_eval_data([&] { return val_batches(cfg, corpus, dp_rank, dp_size); });
  trainer.client_state = [&] { return nlohmann::json{{"vocab_size", corpus.vocab_size}}; };
  trainer.extra_files = [&] { return tokenizer_files(cfg, corpus); };
  if (whole && cfg.model.type != "bert" && cfg.train.sample_tokens > 0 && !a.has("json"))
    trainer.sample = [&] { return sample_text(*whole, cfg, corpus); };
  if (a.has("resume")) {
    // (A checkpoint of an older tessera has no Trainer state: its weights' shapes are checked.)
    const nlohmann::json user = trainer.resume(a.get("resume", ""));
    if (user.is_object() && user.contains("vocab_size")) {
      const int64_t vocab = io::JsonFields(user, "train --resume: the checkpoint's client_state")
                                .integer("vocab_size");
      TS_CHECK(vocab == corpus.vocab_size, "train --resume: the checkpoint's vocabulary (", vocab,
               ") differs from this corpus's (", corpus.vocab_size, ")");
    }
  }
  if (lead)
    std::cerr << model.type_name() << ": " << model.num_parameters()
              << (groups.tp ? " parameters on each of " + std::to_string(groups.tp->size()) +
                                  " tensor-parallel ranks"
                            : std::string(" parameters"))
              << ", vocab " << corpus.vocab_size << ", block " << cfg.model.block_size << ", batch "
              << cfg.train_batch_size << " (" << cfg.micro_batch_size << " x "
              << cfg.gradient_accumulation_steps << " accumulation), " << eng->optimizer().name()
              << ", " << cfg.train.steps << " steps"
              << (world->size() > 1 ? ", " + std::to_string(world->size()) + " ranks" : "")
              << (groups.tp ? " (" + std::to_string(dp_size) + " data-parallel)" : std::string())
              << (eng->zero_stage() > 0 ? ", ZeRO stage " + std::to_string(eng->zero_stage()) : "")
              << ", " << omp_get_max_threads() << " thread(s) per rank\n";
  const engine::TrainResult r = trainer.fit();
  if (cfg.comms_logger.enabled && lead) std::cerr << world->logger().summary(0, world->size());
  if (checkpointing && cfg.activation_checkpointing.profile && lead)
    std::cerr << checkpointing->profile_report();
  if (a.has("json")) print_json_line(r, *eng, cfg.comms_logger.enabled);
  return r.stop_signal ? 128 + r.stop_signal : 0;
}

}  // namespace tessera::cli
