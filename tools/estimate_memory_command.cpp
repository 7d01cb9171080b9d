// `tessera estimate-memory CONFIG.json --ranks N [--tp T] [--vocab V] [--data PATH] [--json]`
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/token_data.h"
#include "tessera/io/tokenizer.h"
#include "tessera/launch/model_build.h"
#include "tessera/launch/model_config.h"
#include "tessera/models/activation_memory.h"
#include "tessera/models/bert_pipeline.h"
#include "tessera/models/gpt2_pipeline.h"
#include "tessera/parallel/pipe_schedule.h"
#include "tessera/parallel/shape_only_group.h"
#include "tessera/parallel/shard_layout.h"
#include "tessera/parallel/zero_optimizer.h"

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

struct Estimate {
  int64_t params = 0, grads = 0, optimizer = 0, buffers = 0;
  int64_t total() const { return params + grads + optimizer + buffers; }
};

// The model's dtype: bf16 or fp16 training, else float32.
DType model_dtype(const io::TrainConfig& c) {
  return c.bf16 ? DType::BFloat16 : c.fp16.enabled ? DType::Float16 : DType::Float32;
}

DType dtype_of(const std::string& name, DType fallback) {
  if (name == "fp32") return DType::Float32;
  if (name == "fp16") return DType::Float16;
  if (name == "bf16") return DType::BFloat16;
  return fallback;
}

// Mirrors Engine::memory() / ZeroOptimizer::memory() (tests/tools/distributed.sh checks that
// they agree to the byte).
Estimate estimate(const io::TrainConfig& c, const parallel::ShardLayout& layout, int stage,
                  int world) {
  const bool mixed = c.fp16.enabled || c.bf16;
  const DType model = model_dtype(c);
  const DType comm = dtype_of(c.communication_data_type, model);
  const int64_t pb = static_cast<int64_t>(itemsize(model)),
                gb = static_cast<int64_t>(itemsize(comm));
  const int64_t slots = c.optimizer.type == "SGD" ? (c.optimizer.momentum != 0 ? 1 : 0) : 2;
  const int64_t psi = layout.total_numel(), P = layout.partition_numel;
  Estimate e;
  if (stage == 0) {
    e.params = psi * pb;
    e.grads = psi * (world > 1 ? gb : pb);
    e.optimizer = (mixed ? 4 * psi : 0) + slots * 4 * psi;
    return e;
  }
  // A float32 model updated where it lives keeps no separate masters at stages 1-2: its
  // parameters sit in padded [world * shard] storages instead.
  const bool offloaded_elsewhere =
      c.zero.offload_optimizer_device == "cpu" && c.train.device.rfind("cuda", 0) == 0;
  const bool model_is_master = stage < 3 && !mixed && !offloaded_elsewhere;
  int64_t padded = 0;
  for (const auto& en : layout.entries) padded += en.shard * world;
  if (stage < 3) {
    e.params = model_is_master ? padded * 4 : psi * pb;
  } else {
    for (const auto& en : layout.entries)
      if (en.numel <= c.zero.stage3_param_persistence_threshold) e.params += en.numel * pb;
    e.params += P * (mixed ? pb : 4);  // fp32: the shard is the master itself
  }
  e.grads = P * gb + (stage == 1 ? psi * pb : 0);
  e.optimizer = (model_is_master || (stage == 3 && !mixed) ? 0 : 4 * P) + slots * 4 * P;
  parallel::ZeroOptions o;
  o.stage = stage;
  o.reduce_bucket_size = c.zero.reduce_bucket_size;
  o.allgather_bucket_size = c.zero.allgather_bucket_size;
  o.param_persistence_threshold = c.zero.stage3_param_persistence_threshold;
  o.prefetch_bucket_size = c.zero.stage3_prefetch_bucket_size;
  e.buffers = parallel::zero_buffer_bytes(layout, o, model, comm);
  return e;
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

// The config's micro-batch and layout as an activation plan.
models::ActivationPlan activation_plan(const io::TrainConfig& cfg) {
  models::ActivationPlan p;
  p.batch = cfg.micro_batch_size;
  p.sequence = cfg.model.block_size;
  p.tensor_parallel = cfg.tensor_parallel.autotp_size;
  p.sequence_parallel = cfg.tensor_parallel.sequence_parallel;
  p.dtype = model_dtype(cfg);
  if (cfg.activation_checkpointing.enabled) {
    const parallel::ActivationCheckpointingOptions ac =
        launch::activation_checkpointing_options(cfg);
    p.layers_per_checkpoint = parallel::layers_per_checkpoint(ac, cfg.model.n_layer);
    p.partition_activations = ac.partition_activations;
    p.checkpoints_on_host = ac.cpu_checkpointing && cfg.train.device.rfind("cuda", 0) == 0;
  }
  return p;
}

// The activation bytes per rank of the config's model, micro-batch and layout.
int64_t activation_bytes(const io::TrainConfig& cfg, int64_t vocab) {
  const models::ActivationPlan p = activation_plan(cfg);
  if (cfg.model.type == "bert")
    return models::bert_activation_bytes(launch::bert_config_from_train_config(cfg, vocab),
                                         cfg.data.nsp, p)
        .total();
  return models::gpt2_activation_bytes(launch::gpt2_config_from_train_config(cfg, vocab), p)
      .total();
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
    cfg = io::TrainConfig::parse(j.dump(), ranks, path);
  } else {
    cfg = io::TrainConfig::from_file(path, ranks);
  }
  if (a.has("data")) cfg.data.path = a.get("data", "");
  vocab = a.get_int("vocab", 0);
  TS_CHECK(!a.has("vocab") || (vocab >= 1 && vocab <= (int64_t{1} << 31)),
           "estimate-memory: --vocab must be in [1, 2^31], got ", vocab);
  if (vocab <= 0) {
    if (!cfg.model.init_from.empty()) {  // the pretrained embedding's rows
      const std::string text = launch::init_from_config_json(cfg);
      vocab = cfg.model.type == "bert" ? models::BertConfig::from_json(text).vocab_size
                                       : models::GPT2Config::from_json(text).vocab_size;
    } else if (cfg.data.tokenizer == "wordpiece") {
      vocab = io::WordPieceTokenizer::from_file(cfg.data.vocab, cfg.data.lower_case).vocab_size();
    } else if (cfg.data.tokenizer == "gpt2") {
      vocab = 50257;
    } else {
      TS_CHECK(!cfg.data.path.empty(), "estimate-memory: the vocabulary size depends on the ",
               "corpus: give --vocab V or --data PATH");
      vocab = io::prepare_corpus(cfg.data, cfg.model.type == "bert", false).vocab_size;
    }
  }
  return cfg;
}

// A pipeline: per stage, its PipelineModule's model state (ZeRO over the stage's replicas)
// and its activations (the schedule's most micro-batches held at once; 1F1B: min(micro-batches,
// stages - stage); ZB-H1 holds them until their weight pass), as
// `tessera train --json` reports them per stage; the JSON's "memory" is the largest stage's.
int estimate_pipeline(const Args& a, const io::TrainConfig& cfg, int64_t vocab, int64_t ranks) {
  TS_CHECK(cfg.zero.stage < 3,
           "estimate-memory: zero_optimization.stage 3 with pipeline "
           "stages is refused by the engine (see docs/parallelism.md)");
  const parallel::PipelineModuleOptions po = launch::pipeline_module_options(cfg);
  const bool bert = cfg.model.type == "bert";
  const models::GPT2Config gc =
      bert ? models::GPT2Config{} : launch::gpt2_config_from_train_config(cfg, vocab);
  const models::BertConfig bc =
      bert ? launch::bert_config_from_train_config(cfg, vocab) : models::BertConfig{};
  const int64_t tp = cfg.tensor_parallel.autotp_size;
  // 3D: each stage built of tensor-parallel layers over a group of autotp_size ranks (rank 0's
  // shards; every rank's are alike), so its parameters and its partition are a rank's (the
  // layers check that heads and features divide).
  const auto tp_group =
      tp > 1 ? std::make_shared<parallel::ShapeOnlyGroup>(static_cast<int>(tp)) : nullptr;
  const std::vector<parallel::LayerSpec> specs =
      bert ? models::bert_pipeline_layers(bc, cfg.data.nsp, tp_group,
                                          cfg.tensor_parallel.sequence_parallel)
           : models::gpt2_pipeline_layers(gc, tp_group, cfg.tensor_parallel.sequence_parallel);
  const int dp = static_cast<int>(cfg.world_size), zero = static_cast<int>(cfg.zero.stage);

  models::ActivationPlan plan = activation_plan(cfg);
  plan.layers_per_checkpoint = po.activation_checkpoint_interval;
  auto stage_bytes = [&](int64_t first, int64_t last) {
    return bert ? models::bert_pipeline_stage_bytes(bc, cfg.data.nsp, plan, first, last)
                : models::gpt2_pipeline_stage_bytes(gc, plan, first, last);
  };
  const int64_t p = cfg.pipeline.stages, m = cfg.gradient_accumulation_steps;
  std::cerr << (bert ? "BERT" : "GPT-2") << " pipeline: " << p << " stages x " << dp
            << " data-parallel"
            << (tp > 1 ? " x " + std::to_string(tp) + " tensor-parallel" : std::string()) << ", "
            << cfg.pipeline.schedule << " schedule"
            << (cfg.pipeline.virtual_stages > 1
                    ? " (" + std::to_string(cfg.pipeline.virtual_stages) + " chunks per stage)"
                    : std::string())
            << ", ZeRO stage " << zero << ", " << m << " micro-batches of " << cfg.micro_batch_size
            << " x " << cfg.model.block_size << " tokens\n";
  std::printf("%-8s %8s %12s %12s %12s %12s %12s %12s\n", "stage", "layers", "params", "grads",
              "optimizer", "buffers", "activations", "total/rank");
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  int64_t peak = -1;
  nlohmann::ordered_json peak_memory;
  for (int64_t s = 0; s < p; ++s) {
    parallel::PipelineModule stage(specs, {}, s, po);  // (builds this stage's layers)
    std::vector<std::pair<std::string, Shape>> shapes;
    for (auto& [n, t] : stage.named_parameters()) shapes.emplace_back(n, t->shape());
    const Estimate e = estimate(cfg, parallel::ShardLayout(shapes, dp), zero, dp);
    // Each chunk's layers (one chunk but with the interleaved schedule) and what they keep.
    std::vector<int64_t> chunk_bytes;
    std::string layers;
    nlohmann::ordered_json layer_bounds = nlohmann::ordered_json::array();
    for (int64_t c = 0; c < stage.num_chunks(); ++c) {
      const int64_t first = stage.bounds()[static_cast<size_t>(stage.part_of(c))],
                    last = stage.bounds()[static_cast<size_t>(stage.part_of(c) + 1)];
      chunk_bytes.push_back(stage_bytes(first, last));
      layers += (c ? "," : "") + std::to_string(first) +
                (last - 1 > first ? "-" + std::to_string(last - 1) : std::string());
      layer_bounds.push_back({first, last});
    }
    const int64_t act = parallel::peak_activation_bytes(
        parallel::train_schedule(cfg.pipeline.schedule, m, p, s, stage.num_chunks())->steps(),
        chunk_bytes);
    // A tied module's copy (not a parameter of this stage): its weights and their gradient.
    int64_t copies = 0;
    for (const auto& [key, holders] : stage.tied_stages())
      if (holders.front() != s && std::count(holders.begin(), holders.end(), s))
        for (const Tensor* t : stage.tied_parameters(key))
          copies += 2 * t->numel() * static_cast<int64_t>(itemsize(model_dtype(cfg)));
    std::printf("%-8lld %8s %12s %12s %12s %12s %12s %12s\n", static_cast<long long>(s),
                layers.c_str(), human(e.params).c_str(), human(e.grads).c_str(),
                human(e.optimizer).c_str(), human(e.buffers).c_str(), human(act).c_str(),
                human(e.total() + act).c_str());
    nlohmann::ordered_json mem{{"params", e.params},
                               {"grads", e.grads},
                               {"optimizer", e.optimizer},
                               {"buffers", e.buffers},
                               {"activations", act}};
    stages.push_back({{"stage", s},
                      {"layers", layer_bounds.size() == 1 ? layer_bounds[0] : layer_bounds},
                      {"memory", mem},
                      {"tied_copies", copies}});
    if (copies > 0)
      std::printf("%-8s %8s tied copies (weights and gradients, not this stage's parameters): %s\n",
                  "", "", human(copies).c_str());
    if (e.total() + act > peak) peak = e.total() + act, peak_memory = mem;
  }
  if (a.has("json"))
    std::cout << nlohmann::ordered_json{{"ranks", ranks},        {"pipeline_stages", p},
                                        {"tensor_parallel", tp}, {"zero_stage", zero},
                                        {"memory", peak_memory}, {"stages", stages}}
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
  if (cfg.pipeline.stages > 1) return estimate_pipeline(a, cfg, vocab, ranks);
  const int64_t tp = cfg.tensor_parallel.autotp_size;
  const int dp = static_cast<int>(cfg.world_size);  // data-parallel ranks: ranks / autotp_size
  // The run's own model (with autotp_size, a rank's tensor-parallel shard, built by its layers
  // over a group that only has a size): what it holds is what the engine will see.
  const auto tp_group =
      tp > 1 ? std::make_shared<parallel::ShapeOnlyGroup>(static_cast<int>(tp)) : nullptr;
  const std::unique_ptr<nn::Module> model = launch::fresh_model(cfg, vocab, tp_group);
  std::vector<std::pair<std::string, Shape>> shapes;
  for (auto& [n, t] : model->named_parameters()) shapes.emplace_back(n, t->shape());
  const parallel::ShardLayout layout(shapes, dp);
  const int stage = static_cast<int>(cfg.zero.stage);
  const Estimate mine = estimate(cfg, layout, stage, dp);
  std::cerr << model->type_name() << ": " << layout.total_numel() << " parameters"
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
    const Estimate e = estimate(cfg, layout, s, dp);
    std::printf("%-8s %12s %12s %12s %12s %12s\n",
                (std::to_string(s) + (s == stage ? " *" : "")).c_str(), human(e.params).c_str(),
                human(e.grads).c_str(), human(e.optimizer).c_str(), human(e.buffers).c_str(),
                human(e.total()).c_str());
  }
  const int64_t activations = activation_bytes(cfg, vocab);
  std::printf("activations: %s per rank (micro-batch of %lld x %lld tokens)\n",
              human(activations).c_str(), static_cast<long long>(cfg.micro_batch_size),
              static_cast<long long>(cfg.model.block_size));
  const bool offload = cfg.zero.offload_optimizer_device == "cpu";
  if (offload)
    std::printf(
        "offload_optimizer cpu (stages 1-3): the optimizer column is host memory; a GPU "
        "holds params + grads\n");
  if (a.has("json"))
    std::cout << "{\"ranks\": " << ranks << ", \"tensor_parallel\": " << tp
              << ", \"zero_stage\": " << stage
              << ", \"optimizer_offloaded\": " << (offload ? "true" : "false")
              << ", \"num_parameters\": " << layout.total_numel()
              << ", \"memory\": {\"params\": " << mine.params << ", \"grads\": " << mine.grads
              << ", \"optimizer\": " << mine.optimizer << ", \"buffers\": " << mine.buffers
              << ", \"activations\": " << activations << "}}\n";
  return 0;
}

}  // namespace tessera::cli
