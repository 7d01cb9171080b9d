// DeepSpeed's legacy curriculum, progressive layer drop and random-LTD: the schedules against
// DeepSpeed's own classes (tests/fixtures/generate_training_schedule_fixtures.py ->
// deepspeed/training_schedules.json), the layer and token choices against their
// probabilities, kept layers' and tokens' gradients against finite differences, and the
// sections' errors.
#include <doctest/doctest.h>

#include <cmath>

#include "fixture_util.h"
#include "tessera/engine/curriculum_learning.h"
#include "tessera/engine/data_efficiency_config.h"
#include "tessera/engine/progressive_layer_drop_config.h"
#include "tessera/io/train_config.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/testing.h"

using namespace tessera;
using json = nlohmann::json;

namespace {

const std::string kFixture = TESSERA_FIXTURES_DIR "/deepspeed/training_schedules.json";

io::TrainConfig config_with(const json& sections) {
  json c = {{"train_batch_size", 2}};
  for (const auto& [k, v] : sections.items()) c[k] = v;
  return io::TrainConfig::parse(c.dump(), 1, "test.json");
}

json curriculum(json section) {
  section["enabled"] = true;
  return {{"curriculum_learning", section}};
}

void check_parse_error(const json& sections, const std::string& needle) {
  try {
    config_with(sections);
    FAIL("parsed without an error: ", sections.dump());
  } catch (const Error& e) {
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("curriculum_learning gives each step DeepSpeed's difficulty, resumed or not") {
  const json fx = test::read_json(kFixture);
  CHECK(fx["deepspeed"].get<std::string>() == "0.19.6");
  REQUIRE(fx["curriculum"].size() >= 6);
  for (const json& c : fx["curriculum"]) {
    INFO("curriculum ", c["config"].dump());
    const io::TrainConfig cfg = config_with(curriculum(c["config"]));
    const auto& want = c["difficulty"];
    engine::CurriculumScheduler straight(engine::curriculum_learning_config(cfg));
    for (size_t s = 0; s < want.size(); ++s)
      REQUIRE(straight.difficulty_for_step(static_cast<int64_t>(s)) == want[s].get<int64_t>());
    // A resumed run asks for a later step first; a restarted one for an earlier one.
    for (int64_t from : {0, 7, 120, 399}) {
      engine::CurriculumScheduler resumed(engine::curriculum_learning_config(cfg));
      for (int64_t s = from; s < static_cast<int64_t>(want.size()); s += 13)
        CHECK(resumed.difficulty_for_step(s) == want[static_cast<size_t>(s)].get<int64_t>());
      CHECK(resumed.difficulty_for_step(3) == want[3].get<int64_t>());
    }
  }
}

TEST_CASE("progressive_layer_drop gives each step DeepSpeed's theta") {
  const json fx = test::read_json(kFixture);
  REQUIRE(fx["progressive_layer_drop"].size() >= 5);
  for (const json& c : fx["progressive_layer_drop"]) {
    const json section = {
        {"enabled", true}, {"theta", c["params"]["theta"]}, {"gamma", c["params"]["gamma"]}};
    INFO("PLD ", section.dump());
    const io::TrainConfig cfg = config_with({{"progressive_layer_drop", section}});
    const nn::ProgressiveLayerDrop pld(engine::progressive_layer_drop_config(cfg).options, 7);
    const auto& want = c["theta"];
    for (size_t s = 0; s < want.size(); ++s) {
      const double w = want[s].get<double>();
      REQUIRE(std::fabs(pld.theta_at(static_cast<int64_t>(s)) - w) <= 1e-15 * w);
    }
  }
}

TEST_CASE(
    "progressive_layer_drop keeps layer l with the paper's probability, the same on every "
    "rank") {
  nn::ProgressiveLayerDrop pld({.theta = 0.5, .gamma = 0.05}, 11);
  const int64_t layers = 4, steps = 4000;
  const double theta = pld.theta_at(60);
  std::vector<double> kept(layers, 0.0);
  for (int64_t s = 0; s < steps; ++s) {
    pld.begin_forward(60, s);  // (micro-batches of one step: a fresh draw each)
    const auto choices = pld.choices(layers);
    for (int64_t l = 0; l < layers; ++l) {
      const auto& c = choices[static_cast<size_t>(l)];
      const double p = nn::ProgressiveLayerDrop::keep_probability(theta, l, layers);
      CHECK(std::fabs(p - (1 - (l + 1.0) / layers * (1 - theta))) < 1e-15);
      if (c.keep) {
        kept[static_cast<size_t>(l)] += 1;
        CHECK(c.scale == doctest::Approx(1.0 / p).epsilon(1e-15));
      }
    }
  }
  for (int64_t l = 0; l < layers; ++l) {
    const double p = nn::ProgressiveLayerDrop::keep_probability(theta, l, layers);
    const double sigma = std::sqrt(p * (1 - p) / steps);
    CHECK_MESSAGE(std::fabs(kept[static_cast<size_t>(l)] / steps - p) < 4 * sigma, "layer ", l);
  }
  // The choices are a function of (seed, step, micro-batch): another object, the same choices.
  nn::ProgressiveLayerDrop again({.theta = 0.5, .gamma = 0.05}, 11);
  again.begin_forward(60, 17);
  pld.begin_forward(60, 17);
  bool same = true;
  for (size_t l = 0; l < 4; ++l) same = same && again.choices(4)[l].keep == pld.choices(4)[l].keep;
  CHECK(same);
  // Steps 0 and 1 (theta 1) keep every layer unscaled; so does evaluation.
  for (int64_t s : {0, 1}) {
    pld.begin_forward(s, 0);
    for (const auto& k : nn::kept_layers(&pld, true, 6)) CHECK(k.scale == 1.0);
    CHECK(nn::kept_layers(&pld, true, 6).size() == 6);
  }
  pld.begin_forward(5000, 0);
  CHECK(nn::kept_layers(&pld, false, 6).size() == 6);
  CHECK(nn::kept_layers(&pld, true, 6).size() < 6);  // (theta ~0.5: all 6 kept is ~3% likely)
}

TEST_CASE("a kept GPT-2 block's scaled branches have the gradients of finite differences") {
  models::GPT2Config c = models::GPT2Config::named("tiny");
  c.n_layer = 1, c.n_embd = 8, c.n_head = 2, c.dropout = 0.0;
  manual_seed(3);
  nn::Module root;
  models::GPT2Block block(&root, "block", c);
  block.to(DType::Float64);
  Tensor x = randn({2, 3, 8}, DType::Float64).requires_grad_(true);
  for (double scale : {1.0, 1.0 / 0.6}) {
    const auto r = testing::gradcheck(
        [&](const std::vector<Tensor>& in) { return block.forward(in[0], nullptr, 0, scale); },
        {x});
    CHECK_MESSAGE(r.ok, "scale ", scale, ": ", r.message);
  }
  // The scale multiplies both branches: forward(x, s) - x - ... checked at s = 2 by hand.
  NoGradGuard no_grad;
  const Tensor a = block.attn.forward(block.ln_1(x), nullptr, 0);
  const Tensor h = x + a * 2.0;
  const Tensor want = h + block.mlp->forward(block.ln_2(h)) * 2.0;
  TS_CHECK_CLOSE(block.forward(x, nullptr, 0, 2.0), want);
}

TEST_CASE("curriculum_learning and progressive_layer_drop errors name the key") {
  const json linear = {
      {"curriculum_type", "seqlen"},
      {"min_difficulty", 8},
      {"max_difficulty", 32},
      {"schedule_type", "fixed_linear"},
      {"schedule_config", {{"total_curriculum_step", 10}, {"difficulty_step", 8}}}};
  CHECK_NOTHROW(config_with(curriculum(linear)));
  auto with = [&](const char* key, json value) {
    json s = linear;
    s[key] = std::move(value);
    return curriculum(s);
  };
  check_parse_error(with("curriculum_type", "vocabularyrarity"),
                    "'curriculum_learning.curriculum_type' is \"vocabularyrarity\"");
  check_parse_error(with("schedule_type", "fixed_cubic"), "'curriculum_learning.schedule_type'");
  check_parse_error(with("max_difficulty", 4), "'curriculum_learning.max_difficulty' is 4");
  check_parse_error(with("min_difficulty", 0), "'curriculum_learning.min_difficulty' is 0");
  json missing = linear;
  missing.erase("max_difficulty");
  check_parse_error(curriculum(missing), "'curriculum_learning.max_difficulty' is required");
  check_parse_error(with("schedule_config", {{"total_curriculum_step", 10}}),
                    "'curriculum_learning.schedule_config.difficulty_step' is required");
  check_parse_error(
      with("schedule_config", {{"total_curriculum_step", 10}, {"difficulty_step", 16}}),
      "rounds down to a multiple of it, 0");
  check_parse_error(with("schedule_type", "fixed_root"),
                    "'curriculum_learning.schedule_config.root_degree' is required");
  json discrete = linear;
  discrete["schedule_type"] = "fixed_discrete";
  discrete["schedule_config"] = {{"difficulty", {8, 16}}, {"max_step", {5, 9}}};
  check_parse_error(curriculum(discrete), "expected one difficulty more than max steps");
  discrete["schedule_config"] = {{"difficulty", {8, "16"}}, {"max_step", {5}}};
  check_parse_error(curriculum(discrete), "'curriculum_learning.schedule_config.difficulty' is");
  json piped = curriculum(linear);
  piped["pipeline"] = {{"stages", 2}};
  piped["train_batch_size"] = 2;
  try {
    io::TrainConfig::parse(piped.dump(), 2, "test.json");
    FAIL("a pipeline with a curriculum parsed");
  } catch (const Error& e) {
    CHECK_MESSAGE(std::string(e.what()).find(
                      "'curriculum_learning' needs a model without pipeline") != std::string::npos,
                  std::string(e.what()));
  }
  // custom: the engine's function, or an error at its first use.
  json custom = linear;
  custom["schedule_type"] = "custom";
  engine::CurriculumScheduler scheduler(
      engine::curriculum_learning_config(config_with(curriculum(custom))));
  CHECK_THROWS_WITH_AS(scheduler.difficulty_for_step(0),
                       doctest::Contains("Engine::set_custom_curriculum_schedule"), Error);
  scheduler.set_custom_schedule([](int64_t t) { return 4 * t; });
  CHECK(scheduler.difficulty_for_step(2) == 12);

  check_parse_error({{"progressive_layer_drop", {{"enabled", true}, {"theta", 1.5}}}},
                    "'progressive_layer_drop.theta' is 1.5, expected in [0, 1]");
  check_parse_error({{"progressive_layer_drop", {{"enabled", true}, {"gamma", -1}}}},
                    "'progressive_layer_drop.gamma' is -1");
  check_parse_error({{"progressive_layer_drop", {{"enabled", "yes"}}}},
                    "'progressive_layer_drop.enabled' must be true or false");
}

namespace {

json random_ltd(const json& schedule, json over = json::object()) {
  json r = {{"enabled", true},
            {"total_layer_num", 4},
            {"random_ltd_layer_num", 2},
            {"random_ltd_layer_id", {1, 2}},
            {"model_mask_name", "attention_mask"},
            {"model_type", "decoder"},
            {"hidden_state_order", "batch_seq_dim"},
            {"random_ltd_schedule",
             {{"min_value", schedule["min_value"]},
              {"max_value", schedule["max_value"]},
              {"schedule_type", "fixed_linear"},
              {"schedule_config",
               {{"require_steps", schedule["require_steps"]},
                {"seq_per_step", schedule["seq_per_step"]}}}}}};
  for (const auto& [k, v] : over.items()) r[k] = v;
  return {{"model", {{"n_layer", 4}}},
          {"data_efficiency",
           {{"enabled", true}, {"data_routing", {{"enabled", true}, {"random_ltd", r}}}}}};
}

}  // namespace

TEST_CASE("random_ltd keeps DeepSpeed's token count at every step, resumed or not") {
  const json fx = test::read_json(kFixture);
  REQUIRE(fx["random_ltd"].size() >= 4);
  for (const json& c : fx["random_ltd"]) {
    INFO("random_ltd ", c["params"].dump());
    const io::TrainConfig cfg = config_with(random_ltd(c["params"]));
    const engine::DataEfficiencyConfig& d = engine::data_efficiency_config(cfg);
    REQUIRE(d.random_ltd);
    nn::RandomLayerTokenDrop straight(d.random_ltd_options, 1234);
    const auto& want = c["reserved_length"];
    for (size_t s = 0; s < want.size(); ++s)
      REQUIRE(straight.reserved_length_for_step(static_cast<int64_t>(s)) == want[s].get<int64_t>());
    nn::RandomLayerTokenDrop resumed(d.random_ltd_options, 1234);
    for (int64_t s : {250, 3, 0, 399})
      CHECK(resumed.reserved_length_for_step(s) == want[static_cast<size_t>(s)].get<int64_t>());
  }
}

TEST_CASE("random_ltd draws each sample's tokens uniformly, in order, the same on every rank") {
  nn::RandomLayerTokenDrop drop({.layer_ids = {2, 0}, .min_value = 5, .max_value = 5}, 99);
  CHECK(drop.drops_tokens_of(0));
  CHECK(!drop.drops_tokens_of(1));
  drop.begin_forward(3, 1);
  CHECK(drop.reserved_length() == 5);
  CHECK(!drop.subset(1, 4, 16, Device::cpu()));  // not a random-LTD layer
  CHECK(!drop.subset(2, 4, 5, Device::cpu()));   // every token kept: the layer runs whole
  const int64_t B = 4, T = 16, k = 5;
  std::vector<double> seen(T, 0.0);
  const int64_t draws = 3000;
  for (int64_t m = 0; m < draws; ++m) {
    drop.begin_forward(7, m);
    const auto s = drop.subset(2, B, T, Device::cpu());
    REQUIRE(s);
    REQUIRE(s->positions.size() == static_cast<size_t>(B * k));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t p = s->positions[static_cast<size_t>(b * k + j)];
        if (j > 0) REQUIRE(p > s->positions[static_cast<size_t>(b * k + j - 1)]);
        seen[static_cast<size_t>(p)] += 1;
      }
  }
  const double p = static_cast<double>(k) / T, n = static_cast<double>(draws * B);
  for (int64_t t = 0; t < T; ++t)
    CHECK_MESSAGE(std::fabs(seen[static_cast<size_t>(t)] / n - p) < 4 * std::sqrt(p * (1 - p) / n),
                  "position ", t);
  // Rank 1 of 2 holding rows 2-3 of the global micro-batch draws what one process draws there.
  drop.begin_forward(7, 0);
  const auto whole = drop.subset(2, B, T, Device::cpu());
  set_data_parallel_shard(1, 2);
  const auto half = drop.subset(2, B / 2, T, Device::cpu());
  set_data_parallel_shard(0, 1);
  REQUIRE(whole);
  REQUIRE(half);
  CHECK(std::vector<int64_t>(whole->positions.begin() + 2 * k, whole->positions.end()) ==
        half->positions);
}

TEST_CASE(
    "random_ltd's gather and scatter move the kept tokens, with finite-difference "
    "gradients") {
  nn::RandomLayerTokenDrop drop({.layer_ids = {0}, .min_value = 3, .max_value = 3}, 5);
  drop.begin_forward(2, 0);
  const int64_t B = 2, T = 6, C = 4;
  const auto s = drop.subset(0, B, T, Device::cpu());
  REQUIRE(s);
  manual_seed(4);
  Tensor x = randn({B, T, C}, DType::Float64).requires_grad_(true);
  Tensor w = randn({C, C}, DType::Float64).requires_grad_(true);
  {
    NoGradGuard no_grad;
    const Tensor g = s->gather(x);
    const Tensor y = g * 10.0;
    const Tensor out = s->scatter(x, y);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<bool> is_kept(T, false);
      for (int64_t j = 0; j < 3; ++j) {
        const int64_t p = s->positions[static_cast<size_t>(b * 3 + j)];
        is_kept[static_cast<size_t>(p)] = true;
        TS_CHECK_CLOSE(g.select(0, b).select(0, j), x.select(0, b).select(0, p));
      }
      for (int64_t t = 0; t < T; ++t)
        TS_CHECK_CLOSE(
            out.select(0, b).select(0, t),
            x.select(0, b).select(0, t) * (is_kept[static_cast<size_t>(t)] ? 10.0 : 1.0));
    }
  }
  // A layer on the kept tokens, its output scattered back: gradients to x and the weight.
  const auto r = testing::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return s->scatter(in[0], tanh(matmul(s->gather(in[0]), in[1])));
      },
      {x, w});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("a GPT-2 block on random_ltd's tokens attends causally among them; the rest bypass it") {
  models::GPT2Config c = models::GPT2Config::named("tiny");
  c.n_embd = 8, c.n_head = 2, c.dropout = 0.0;
  manual_seed(3);
  nn::Module root;
  models::GPT2Block block(&root, "block", c);
  nn::RandomLayerTokenDrop drop({.layer_ids = {0}, .min_value = 4, .max_value = 4}, 8);
  drop.begin_forward(1, 0);
  const Tensor x = randn({2, 7, 8});
  const auto s = drop.subset(0, 2, 7, Device::cpu());
  REQUIRE(s);
  NoGradGuard no_grad;
  const Tensor out = s->scatter(x, block.forward(s->gather(x)));
  for (int64_t b = 0; b < 2; ++b) {
    // The kept tokens by hand, as one shorter sequence through the block.
    std::vector<Tensor> rows;
    for (int64_t j = 0; j < 4; ++j)
      rows.push_back(
          x.select(0, b).select(0, s->positions[static_cast<size_t>(b * 4 + j)]).unsqueeze(0));
    const Tensor want = block.forward(cat(rows, 0).unsqueeze(0)).select(0, 0);
    size_t j = 0;
    for (int64_t t = 0; t < 7; ++t) {
      const bool kept = j < 4 && s->positions[static_cast<size_t>(b * 4 + j)] == t;
      const Tensor got = out.select(0, b).select(0, t);
      if (kept)
        TS_CHECK_CLOSE(got, want.select(0, static_cast<int64_t>(j++)));
      else
        CHECK(testing::compare(got, x.select(0, b).select(0, t), {0, 0}).ok);  // bit for bit
    }
  }
}

TEST_CASE("data_efficiency errors name the key") {
  const json schedule = {
      {"min_value", 8}, {"max_value", 32}, {"require_steps", 10}, {"seq_per_step", 8}};
  CHECK_NOTHROW(config_with(random_ltd(schedule)));
  check_parse_error(random_ltd(schedule, {{"random_ltd_layer_num", 3}}),
                    "'data_efficiency.data_routing.random_ltd.random_ltd_layer_num' is 3");
  check_parse_error(random_ltd(schedule, {{"random_ltd_layer_id", {1, 9}}}), "names layer 9");
  check_parse_error(random_ltd(schedule, {{"random_ltd_layer_id", {1, 1}}}), "names layer 1 twice");
  check_parse_error(random_ltd(schedule, {{"model_type", "seq2seq"}}),
                    "random_ltd.model_type' is \"seq2seq\"");
  check_parse_error(random_ltd(schedule, {{"hidden_state_order", "seq_batch_dim"}}),
                    "random_ltd.hidden_state_order' is \"seq_batch_dim\"");
  check_parse_error(random_ltd(schedule, {{"total_layer_num", 6}}),
                    "total_layer_num' is 6, but the model has 4 layers");
  check_parse_error(random_ltd(schedule, {{"layer_token_lr_schedule", {{"enabled", true}}}}),
                    "layer_token_lr_schedule.enabled' is true");
  json bad = schedule;
  bad["seq_per_step"] = 16;
  check_parse_error(random_ltd(bad), "rounded down to a multiple of it, is 0 tokens");
  check_parse_error(
      {{"data_efficiency", {{"data_sampling", {{"dynamic_batching", {{"enabled", true}}}}}}}},
      "'data_efficiency.data_sampling.dynamic_batching.enabled' is true: DeepSpeed's dynamic");
  check_parse_error(
      {{"data_efficiency", {{"data_sampling", {{"curriculum_learning", {{"enabled", true}}}}}}}},
      "'data_efficiency.data_sampling.curriculum_learning.curriculum_metrics' is required");
  json bert = random_ltd(schedule);
  bert["model"]["type"] = "bert";
  check_parse_error(bert, "model.type bert is an encoder");
}
