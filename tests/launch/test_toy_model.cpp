// A model of one's own through the model registry: a toy MLP language model ("mlp_lm": token
// embedding, residual blocks x + dropout(W2 gelu(W1 x)), a linear head), written once over a
// ParallelContext and registered with one line, then trained through launch::build whole,
// tensor parallel (TP 2) and as a pipeline (PP 2) by its config alone: N ranks reproduce one
// process (1e-6 relative, float32, dropout on). This file is the whole of what adding a model
// takes (docs/extending.md).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/models/model_registry.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "train_losses.h"

using namespace tessera;

namespace {

struct MlpLmConfig {
  int64_t vocab_size = 0, n_embd = 16, n_layer = 2, hidden = 32;
  double dropout = 0.0;
  std::string to_json() const {
    return nlohmann::json{{"model_type", "mlp_lm"}, {"vocab_size", vocab_size},
                          {"n_embd", n_embd},       {"n_layer", n_layer},
                          {"hidden", hidden},       {"dropout", dropout}}
        .dump();
  }
  static MlpLmConfig from_json(const std::string& text) {
    const auto j = nlohmann::json::parse(text);
    return {j.at("vocab_size").get<int64_t>(), j.at("n_embd").get<int64_t>(),
            j.at("n_layer").get<int64_t>(), j.at("hidden").get<int64_t>(),
            j.at("dropout").get<double>()};
  }
};

// x + dropout(W2 gelu(W1 x)): W1 column-parallel, W2 row-parallel (plain layers without a group).
class MlpBlock : public nn::Module {
 public:
  MlpBlock(nn::Module* parent, const std::string& name, const MlpLmConfig& c,
           const parallel::ParallelContext& ctx)
      : nn::Module(parent, name),
        fc(this, "fc", c.n_embd, c.hidden, ctx.tensor_group(), /*gather_output=*/false),
        proj(this, "proj", c.hidden, c.n_embd, ctx.tensor_group(), /*input_is_parallel=*/true),
        drop(this, "drop", c.dropout) {}
  Tensor forward(const Tensor& x) { return x + drop(proj(gelu(fc(x)))); }
  std::string type_name() const override { return "MlpBlock"; }
  parallel::ColumnParallelLinear fc;
  parallel::RowParallelLinear proj;
  nn::Dropout drop;
};

Tensor lm_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(logits.view({-1, logits.size(2)}), targets.reshape({-1}), -100);
}

class MlpLm : public models::PretrainedModel {
 public:
  // Over a tensor-parallel group: this rank's shards of the model one process draws from the
  // generator's state at `start` (the parallel layers themselves start at zero).
  MlpLm(const MlpLmConfig& c, const parallel::ParallelContext& ctx = {},
        GeneratorState start = default_generator().state())
      : config(c),
        context(ctx),
        wte(this, "wte", c.vocab_size, c.n_embd),
        blocks(this, "blocks"),
        head(this, "head", c.n_embd, c.vocab_size) {
    for (int64_t i = 0; i < c.n_layer; ++i) blocks.emplace_back<MlpBlock>(c, ctx);
    if (!ctx.tensor_group()) return;
    default_generator().set_state(start);
    MlpLm whole(c);
    load_from_whole(whole, "the whole model");
  }
  Tensor logits(const models::Batch& b) override {
    Tensor x = wte(b.input_ids);
    for (size_t i = 0; i < blocks.size(); ++i) x = blocks.at<MlpBlock>(i).forward(x);
    return head(x);
  }
  Tensor loss(const models::Batch& b) override { return b.weighted(lm_loss(logits(b), b.targets)); }
  std::string type_name() const override { return "MlpLm"; }
  std::string model_type() const override { return "mlp_lm"; }
  std::string config_json() const override { return config.to_json(); }
  int64_t vocab_size() const override { return config.vocab_size; }
  std::vector<models::HFWeight> hf_weights() override {
    std::vector<models::HFWeight> out;
    for (auto& [name, t] : named_parameters()) out.push_back({name, name});
    return out;
  }
  std::string hf_prefix() const override { return ""; }
  bool hf_ignorable(const std::string&) const override { return false; }
  void load_from_whole(PretrainedModel& whole, const std::string&) override {
    parallel::load_whole_state(*this, whole.state_dict(), context.tensor_parallel_rank(),
                               context.tensor_parallel_size());
  }
  void set_activation_checkpointing(std::shared_ptr<parallel::ActivationCheckpointing>) override {}

  MlpLmConfig config;
  parallel::ParallelContext context;
  nn::Embedding wte;
  nn::ModuleList blocks;
  nn::Linear head;
};

// The pipeline: the embedding, each block, the head, as the model runs them.
class EmbedPipe : public parallel::PipeLayer {
 public:
  EmbedPipe(nn::Module* parent, const std::string& name, MlpLmConfig c)
      : PipeLayer(parent, name), wte(this, "wte", c.vocab_size, c.n_embd) {}
  parallel::PipeValue forward(const parallel::PipeValue& x) override { return {wte(x.at(0))}; }
  nn::Embedding wte;
};
class BlockPipe : public parallel::PipeLayer {
 public:
  BlockPipe(nn::Module* parent, const std::string& name, MlpLmConfig c,
            parallel::ParallelContext ctx)
      : PipeLayer(parent, name), block(this, "block", c, ctx) {}
  parallel::PipeValue forward(const parallel::PipeValue& x) override {
    return {block.forward(x.at(0))};
  }
  std::string type_name() const override { return "MlpBlock"; }
  MlpBlock block;
};
class HeadPipe : public parallel::PipeLayer {
 public:
  HeadPipe(nn::Module* parent, const std::string& name, MlpLmConfig c)
      : PipeLayer(parent, name), head(this, "head", c.n_embd, c.vocab_size) {}
  parallel::PipeValue forward(const parallel::PipeValue& x) override { return {head(x.at(0))}; }
  nn::Linear head;
};

MlpLmConfig config_of(const io::TrainConfig& cfg, int64_t vocab) {
  const auto& m = cfg.model;
  return {vocab, m.n_embd, m.n_layer, m.intermediate_size ? m.intermediate_size : 4 * m.n_embd,
          m.dropout};
}

models::ModelEntry mlp_lm_entry() {
  models::ModelEntry e;
  e.type = "mlp_lm";
  e.doc = "a toy MLP language model (tests/launch/test_toy_model.cpp)";
  e.section_keys = {"n_layer", "n_embd", "intermediate_size"};
  e.build = [](const io::TrainConfig& cfg, int64_t vocab, const parallel::ParallelContext& ctx) {
    return std::make_unique<MlpLm>(config_of(cfg, vocab), ctx);
  };
  e.from_config_json = [](const std::string& text, const std::string&,
                          const parallel::ParallelContext& ctx) {
    return std::make_unique<MlpLm>(MlpLmConfig::from_json(text), ctx);
  };
  e.pipeline = [](const io::TrainConfig& cfg, int64_t vocab, const parallel::ParallelContext& ctx) {
    const MlpLmConfig c = config_of(cfg, vocab);
    models::PipelineDefinition p;
    p.layers.push_back(parallel::LayerSpec::of<EmbedPipe>("Embedding", c));
    for (int64_t i = 0; i < c.n_layer; ++i)
      p.layers.push_back(parallel::LayerSpec::of<BlockPipe>("MlpBlock", c, ctx));
    p.layers.push_back(parallel::LayerSpec::of<HeadPipe>("Linear", c));
    p.loss = [](const parallel::PipeValue& out, const parallel::PipeValue& labels) {
      return lm_loss(out.at(0), labels.at(0));
    };
    p.whole_name = [n = c.n_layer](const std::string& name) {  // "2.block.fc.weight"
      const int64_t layer = std::stoll(name.substr(0, name.find('.')));
      const std::string rest = name.substr(name.find('.') + 1);
      if (layer == 0 || layer == n + 1) return rest;
      return "blocks." + std::to_string(layer - 1) + rest.substr(rest.find('.'));
    };
    p.checkpointable_layer = "MlpBlock";
    return p;
  };
  return e;
}

const models::RegisterModel kMlpLm{mlp_lm_entry()};  // the one registry line

nlohmann::json toy_config(const test::SharedCorpus& corpus, int tp, int pp) {
  nlohmann::json j = {{"train_batch_size", 8},
                      {"gradient_accumulation_steps", 2},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}},
                      {"gradient_clipping", 1.0},
                      {"model",
                       {{"type", "mlp_lm"},
                        {"n_layer", 2},
                        {"n_embd", 16},
                        {"intermediate_size", 32},
                        {"block_size", 8},
                        {"dropout", 0.1}}},
                      {"data", corpus.data()},
                      {"train", {{"seed", 5}, {"steps", 3}}}};
  if (tp > 1) j["tensor_parallel"] = {{"autotp_size", tp}};
  if (pp > 1) j["pipeline"] = {{"stages", pp}};
  return j;
}

}  // namespace

TEST_CASE("the model registry: the built-in models, a registered one, errors naming the type") {
  const auto types = models::registered_model_types();
  CHECK(types == std::vector<std::string>{"bert", "gpt2", "mlp_lm"});
  CHECK(models::registered_model_list("builtin:") == "builtin:bert, builtin:gpt2, builtin:mlp_lm");
  CHECK(models::find_model("bert").objective == models::Objective::masked_lm);
  CHECK(models::find_model("mlp_lm").objective == models::Objective::causal_lm);
  CHECK_THROWS_WITH_AS(models::register_model(mlp_lm_entry()),
                       doctest::Contains("'mlp_lm' is registered twice"), Error);
  CHECK_THROWS_WITH_AS(models::find_model("llama"),
                       doctest::Contains("\"llama\" is not registered (registered: bert, gpt2, "
                                         "mlp_lm)"),
                       Error);
  io::TrainConfig cfg = io::TrainConfig::parse(
      R"({"train_batch_size": 1, "model": {"type": "llama"}})", 1, "my.json");
  CHECK_THROWS_WITH_AS(models::check_model_config(cfg),
                       doctest::Contains("my.json: 'model.type' is \"llama\", expected one of: "
                                         "bert, gpt2, mlp_lm"),
                       Error);
  // Keys the model does not read are warned about as having no effect.
  cfg = launch::parse_config(R"({"train_batch_size": 1, "model": {"type": "mlp_lm", "n_head": 2,
      "bias": false}, "data": {"mask_prob": 0.2}})",
                             1, "my.json");
  auto warned = [&](const std::string& what) {
    for (const std::string& w : cfg.warnings)
      if (w.find(what) != std::string::npos) return true;
    return false;
  };
  CHECK(warned("'model.n_head' has no effect on mlp_lm"));
  CHECK(warned("'model.bias' has no effect on mlp_lm"));
  CHECK(warned("'data.mask_prob' has no effect on mlp_lm"));
  CHECK_FALSE(warned("n_embd"));
  // The built-in models' keys (what io warned about before the registry).
  cfg = launch::parse_config(
      R"({"train_batch_size": 1, "model": {"type": "gpt2", "intermediate_size": 64}})", 1, "c");
  CHECK(warned("'model.intermediate_size' has no effect on gpt2"));
  cfg = launch::parse_config(R"({"train_batch_size": 1, "model": {"type": "bert", "bias": false}})",
                             1, "c");
  CHECK(warned("'model.bias' has no effect on bert"));
  cfg = launch::parse_config(R"({"train_batch_size": 1, "data": {"nsp": true}})", 1, "c");
  CHECK(warned("'data.nsp' has no effect on gpt2"));
}

TEST_CASE("a registered model saves and loads its config.json through load_pretrained") {
  auto one = parallel::world();
  if (one->size() != 1) return;
  manual_seed(3);
  MlpLm model(MlpLmConfig{11, 8, 2, 16, 0.0});
  const auto dir =
      std::filesystem::temp_directory_path() / ("tessera_toy_save_" + std::to_string(::getpid()));
  models::save_pretrained(model, dir.string());
  const auto loaded = models::load_pretrained(dir.string());
  std::filesystem::remove_all(dir);
  CHECK(loaded->type_name() == "MlpLm");
  const auto a = model.state_dict(), b = loaded->state_dict();
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) CHECK(b.at(name).to_vector() == t.to_vector());
}

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

TEST_CASE("a registered toy model trains whole, TP 2 and PP 2 by config as one process does") {
  const test::SharedCorpus corpus("toy-model");
  const auto& world = corpus.world;
  std::vector<std::pair<int, int>> layouts{{1, 1}};  // data parallel over the world
  if (world->size() % 2 == 0) layouts.insert(layouts.end(), {{2, 1}, {1, 2}});
  std::vector<std::vector<double>> runs;
  for (const auto& [tp, pp] : layouts)
    runs.push_back(test::train_losses(toy_config(corpus, tp, pp), world, 3));
  // One process (each rank alone, reading the token cache the world's first job wrote).
  const std::vector<double> one =
      test::train_losses(toy_config(corpus, 1, 1), parallel::make_local_group(), 3);
  REQUIRE(one.size() == 3);
  CHECK(one[2] < one[0]);  // (it learns)
  for (size_t i = 0; i < layouts.size(); ++i) {
    CAPTURE(layouts[i].first);   // tensor parallel
    CAPTURE(layouts[i].second);  // pipeline stages
    REQUIRE(runs[i].size() == one.size());
    for (size_t s = 0; s < one.size(); ++s)
      CHECK(runs[i][s] == doctest::Approx(one[s]).epsilon(1e-6));
  }
  // The tensor-parallel layout comes from the model's own layers.
  if (world->size() % 2 == 0) {
    auto job = launch::build(
        launch::parse_config(toy_config(corpus, 2, 1).dump(), world->size(), "toy"), world);
    const auto layout = parallel::tensor_parallel_layout(job->model());
    CHECK(layout.size() == 6);  // per block: fc's weight and bias, proj's weight
    CHECK(layout.count("blocks.0.fc.weight") == 1);
    CHECK(layout.count("blocks.1.proj.weight") == 1);
    CHECK(layout.count("head.weight") == 0);
  }
}

TEST_SUITE_END();
