// `tessera estimate-memory CONFIG.json --ranks N [--vocab V] [--data PATH] [--json]`
#include <cstdio>
#include <iostream>

#include "tessera/io/token_data.h"
#include "tessera/parallel/shard_layout.h"
#include "tools/cli.h"

namespace tessera::cli {

namespace {

const char* kHelp =
    R"(usage: tessera estimate-memory CONFIG.json --ranks N [--vocab V] [--data PATH] [--json]

Predicts the bytes of model state each of N data-parallel ranks will hold when training the
config's model: parameters, gradients and optimizer state (float32 master weights and
moments), for the config's ZeRO stage (and, in the table, every other stage), with the same
sharding and padding the engine uses, so the prediction matches what `tessera train --json`
reports. Activations and communication buffers are not included.

The vocabulary decides the embedding size: --vocab V, else GPT-2's 50257 for the gpt2
tokenizer, else the character vocabulary of data.path (--data), tokenised once and cached.

The ZeRO paper's figures (Adam, Ψ parameters, 16-bit training): stage 0 16Ψ, stage 1
4Ψ + 12Ψ/N, stage 2 2Ψ + 14Ψ/N, stage 3 16Ψ/N (float32 training: 4Ψ params and grads,
master weights need no second copy at stage 0).
)";

struct Estimate {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t total() const { return params + grads + optimizer; }
};

// Mirrors Engine::memory() / ZeroOptimizer::memory().
Estimate estimate(const io::TrainConfig& c, const parallel::ShardLayout& layout, int stage,
                  int world, const std::vector<int64_t>& numels) {
  const bool mixed = c.fp16.enabled || c.bf16;
  const int64_t pb = mixed ? 2 : 4;
  int64_t gb = pb;
  if (c.communication_data_type == "fp32") gb = 4;
  if (c.communication_data_type == "fp16" || c.communication_data_type == "bf16") gb = 2;
  const int64_t slots = c.optimizer.type == "SGD" ? (c.optimizer.momentum != 0 ? 1 : 0) : 2;
  const int64_t psi = layout.total_numel(), P = layout.partition_numel;
  Estimate e;
  if (stage == 0) {
    e.params = psi * pb;
    e.grads = psi * (world > 1 ? gb : pb);
    e.optimizer = (mixed ? 4 * psi : 0) + slots * 4 * psi;
    return e;
  }
  if (stage < 3) {
    e.params = psi * pb;
  } else {
    for (int64_t n : numels)
      if (n <= c.zero.stage3_param_persistence_threshold) e.params += n * pb;
    e.params += P * (mixed ? pb : 4);  // fp32: the shard is the master itself
  }
  e.grads = P * gb + (stage == 1 ? psi * pb : 0);
  e.optimizer = (stage == 3 && !mixed ? 0 : 4 * P) + slots * 4 * P;
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

}  // namespace

int estimate_memory_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"ranks", "vocab", "data"});
  if (a.has("help")) {
    std::cout << kHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "estimate-memory: expected one CONFIG.json (see --help)");
  const int64_t ranks = a.get_int("ranks", 1);
  TS_CHECK(ranks >= 1, "estimate-memory: --ranks must be >= 1, got ", ranks);
  io::TrainConfig cfg = io::TrainConfig::from_file(a.positional()[0], ranks);
  if (a.has("data")) cfg.data.path = a.get("data", "");
  int64_t vocab = a.get_int("vocab", 0);
  if (vocab <= 0) {
    if (cfg.data.tokenizer == "gpt2") {
      vocab = 50257;
    } else {
      TS_CHECK(!cfg.data.path.empty(), "estimate-memory: the vocabulary size depends on the ",
               "corpus: give --vocab V or --data PATH");
      vocab = io::prepare_corpus(cfg.data, cfg.model.type == "bert", false).vocab_size;
    }
  }
  auto model = model_from_train_config(cfg, vocab);
  std::vector<std::pair<std::string, Shape>> shapes;
  std::vector<int64_t> numels;
  for (auto& [n, t] : model->named_parameters()) {
    shapes.emplace_back(n, t->shape());
    numels.push_back(t->numel());
  }
  const parallel::ShardLayout layout(shapes, static_cast<int>(ranks));
  const int stage = static_cast<int>(cfg.zero.stage);
  const Estimate mine = estimate(cfg, layout, stage, static_cast<int>(ranks), numels);
  std::cerr << model->type_name() << ": " << layout.total_numel() << " parameters, " << ranks
            << " ranks, "
            << (cfg.bf16           ? "bf16"
                : cfg.fp16.enabled ? "fp16"
                                   : "fp32")
            << ", " << cfg.optimizer.type << "\n";
  std::printf("%-8s %14s %14s %14s %14s\n", "stage", "params", "grads", "optimizer", "total/rank");
  for (int s = 0; s <= 3; ++s) {
    const Estimate e = estimate(cfg, layout, s, static_cast<int>(ranks), numels);
    std::printf("%-8s %14s %14s %14s %14s\n",
                (std::to_string(s) + (s == stage ? " *" : "")).c_str(), human(e.params).c_str(),
                human(e.grads).c_str(), human(e.optimizer).c_str(), human(e.total()).c_str());
  }
  const bool offload = cfg.zero.offload_optimizer_device == "cpu";
  if (offload)
    std::printf(
        "offload_optimizer cpu (stages 1-3): the optimizer column is host memory; a GPU "
        "holds params + grads\n");
  if (a.has("json"))
    std::cout << "{\"ranks\": " << ranks << ", \"zero_stage\": " << stage
              << ", \"optimizer_offloaded\": " << (offload ? "true" : "false")
              << ", \"num_parameters\": " << layout.total_numel()
              << ", \"memory\": {\"params\": " << mine.params << ", \"grads\": " << mine.grads
              << ", \"optimizer\": " << mine.optimizer << "}}\n";
  return 0;
}

}  // namespace tessera::cli
