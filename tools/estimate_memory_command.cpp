// `tessera estimate-memory CONFIG.json --ranks N [--tp T] [--vocab V] [--data PATH] [--json]`
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/io/json_fields.h"
#include "tessera/launch/job.h"
#include "tessera/launch/memory_estimate.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::cli {

namespace {

const char* kEstimateMemoryHelp =
    R"(usage: tessera estimate-memory CONFIG.json --ranks N [--tp T] [--vocab V] [--data PATH] [--json]

Predicts the bytes of model state each of N ranks will hold when training the
config's model: parameters, gradients and optimizer state (float32 master weights and
moments), for the config's ZeRO stage (and, in the table, every other stage), with the same
sharding and padding the engine uses, so the prediction matches what `tessera train --json`
reports, buffers included: the communication staging (reduce-scatter buckets of
reduce_bucket_size, all-gather chunks of allgather_bucket_size, ZeRO-3's prefetch of
stage3_prefetch_bucket_size). With
"tensor_parallel": {"autotp_size": T} (--tp T sets it), each rank holds its shard of
the model and N / T ranks are data parallel: ZeRO partitions the shards over those.

Activations: the bytes a training forward of one micro-batch (train_micro_batch_size_per_gpu
rows of block_size tokens) keeps for backward on each rank, as the engine reports them
("memory": {"activations"}), for the config's tensor and sequence parallelism and
activation_checkpointing. A transformer layer keeps, with N tensor-parallel ranks, R rows
(B*T, or B*T/N with sequence parallelism), C hidden, I inner and H heads:
  (4 R C + (5 B*T*C + 2 B*T*I) / N) values of the model's dtype + (4 R + B*T*H / N) float32;
a checkpointed stack keeps one R x C input per checkpoint instead (1/N of it with
partition_activations, none on the GPU with cpu_checkpointing).

With a "pipeline" section (stages > 1), one row per stage: its layers, its parameters
(with autotp_size T too: 3D, a tensor-parallel rank's shards) and the activations of the
micro-batches its schedule holds at once (1F1B: up to stages - stage).

The vocabulary decides the embedding size: --vocab V, else model.init_from's config.json
vocab_size, else GPT-2's 50257 for the gpt2 tokenizer, else the lines of data.vocab for
wordpiece, else the character vocabulary of
data.path (--data), tokenised once and cached.

The ZeRO paper's figures (Adam, Ψ parameters, 16-bit training): stage 0 16Ψ, stage 1
4Ψ + 12Ψ/N, stage 2 2Ψ + 14Ψ/N, stage 3 16Ψ/N. Float32 training keeps no second copy of the
weights at any stage: 4Ψ params, 4Ψ grads and 8Ψ of moments, partitioned as above.
)";

// `estimated` false: the activations are null (the model has no estimate), never a 0.
nlohmann::ordered_json memory_json(const launch::ModelStateBytes& b, int64_t activations,
                                   bool estimated) {
  return {{"params", b.params},
          {"grads", b.grads},
          {"optimizer", b.optimizer},
          {"buffers", b.buffers},
          {"swap", b.swap},
          {"disk", b.disk},
          {"activations", estimated ? nlohmann::ordered_json(activations) : nullptr}};
}

std::string human(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  else if (b >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  return buf;
}

// The config at `ranks` ranks (--tp replacing tensor_parallel.autotp_size, --data data.path)
// and its vocabulary size (--vocab, GPT-2's for the gpt2 tokenizer, else data.path's).
io::TrainConfig read_config(const Args& a, int64_t ranks, int64_t& vocab) {
  const std::string path = a.positional()[0];
  io::TrainConfig cfg;
  if (a.has("tp")) {
    const int64_t tp = a.get_int("tp", 1);
    TS_CHECK(tp >= 1, "estimate-memory: --tp must be >= 1, got ", tp);
    nlohmann::json j = io::JsonFields::parse_file(path);
    j["tensor_parallel"]["autotp_size"] = tp;
    cfg = launch::parse_config(j.dump(), ranks, path);
  } else {
    cfg = launch::read_config(path, ranks);
  }
  for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
  if (a.has("data")) cfg.data.path = a.get("data", "");
  vocab = a.get_int("vocab", 0);
  TS_CHECK(!a.has("vocab") || (vocab >= 1 && vocab <= (int64_t{1} << 31)),
           "estimate-memory: --vocab must be in [1, 2^31], got ", vocab);
  if (vocab <= 0) {
    const std::optional<int64_t> known = launch::config_vocab_size(cfg);
    TS_CHECK(known,
             "estimate-memory: the vocabulary size depends on the corpus: give --vocab V "
             "or --data PATH");
    vocab = *known;
  }
  return cfg;
}

// A pipeline: one row per stage, as `tessera train --json` reports them per stage; the JSON's
// "memory" is the largest stage's.
int print_pipeline(const Args& a, const io::TrainConfig& cfg, int64_t vocab, int64_t ranks) {
  const std::vector<launch::PipelineStageEstimate> stages =
      launch::estimate_pipeline_memory(cfg, vocab);
  const parallel::PipelineConfig& pipe = parallel::pipeline_config(cfg);
  const int64_t tp = parallel::tensor_parallel_config(cfg).autotp_size, dp = cfg.world_size;
  const int64_t p = pipe.stages, m = cfg.gradient_accumulation_steps;
  std::cerr << cfg.model.type << " pipeline: " << p << " stages x " << dp << " data-parallel"
            << (tp > 1 ? " x " + std::to_string(tp) + " tensor-parallel" : std::string()) << ", "
            << pipe.schedule << " schedule"
            << (pipe.virtual_stages > 1
                    ? " (" + std::to_string(pipe.virtual_stages) + " chunks per stage)"
                    : std::string())
            << ", ZeRO stage " << parallel::zero_config(cfg).stage << ", " << m
            << " micro-batches of " << cfg.micro_batch_size << " x " << cfg.model.block_size
            << " tokens\n";
  std::printf("%-8s %8s %12s %12s %12s %12s %12s %12s\n", "stage", "layers", "params", "grads",
              "optimizer", "buffers", "activations", "total/rank");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  size_t peak = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    const launch::PipelineStageEstimate& e = stages[s];
    std::string layers;
    nlohmann::ordered_json bounds = nlohmann::ordered_json::array();
    for (const auto& [first, last] : e.layers) {
      layers += (layers.empty() ? "" : ",") + std::to_string(first) +
                (last - 1 > first ? "-" + std::to_string(last - 1) : std::string());
      bounds.push_back({first, last});
    }
    std::printf("%-8zu %8s %12s %12s %12s %12s %12s %12s\n", s, layers.c_str(),
                human(e.state.params).c_str(), human(e.state.grads).c_str(),
                human(e.state.optimizer).c_str(), human(e.state.buffers).c_str(),
                human(e.activations).c_str(), human(e.total()).c_str());
    if (e.tied_copies > 0)
      std::printf("%-8s %8s tied copies (weights and gradients, not this stage's parameters): %s\n",
                  "", "", human(e.tied_copies).c_str());
    rows.push_back({{"stage", s},
                    {"layers", bounds.size() == 1 ? bounds[0] : bounds},
                    {"memory", memory_json(e.state, e.activations, e.activations_estimated)},
                    {"tied_copies", e.tied_copies}});
    if (e.total() > stages[peak].total()) peak = s;
  }
  if (!stages.empty() && !stages.front().activations_estimated)
    std::printf("activations: not estimated (model.type \"%s\" has no activation estimate)\n",
                cfg.model.type.c_str());
  if (a.has("json"))
    std::cout << nlohmann::ordered_json{{"ranks", ranks},
                                        {"pipeline_stages", p},
                                        {"tensor_parallel", tp},
                                        {"zero_stage", parallel::zero_config(cfg).stage},
                                        {"memory", rows[peak]["memory"]},
                                        {"stages", rows}}
                     .dump()
              << "\n";
  return 0;
}

}  // namespace

int estimate_memory_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"ranks", "tp", "vocab", "data"});
  if (a.has("help")) {
    std::cout << kEstimateMemoryHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "estimate-memory: expected one CONFIG.json (see --help)");
  const int64_t ranks = a.get_int("ranks", 1);
  TS_CHECK(ranks >= 1, "estimate-memory: --ranks must be >= 1, got ", ranks);
  int64_t vocab = 0;
  io::TrainConfig cfg = read_config(a, ranks, vocab);
  if (parallel::pipeline_config(cfg).stages > 1) return print_pipeline(a, cfg, vocab, ranks);
  const int64_t tp = parallel::tensor_parallel_config(cfg).autotp_size;
  const launch::MemoryEstimate e = launch::estimate_memory(cfg, vocab);
  std::cerr << e.model_name << ": " << e.parameters << " parameters"
            << (tp > 1 ? " per tensor-parallel rank (autotp_size " + std::to_string(tp) + ")"
                       : std::string())
            << ", " << ranks << " ranks, "
            << (cfg.bf16           ? "bf16"
                : cfg.fp16.enabled ? "fp16"
                                   : "fp32")
            << ", " << cfg.optimizer.type << "\n";
  std::printf("%-8s %12s %12s %12s %12s %12s\n", "stage", "params", "grads", "optimizer", "buffers",
              "total/rank");
  for (int s = 0; s <= 3; ++s) {
    const launch::ModelStateBytes& b = e.by_zero_stage[static_cast<size_t>(s)];
    std::printf("%-8s %12s %12s %12s %12s %12s\n",
                (std::to_string(s) + (s == e.zero_stage ? " *" : "")).c_str(),
                human(b.params).c_str(), human(b.grads).c_str(), human(b.optimizer).c_str(),
                human(b.buffers).c_str(), human(b.total()).c_str());
  }
  if (e.activations_estimated)
    std::printf("activations: %s per rank (micro-batch of %lld x %lld tokens)\n",
                human(e.activations).c_str(), static_cast<long long>(cfg.micro_batch_size),
                static_cast<long long>(cfg.model.block_size));
  else
    std::printf("activations: not estimated (model.type \"%s\" has no activation estimate)\n",
                cfg.model.type.c_str());
  const parallel::ZeroConfig& zero = parallel::zero_config(cfg);
  const std::string& offload = zero.offload_optimizer_device;
  if (offload == "cpu")
    std::printf(
        "offload_optimizer cpu (stages 1-3): the optimizer column is host memory; a GPU "
        "holds params + grads\n");
  for (int s = 1; s <= 3; ++s) {
    const launch::ModelStateBytes& b = e.by_zero_stage[static_cast<size_t>(s)];
    if (b.disk == 0) continue;
    const bool params = s == 3 && zero.offload_param_device == "nvme";
    const bool state = offload == "nvme";
    std::printf(
        "nvme, stage %d: %s%s%s in %s of swap files per rank; their staging takes at most %s of "
        "host memory (in total/rank)\n",
        s, state ? "the optimizer's state" : "", state && params ? " and " : "",
        params ? "the parameter shards past max_in_cpu" : "", human(b.disk).c_str(),
        human(b.swap).c_str());
  }
  if (a.has("json"))
    std::cout << nlohmann::ordered_json{{"ranks", ranks},
                                        {"tensor_parallel", tp},
                                        {"zero_stage", e.zero_stage},
                                        {"optimizer_offloaded", offload},
                                        {"params_offloaded", zero.offload_param_device},
                                        {"num_parameters", e.parameters},
                                        {"memory", memory_json(e.configured(), e.activations,
                                                               e.activations_estimated)}}
                     .dump()
              << "\n";
  return 0;
}

}  // namespace tessera::cli
