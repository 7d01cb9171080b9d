// DeepSpeed's sparse_attention section on the built-in models: what the section reads and
// refuses; GPT-2 with it (a sparse layout equals the same layout as a dense mask, through the
// KV cache; the layouts survive config.json); BERT with it (dense mode equals no section under
// a padding mask); GPT-2 and BERT with random per-head layouts trained whole, tensor parallel,
// sequence parallel and as a pipeline by config: N ranks reproduce one process (1e-6,
// float32, dropout on), and dense mode trains as no section does.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "tessera/io/train_config.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/sparse_attention.h"
#include "tessera/ops.h"
#include "train_losses.h"

using namespace tessera;

namespace {

nlohmann::json model_config(const test::SharedCorpus& corpus, const nlohmann::json& sparse,
                            const std::string& type = "gpt2") {
  nlohmann::json j = {{"train_batch_size", 8},
                      {"gradient_accumulation_steps", 2},
                      {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.01}}}}},
                      {"model",
                       {{"type", type},
                        {"n_layer", 2},
                        {"n_head", 4},
                        {"n_embd", 32},
                        {"block_size", 40},
                        {"dropout", 0.1}}},
                      {"data", corpus.data()},
                      {"train", {{"seed", 5}, {"steps", 3}}}};
  if (!sparse.is_null()) j["sparse_attention"] = sparse;
  return j;
}

// Random blocks per head and per layer, and a block (16) that does not divide T (40).
const nlohmann::json kBigBird = {{"mode", "bigbird"},
                                 {"block", 16},
                                 {"different_layout_per_head", true},
                                 {"num_random_blocks", 1},
                                 {"num_sliding_window_blocks", 1},
                                 {"num_global_blocks", 1}};

io::TrainConfig parse(const nlohmann::json& sparse, const std::string& type = "gpt2") {
  nlohmann::json j = {{"train_batch_size", 4},
                      {"model", {{"type", type}, {"block_size", 64}}},
                      {"sparse_attention", sparse}};
  return io::TrainConfig::parse(j.dump(), 1, "sa.json");
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("sparse_attention: DeepSpeed's keys and defaults, other modes' keys, errors by key") {
  const io::TrainConfig defaults = parse(nlohmann::json::object());
  const auto& s = defaults.section<models::SparseAttentionConfig>();
  CHECK(s.enabled);
  CHECK(s.sparsity.mode == "fixed");  // DeepSpeed's defaults (runtime/constants.py)
  CHECK(s.sparsity.block == 16);
  CHECK(s.sparsity.num_local_blocks == 4);
  CHECK(s.sparsity.num_random_blocks == 0);
  CHECK(s.sparsity.local_window_blocks == std::vector<int64_t>{4});
  CHECK_FALSE(s.sparsity.global_block_end_indices.has_value());
  CHECK_FALSE(io::TrainConfig::parse(R"({"train_batch_size": 4})", 1, "x.json")
                  .section<models::SparseAttentionConfig>()
                  .enabled);
  // DeepSpeed's documented example states every mode's keys; the others have no effect.
  const io::TrainConfig cfg = parse({{"mode", "fixed"}, {"num_random_blocks", 2}});
  bool warned = false;
  for (const std::string& w : cfg.warnings)
    warned = warned || w.find(
                           "'sparse_attention.num_random_blocks' has no effect in mode "
                           "\"fixed\"") != std::string::npos;
  CHECK(warned);
  // bigbird does not read attention (DeepSpeed passes it to fixed and variable only).
  CHECK(parse({{"mode", "bigbird"}, {"attention", "unidirectional"}})
            .section<models::SparseAttentionConfig>()
            .sparsity.attention == "bidirectional");
  CHECK(error_of([] {
          parse({{"mode", "strided"}});
        }).find("'sparse_attention.mode' is \"strided\"") != std::string::npos);
  CHECK(error_of([] {
          parse({{"block", 0}});
        }).find("'sparse_attention.block'") != std::string::npos);
  CHECK(error_of([] {
          parse({{"local_window_blocks", "4"}});
        }).find("'sparse_attention.local_window_blocks' must be a list") != std::string::npos);
}

TEST_CASE("sparse_attention: bad sizes name the key") {
  const test::SharedCorpus corpus("sparse-attention-keys");
  auto build = [&](nlohmann::json c) {
    launch::build(launch::parse_config(c.dump(), 1, "sa.json"), parallel::make_local_group());
  };
  CHECK(error_of([&] {
          build(model_config(corpus, {{"block", 64}}, "bert"));
        })
            .find("sparse_attention.block 64 is longer than the model's max_position_embeddings "
                  "40") != std::string::npos);
  CHECK(error_of([&] {
          build(model_config(corpus, {{"block", 64}}));
        }).find("sparse_attention.block 64 is longer than the model's n_positions 40") !=
        std::string::npos);
  CHECK(error_of([&] {
          build(model_config(corpus, {{"mode", "bigbird"}, {"num_random_blocks", 9}}));
        }).find("num_random_blocks") != std::string::npos);
}

TEST_CASE("sparse attention with the transformer kernel's attention dropout: an error by model") {
  nn::TransformerKernelOptions kernel;
  kernel.attn_dropout_ratio = 0.1;
  const auto sparse = models::SparseAttention{models::sparsity_from_json(kBigBird, "t"), 1};
  models::GPT2Config g = models::GPT2Config::named("tiny");
  g.n_positions = 40;
  g.sparse_attention = sparse;
  g.transformer_kernel = kernel;
  CHECK(error_of([&] {
          models::GPT2LMHeadModel m(g);
        }).find("GPT-2: transformer_kernel.attn_dropout_ratio needs dense attention") !=
        std::string::npos);
  models::BertConfig b = models::BertConfig::named("tiny");
  b.max_position_embeddings = 40;
  b.sparse_attention = sparse;
  b.transformer_kernel = kernel;
  CHECK(error_of([&] {
          models::BertForPreTraining m(b, false);
        }).find("BERT: transformer_kernel.attn_dropout_ratio needs dense attention") !=
        std::string::npos);
  // Without the ratio the kernel and the layout go together.
  g.transformer_kernel->attn_dropout_ratio = 0;
  CHECK(error_of([&] { models::GPT2LMHeadModel m(g); }).empty());
}

TEST_CASE("GPT-2 with sparse attention: the kernel's and the KV cache's masked path agree") {
  models::GPT2Config c = models::GPT2Config::named("tiny");
  c.n_positions = 40;
  c.dropout = 0;
  c.sparse_attention = models::SparseAttention{models::sparsity_from_json(kBigBird, "test"), 11};
  manual_seed(3);
  models::GPT2LMHeadModel model(c);
  Generator g(4);
  const Tensor ids =
      (rand({2, 37}, DType::Float64, Device::cpu(), &g) * double(c.vocab_size)).to(DType::Int64);
  const Tensor whole = model.forward(ids);  // block_sparse_attention, T padded 37 -> 48
  models::KVCache cache;
  const Tensor first = model.forward(ids.narrow(1, 0, 30), &cache);  // the layout as a mask
  const Tensor rest = model.forward(ids.narrow(1, 30, 7), &cache);
  const Tensor cached = cat({first, rest}, 1);
  const double err = norm(cached - whole).item() / norm(whole).item();
  CHECK(err < 1e-6);
  // Not the dense model: the layout leaves blocks out.
  models::GPT2Config d = c;
  d.sparse_attention.reset();
  manual_seed(3);
  models::GPT2LMHeadModel dense(d);
  CHECK(norm(dense.forward(ids) - whole).item() / norm(whole).item() > 1e-3);
  // config.json keeps the layout's keys and seed: a reload draws the same layouts.
  const models::GPT2Config back = models::GPT2Config::from_json(c.to_json());
  REQUIRE(back.sparse_attention.has_value());
  CHECK(back.sparse_attention->seed == 11);
  CHECK(models::sparse_attention_layout(back.sparse_attention->sparsity, 4, 40, 1, 11)
            .to_int_vector() ==
        model.transformer.h.at<models::GPT2Block>(1).attn.sparse.layout.to_int_vector());
}

TEST_CASE("BERT with sparse attention: dense mode under a padding mask is the dense model") {
  models::BertConfig c = models::BertConfig::named("tiny");
  c.max_position_embeddings = 40;
  c.hidden_dropout_prob = 0;
  Generator g(5);
  models::Batch b;
  b.input_ids =
      (rand({2, 37}, DType::Float64, Device::cpu(), &g) * double(c.vocab_size)).to(DType::Int64);
  std::vector<double> mask(2 * 37, 1.0);
  for (int t = 30; t < 37; ++t) mask[37 + t] = 0;  // row 1 pads its last 7 tokens
  b.attention_mask = from_vector(mask, {2, 37}).to(DType::Int64);
  manual_seed(3);
  models::BertForPreTraining dense(c, false);
  models::BertConfig s = c;
  s.sparse_attention =
      models::SparseAttention{models::sparsity_from_json({{"mode", "dense"}}, "t"), 0};
  manual_seed(3);
  models::BertForPreTraining sparse(s, false);
  const Tensor want = dense.bert.forward(b), got = sparse.bert.forward(b);
  CHECK(norm(got - want).item() / norm(want).item() < 1e-6);
  // A bigbird layout is another function, and survives config.json.
  s.sparse_attention = models::SparseAttention{models::sparsity_from_json(kBigBird, "t"), 7};
  manual_seed(3);
  models::BertForPreTraining bigbird(s, false);
  CHECK(norm(bigbird.bert.forward(b) - want).item() / norm(want).item() > 1e-4);
  const models::BertConfig back = models::BertConfig::from_json(s.to_json("BertModel"));
  REQUIRE(back.sparse_attention.has_value());
  CHECK(back.sparse_attention->seed == 7);
  CHECK(back.sparse_attention->sparsity.mode == "bigbird");
}

TEST_SUITE_BEGIN("ranks");

TEST_CASE("GPT-2 and BERT with sparse attention (random per-head layouts) in every layout") {
  const test::SharedCorpus corpus("sparse-attention-models");
  const auto& world = corpus.world;
  for (const std::string type : {"gpt2", "bert"}) {
    CAPTURE(type);
    // The dense mode is the dense model (the fused dense attention against the block kernel).
    const auto local = parallel::make_local_group();
    const std::vector<double> none =
        test::train_losses(model_config(corpus, nullptr, type), local, 3);
    const std::vector<double> dense =
        test::train_losses(model_config(corpus, {{"mode", "dense"}}, type), local, 3);
    for (size_t s = 0; s < none.size(); ++s)
      CHECK(dense[s] == doctest::Approx(none[s]).epsilon(1e-6));
    const std::vector<double> one =
        test::train_losses(model_config(corpus, kBigBird, type), local, 3);
    CHECK(one[2] != doctest::Approx(none[2]).epsilon(1e-5));  // the section is acted on
    std::vector<std::pair<std::string, nlohmann::json>> layouts{
        {"data parallel", nlohmann::json::object()}};
    if (world->size() % 2 == 0) {
      layouts.push_back({"tensor parallel 2", {{"tensor_parallel", {{"autotp_size", 2}}}}});
      layouts.push_back({"sequence parallel 2",
                         {{"tensor_parallel", {{"autotp_size", 2}, {"sequence_parallel", true}}}}});
      layouts.push_back({"pipeline 2", {{"pipeline", {{"stages", 2}}}}});
    }
    for (const auto& layout : layouts) {  // (clang 14's lambdas cannot capture bindings)
      CAPTURE(layout.first);
      nlohmann::json c = model_config(corpus, kBigBird, type);
      c.update(layout.second);
      const std::vector<double> run = test::train_losses(c, world, 3);
      REQUIRE(run.size() == one.size());
      for (size_t s = 0; s < one.size(); ++s)
        CHECK(run[s] == doctest::Approx(one[s]).epsilon(1e-6));
    }
  }
}

TEST_SUITE_END();
