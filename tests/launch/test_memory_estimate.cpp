// launch::estimate_memory against the ZeRO paper's formulas (derived by hand for a GPT-2 of
// known size) and against the engine that launch::build assembles for the same config,
// which counts what it allocated (Engine::memory()).
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/launch/job.h"
#include "tessera/launch/memory_estimate.h"
#include "tessera/parallel/process_group.h"

namespace {

using namespace tessera;

constexpr int64_t kLayers = 2, kEmbd = 32, kBlock = 16;

nlohmann::json tiny_gpt2(const std::string& corpus) {
  return {{"train_batch_size", 2},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
          {"model",
           {{"type", "gpt2"},
            {"n_layer", kLayers},
            {"n_head", 2},
            {"n_embd", kEmbd},
            {"block_size", kBlock},
            {"bias", true}}},
          {"data", {{"path", corpus}, {"tokenizer", "char"}}},
          {"train", {{"steps", 1}, {"seed", 1}}}};
}

// GPT-2's parameters: token and position embeddings, per block 12 C^2 + 13 C (four weights,
// their biases, two LayerNorms), and the final LayerNorm; the head is tied.
int64_t gpt2_parameters(int64_t vocab) {
  const int64_t C = kEmbd;
  return vocab * C + kBlock * C + kLayers * (12 * C * C + 13 * C) + 2 * C;
}

// A corpus and its token cache in a directory of this process's own, removed at the end.
struct CorpusDir {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("tessera_memory_estimate_" + std::to_string(::getpid()));
  CorpusDir() {
    std::filesystem::create_directories(dir);
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog " << i << "\n";
  }
  ~CorpusDir() { std::filesystem::remove_all(dir); }
  nlohmann::json config() const {
    nlohmann::json j = tiny_gpt2((dir / "corpus.txt").string());
    j["data"]["cache_dir"] = (dir / "cache").string();
    return j;
  }
};

}  // namespace

TEST_CASE("estimate_memory: one process holds the ZeRO paper's 16 bytes per parameter") {
  const CorpusDir corpus;
  const int64_t vocab = 40;
  const int64_t psi = gpt2_parameters(vocab);
  SUBCASE("float32: 4 params + 4 grads + 8 moments") {
    const auto cfg = io::TrainConfig::parse(corpus.config().dump(), 1, "test");
    const launch::MemoryEstimate e = launch::estimate_memory(cfg, vocab);
    CHECK(e.parameters == psi);
    CHECK(e.model_name == "GPT2LMHeadModel");
    CHECK(e.zero_stage == 0);
    const launch::ModelStateBytes& s = e.by_zero_stage[0];
    CHECK(s.params == 4 * psi);
    CHECK(s.grads == 4 * psi);
    CHECK(s.optimizer == 8 * psi);
    CHECK(s.buffers == 0);
    CHECK(e.activations > 0);
  }
  SUBCASE("bf16: 2 params + 2 grads + 12 (float32 master and moments)") {
    nlohmann::json j = corpus.config();
    j["bf16"] = {{"enabled", true}};
    const auto cfg = io::TrainConfig::parse(j.dump(), 1, "test");
    const launch::ModelStateBytes s = launch::estimate_memory(cfg, vocab).configured();
    CHECK(s.params == 2 * psi);
    CHECK(s.grads == 2 * psi);
    CHECK(s.optimizer == 12 * psi);
  }
  SUBCASE("a pipeline config is estimated stage by stage") {
    nlohmann::json j = corpus.config();
    j["pipeline"] = {{"stages", 2}};
    const auto cfg = io::TrainConfig::parse(j.dump(), 2, "test");
    CHECK_THROWS_WITH_AS(launch::estimate_memory(cfg, vocab),
                         doctest::Contains("estimate_pipeline_memory"), Error);
    const auto stages = launch::estimate_pipeline_memory(cfg, vocab);
    REQUIRE(stages.size() == 2);
    // Every block on one stage or the other: the stages' float32 parameters add up to the
    // whole model's, but for the tied embedding's copy on the last stage.
    CHECK(stages[0].state.params + stages[1].state.params == 4 * psi);
    CHECK(stages[1].tied_copies == 2 * 4 * vocab * kEmbd);
  }
}

TEST_CASE("estimate_memory equals what the engine launch::build assembles reports") {
  const CorpusDir corpus;
  for (int stage : {0, 1, 2}) {
    for (bool bf16 : {false, true}) {
      CAPTURE(stage);
      CAPTURE(bf16);
      nlohmann::json j = corpus.config();
      j["zero_optimization"] = {{"stage", stage}};
      if (bf16) j["bf16"] = {{"enabled", true}};
      const auto cfg = io::TrainConfig::parse(j.dump(), 1, "test");
      const auto job = launch::build(cfg, parallel::world());
      // One step: the optimizer's moments exist from the first update on.
      const auto batches = job->train_batches();
      job->engine->backward(job->engine->forward(batches->next()));
      job->engine->step();
      const parallel::MemoryStats m = job->engine->memory();
      const std::optional<int64_t> vocab = launch::config_vocab_size(cfg);  // the corpus's
      REQUIRE(vocab);
      const launch::MemoryEstimate e = launch::estimate_memory(cfg, *vocab);
      CHECK(e.parameters == gpt2_parameters(*vocab));
      CHECK(e.configured().params == m.params);
      CHECK(e.configured().grads == m.grads);
      CHECK(e.configured().optimizer == m.optimizer);
      CHECK(e.configured().buffers == m.buffers);
    }
  }
}
