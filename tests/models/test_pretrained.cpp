// GPT-2 and BERT against PyTorch implementations of HF's architectures
// (tests/fixtures/generate_model_fixtures.py): loss, logits and every parameter's gradient.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture_util.h"
#include "tessera/grad_mode.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/bert.h"
#include "tessera/models/generate.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/testing.h"

using namespace tessera;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModels = TESSERA_FIXTURES_DIR "/models/";

using test::read_json;
const auto ids = test::int_matrix;

models::Batch batch_of(const json& j) {
  models::Batch b;
  b.input_ids = ids(j["input_ids"]);
  b.targets = ids(j["targets"]);
  if (j.contains("attention_mask")) b.attention_mask = ids(j["attention_mask"]);
  if (j.contains("token_type_ids")) b.token_type_ids = ids(j["token_type_ids"]);
  if (j.contains("next_sentence_label"))
    b.next_sentence_label = from_vector(j["next_sentence_label"].get<std::vector<int64_t>>(), {2});
  return b;
}

void check_against_pytorch(const std::string& name) {
  const std::string dir = kModels + name;
  std::map<std::string, std::string> file_key;
  auto model = models::load_pretrained(dir, &file_key);
  const json expected = read_json(dir + "/expected.json");
  const models::Batch b = batch_of(read_json(dir + "/batch.json"));

  const Tensor loss = model->loss(b);
  const double want = expected["loss"];
  INFO(name, " loss ", loss.item(), " vs PyTorch ", want);
  CHECK(std::fabs(loss.item() - want) <= 1e-5 * std::fabs(want));

  const std::vector<double> logits = model->logits(b).to_vector(), ref = expected["logits"];
  REQUIRE(logits.size() == ref.size());
  size_t bad = 0;  // float32 agreement: |diff| <= 1e-5 + 1e-4 |ref|
  for (size_t i = 0; i < ref.size(); ++i)
    bad += std::fabs(logits[i] - ref[i]) > 1e-5 + 1e-4 * std::fabs(ref[i]);
  CHECK(bad == 0);

  loss.backward();
  int checked = 0;
  for (auto& [ours, t] : model->named_parameters()) {
    const std::string key = file_key.at(ours);
    const double ref_norm = expected["grad_norms"].at(key);
    const double got = norm(t->grad()).item();
    INFO(name, " gradient of ", key, ": ", got, " vs PyTorch ", ref_norm);
    CHECK(std::fabs(got - ref_norm) <= 1e-4 * ref_norm + 1e-6);
    ++checked;
  }
  CHECK(checked == static_cast<int>(expected["grad_norms"].size()));

  // A few gradients element by element (an embedding, a projection, a norm weight, a bias).
  REQUIRE(expected["grads"].size() == 4);
  for (auto& [ours, t] : model->named_parameters()) {
    const std::string key = file_key.at(ours);
    if (!expected["grads"].contains(key)) continue;
    const json& g = expected["grads"][key];
    Tensor want = from_vector(g["data"].get<std::vector<double>>(), g["shape"].get<Shape>());
    if (want.shape() != t->shape()) want = want.t();  // GPT-2's Conv1D stores [in, out]
    const double scale = amax(abs(want)).item();
    const auto r = testing::compare(t->grad().to(DType::Float64), want,
                                    testing::Tolerance{1e-3, 1e-5 * scale + 1e-9});
    INFO(name, " gradient of ", key, " element by element");
    CHECK_MESSAGE(r.ok, r.message);
    --checked;
  }
  CHECK(checked == static_cast<int>(expected["grad_norms"].size()) - 4);
}

}  // namespace

TEST_CASE("GPT-2 matches PyTorch: loss, logits, every gradient") {
  check_against_pytorch("gpt2-tiny");
}

TEST_CASE("BERT for pretraining matches PyTorch: MLM + NSP loss, logits, every gradient") {
  check_against_pytorch("bert-tiny");
}

TEST_CASE("save_pretrained writes HF layout that loads back identically") {
  auto model = models::load_pretrained(kModels + "gpt2-tiny");
  const fs::path out = fs::temp_directory_path() / ("tessera-save-" + std::to_string(::getpid()));
  models::save_pretrained(*model, out.string());
  const io::SafetensorsFile saved((out / "model.safetensors").string());
  const io::SafetensorsFile original(kModels + "gpt2-tiny/model.safetensors");
  // Same tensors as the original file (Conv1D weights back in [in, out]), with the prefix.
  CHECK(saved.get("transformer.h.0.attn.c_attn.weight").to_vector() ==
        original.get("h.0.attn.c_attn.weight").to_vector());
  CHECK(saved.entry("transformer.h.1.mlp.c_fc.weight").shape == Shape{32, 128});
  auto again = models::load_pretrained(out.string());
  const Tensor x = from_vector(std::vector<int64_t>{1, 5, 9, 2}, {1, 4});
  CHECK(again->logits({x}).to_vector() == model->logits({x}).to_vector());
}

TEST_CASE("loading reports missing and mismatched weights by key") {
  const fs::path dir = fs::temp_directory_path() / ("tessera-bad-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(kModels + "gpt2-tiny/config.json", dir / "config.json",
                fs::copy_options::overwrite_existing);
  auto tensors = io::load_safetensors(kModels + "gpt2-tiny/model.safetensors");
  tensors.erase("h.1.ln_2.bias");
  io::save_safetensors((dir / "model.safetensors").string(), tensors);
  CHECK_THROWS_WITH_AS(models::load_pretrained(dir.string()),
                       doctest::Contains("missing (1): transformer.h.1.ln_2.bias"), Error);
  tensors["h.1.ln_2.bias"] = zeros({7});
  io::save_safetensors((dir / "model.safetensors").string(), tensors);
  CHECK_THROWS_WITH_AS(models::load_pretrained(dir.string()),
                       doctest::Contains("'h.1.ln_2.bias' has shape [7]"), Error);
  fs::remove(dir / "config.json");
  CHECK_THROWS_WITH_AS(models::load_pretrained(dir.string()),
                       doctest::Contains("has no config.json"), Error);
}

TEST_CASE("KV-cache generation equals recomputing the full sequence") {
  auto loaded = models::load_pretrained(kModels + "gpt2-tiny");
  auto& gpt = dynamic_cast<models::GPT2LMHeadModel&>(*loaded);
  for (double temperature : {0.0, 0.8}) {
    models::GenerateOptions o;
    o.max_new_tokens = 20;
    o.temperature = temperature;
    o.top_k = 10;
    o.seed = 3;
    const auto cached = models::generate(gpt, {4, 8, 15}, o);
    o.use_cache = false;
    const auto full = models::generate(gpt, {4, 8, 15}, o);
    CHECK(cached == full);
    CHECK(cached.size() == 20);
  }
  // The logits themselves: one cached step against the last row of a full forward.
  NoGradGuard g;
  models::KVCache cache;
  gpt.forward(from_vector(std::vector<int64_t>{4, 8, 15}, {1, 3}), &cache);
  const Tensor step = gpt.forward(from_vector(std::vector<int64_t>{16}, {1, 1}), &cache);
  const Tensor full = gpt.forward(from_vector(std::vector<int64_t>{4, 8, 15, 16}, {1, 4}));
  const auto a = step.select(1, 0).to_vector(), b = full.select(1, 3).to_vector();
  for (size_t i = 0; i < a.size(); ++i) CHECK(std::fabs(a[i] - b[i]) < 1e-5);
}

TEST_CASE("generation reaches a causal language model through PretrainedModel alone") {
  auto loaded = models::load_pretrained(kModels + "gpt2-tiny");
  CHECK(loaded->context_length() == 32);
  models::GenerateOptions o;
  o.max_new_tokens = 40;  // past the context: stops at 32 positions
  o.temperature = 0.0;
  const auto ids = models::generate(*loaded, {4, 8, 15}, o);
  CHECK(ids.size() == 29);
  // The GPT-2 class's own forward, greedy, gives the same first ids.
  auto& gpt = dynamic_cast<models::GPT2LMHeadModel&>(*loaded);
  NoGradGuard g;
  std::vector<int64_t> seq{4, 8, 15};
  for (size_t i = 0; i < 5; ++i) {
    const Tensor lg = gpt.forward(from_vector(seq, {1, static_cast<int64_t>(seq.size())}));
    const auto row = lg.select(0, 0).select(0, -1).to_vector();
    const int64_t next = std::max_element(row.begin(), row.end()) - row.begin();
    CHECK(ids[i] == next);
    seq.push_back(next);
  }
  auto bert = models::load_pretrained(kModels + "bert-tiny");
  CHECK(bert->context_length() == 0);
  CHECK_THROWS_WITH_AS(models::generate(*bert, {1, 2}, o),
                       doctest::Contains("BertForPreTraining does not generate text"), Error);
  models::KVCache cache;
  CHECK_THROWS_WITH_AS(bert->forward_cached(from_vector(std::vector<int64_t>{1}, {1, 1}), cache),
                       doctest::Contains("has no key/value cache"), Error);
}

TEST_CASE("a batch of prompts of different lengths gives each prompt its ids alone") {
  auto gpt = models::load_pretrained(kModels + "gpt2-tiny");
  const std::vector<std::vector<int64_t>> prompts{{4, 8, 15}, {1, 2, 3, 4, 5, 6, 7}, {9}};
  for (double temperature : {0.0, 0.8}) {
    CAPTURE(temperature);
    models::GenerateOptions o;
    o.max_new_tokens = 12;
    o.temperature = temperature;
    o.top_k = 10;
    o.seed = 3;
    std::vector<std::pair<size_t, int64_t>> seen;
    const auto batch = models::generate_batch(
        *gpt, prompts, o, [&](size_t r, int64_t id) { seen.emplace_back(r, id); });
    REQUIRE(batch.size() == prompts.size());
    CHECK(seen.size() == 3 * 12);
    for (size_t r = 0; r < prompts.size(); ++r) {
      CAPTURE(r);
      CHECK(batch[r] == models::generate(*gpt, prompts[r], o));  // its own draws and positions
    }
    o.use_cache = false;  // the padded batch recomputed whole at every step: the same ids
    CHECK(models::generate_batch(*gpt, prompts, o) == batch);
  }
  // The context (32 positions) bounds every row by the longest prompt: 32 - 7 new tokens.
  models::GenerateOptions greedy;
  greedy.max_new_tokens = 40;
  greedy.temperature = 0.0;
  const auto bounded = models::generate_batch(*gpt, prompts, greedy);
  for (const auto& ids : bounded) CHECK(ids.size() == 25);
  const std::vector<int64_t> alone = models::generate(*gpt, prompts[0], greedy);  // 29 new
  REQUIRE(alone.size() == 29);
  CHECK(bounded[0] == std::vector<int64_t>(alone.begin(), alone.begin() + 25));
  CHECK_THROWS_WITH_AS(models::generate_batch(*gpt, {{1, 2}, {}}, greedy),
                       doctest::Contains("prompt 1 is empty"), Error);
  CHECK_THROWS_WITH_AS(models::generate_batch(*gpt, {{1, 2}, {1, 99999}}, greedy),
                       doctest::Contains("prompt 1: id 99999 is outside the vocabulary"), Error);
}

TEST_CASE("a bias-free GPT-2 exports as HF's architecture with zero biases") {
  models::GPT2Config c = models::GPT2Config::named("tiny");
  CHECK(models::GPT2LMHeadModel(c).hf_export_model() == nullptr);  // already HF's form
  c.bias = false;
  models::GPT2LMHeadModel bias_free(c);
  const auto hf_form = bias_free.hf_export_model();
  REQUIRE(hf_form);
  const auto& full = dynamic_cast<const models::GPT2LMHeadModel&>(*hf_form);
  CHECK(full.config.bias);
  CHECK(full.config.n_embd == c.n_embd);
  int64_t biases = 0;
  for (auto& [name, t] : hf_form->named_parameters()) {
    for (double v : t->to_vector()) REQUIRE(v == 0.0);  // zero, for the weights to load over
    biases += name.ends_with(".bias");
  }
  CHECK(biases == 6 * c.n_layer + 1);  // ln_1, ln_2 and 4 linears per block, and ln_f
}

TEST_CASE("named sizes have the published parameter counts") {
  // GPT-2 124M: 124,439,808 parameters with the tied head (HF's count).
  const auto c = models::GPT2Config::named("gpt2");
  const int64_t C = c.n_embd, L = c.n_layer;
  const int64_t expected = c.vocab_size * C + c.n_positions * C + L * (12 * C * C + 13 * C) + 2 * C;
  CHECK(expected == 124439808);
  models::GPT2LMHeadModel tiny(models::GPT2Config::named("tiny"));
  CHECK(tiny.num_parameters() == 96 * 32 + 32 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32);
  CHECK_THROWS_WITH_AS(models::GPT2Config::named("gpt5"), doctest::Contains("unknown GPT-2 size"),
                       Error);
  models::BertForPreTraining bert(models::BertConfig::named("tiny"), true);
  CHECK(bert.type_name() == "BertForPreTraining");
}
