// Determined's experiment YAML: every key the single trial reads, the defaults, lengths in
// batches, and each wrong value's message naming the file, line and key.
#include <doctest/doctest.h>

#include <limits>

#include "tessera/error.h"
#include "tessera/trial/experiment_config.h"

using namespace tessera;
using trial::ExperimentConfig;
using trial::Hyperparameter;
using trial::Length;

namespace {
const char* kFull = R"(name: mnist-mlp
description: a small test
entrypoint: builtin:gpt2
hyperparameters:
  global_batch_size: 32
  config: configs/quickstart.json
  optimizer.params.lr: 0.001
  model:
    dropout: 0.1
  lr:
    type: log
    minval: -4
    maxval: -1
    base: 10
  layers:
    type: int
    minval: 2
    maxval: 8
    count: 4
  width:
    type: double
    minval: 0.5
    maxval: 1.5
  act:
    type: categorical
    vals: [relu, gelu]
  fixed:
    type: const
    val: [1, 2]
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    epochs: 3
records_per_epoch: 1000
min_validation_period:
  batches: 50
min_checkpoint_period:
  records: 6400
scheduling_unit: 10
perform_initial_validation: true
checkpoint_policy: all
checkpoint_storage:
  type: shared_fs
  host_path: /tmp/ckpts
  storage_path: runs
  save_experiment_best: 1
  save_trial_best: 2
  save_trial_latest: 3
resources:
  slots_per_trial: 2
max_restarts: 0
optimizations:
  aggregation_frequency: 4
)";

std::string with(const std::string& line) {
  return std::string(
             "searcher:\n  name: single\n  metric: loss\n  max_length:\n    batches: 10\n") +
         line;
}
}  // namespace

TEST_CASE("experiment config: every key of Determined's schema a single trial reads") {
  const ExperimentConfig c = ExperimentConfig::parse(kFull, "exp.yaml");
  CHECK(c.warnings.empty());
  CHECK(c.name == "mnist-mlp");
  CHECK(c.entrypoint == "builtin:gpt2");
  CHECK(c.constant("global_batch_size") == 32);
  CHECK(c.constant("config") == "configs/quickstart.json");
  CHECK(c.constant("optimizer.params.lr") == 0.001);
  CHECK(c.constant("model.dropout") == 0.1);  // a nested group, flattened
  const Hyperparameter& lr = c.hyperparameters.at("lr");
  CHECK(lr.type == Hyperparameter::Log);
  CHECK(lr.minval == -4);
  CHECK(lr.maxval == -1);
  CHECK(lr.base == 10);
  CHECK(c.hyperparameters.at("layers").type == Hyperparameter::Int);
  CHECK(c.hyperparameters.at("layers").count == 4);
  CHECK(c.hyperparameters.at("width").maxval == 1.5);
  CHECK(c.hyperparameters.at("act").vals == std::vector<nlohmann::json>{"relu", "gelu"});
  CHECK(c.constant("fixed") == nlohmann::json::array({1, 2}));
  CHECK_THROWS_WITH_AS(c.constant("lr"), doctest::Contains("'lr' is searched over"), Error);
  CHECK(c.searcher.metric == "validation_loss");
  CHECK(c.searcher.max_length.unit == Length::Epochs);
  CHECK(c.batches(c.searcher.max_length, 32) == 94);  // 3000 records in batches of 32
  CHECK(c.batches(*c.min_validation_period, 32) == 50);
  CHECK(c.batches(*c.min_checkpoint_period, 32) == 200);
  CHECK(c.scheduling_unit == 10);
  CHECK(c.perform_initial_validation);
  CHECK(c.checkpoint_policy == "all");
  CHECK(c.checkpoint_storage.host_path == "/tmp/ckpts");
  CHECK(c.checkpoint_storage.save_trial_latest == 3);
  CHECK(c.slots_per_trial == 2);
  CHECK(c.max_restarts == 0);
  CHECK(c.aggregation_frequency == 4);
}

TEST_CASE("experiment config: Determined's defaults, and unknown keys warn") {
  const ExperimentConfig c = ExperimentConfig::parse(with("colour: blue\n"), "exp.yaml");
  CHECK(c.searcher.smaller_is_better);
  CHECK(c.scheduling_unit == 100);
  CHECK(!c.perform_initial_validation);
  CHECK(c.checkpoint_policy == "best");
  CHECK(c.checkpoint_storage.save_trial_best == 1);
  CHECK(c.checkpoint_storage.save_trial_latest == 1);
  CHECK(c.checkpoint_storage.save_experiment_best == 0);
  CHECK(c.slots_per_trial == 1);
  CHECK(c.max_restarts == 5);
  CHECK(c.aggregation_frequency == 1);
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0] == "exp.yaml:6: unknown key 'colour' (ignored)");
}

TEST_CASE("experiment config: wrong values are errors naming file, line and key") {
  struct Bad {
    std::string yaml, message;
  };
  const std::vector<Bad> cases{
      {"name: [\n", "exp.yaml:2: not valid YAML"},
      {"max_restarts: 2\n", "'searcher' is required"},
      {"searcher:\n  metric: loss\n", "'searcher.max_length' is required"},
      {"searcher:\n  max_length: {batches: 3}\n", "'searcher.metric' is required"},
      {"searcher:\n  metric: loss\n  max_length: 10\n",
       "exp.yaml:3: 'searcher.max_length' must be a map with one of batches, records, epochs"},
      {"searcher:\n  metric: loss\n  max_length: {steps: 3}\n", "has unit 'steps'"},
      {"searcher:\n  metric: loss\n  max_length: {batches: -3}\n",
       "'searcher.max_length.batches' must be > 0"},
      {"searcher:\n  metric: loss\n  max_length: {epochs: 3}\n", "needs 'records_per_epoch'"},
      {"searcher:\n  name: bayesian\n  metric: loss\n  max_length: {batches: 3}\n",
       "'searcher.name' is 'bayesian'; expected single, random, grid, adaptive_asha, "
       "async_halving, tpe or autotune"},
      {"searcher:\n  name: tpe\n  metric: l\n  max_length: {batches: 3}\n  max_trials: 4\n"
       "  gamma: 0\n",
       "'searcher.gamma' is 0, expected in (0, 1]"},
      {"searcher:\n  name: random\n  metric: loss\n  max_length: {batches: 3}\n",
       "'searcher.max_trials' is required by the random searcher"},
      {"searcher:\n  name: async_halving\n  metric: l\n  max_length: {batches: 3}\n"
       "  max_trials: 4\n",
       "'searcher.num_rungs' is required by the async_halving searcher"},
      {"searcher:\n  name: adaptive_asha\n  metric: l\n  max_length: {batches: 3}\n"
       "  max_trials: 4\n  mode: fast\n",
       "'searcher.mode' is 'fast'; expected aggressive, standard or conservative"},
      {"searcher:\n  name: adaptive_asha\n  metric: l\n  max_length: {batches: 3}\n"
       "  max_trials: 4\n  divisor: 1\n",
       "'searcher.divisor' is 1, expected > 1"},
      {"searcher:\n  name: random\n  metric: l\n  max_length: {batches: 3}\n"
       "  max_trials: 0\n",
       "'searcher.max_trials' is 0, expected >= 1"},
      {with("max_restarts: many\n"), "exp.yaml:6: 'max_restarts' must be an integer, found 'many'"},
      {with("checkpoint_policy: sometimes\n"), "'checkpoint_policy' is 'sometimes'"},
      {with("perform_initial_validation: maybe\n"),
       "'perform_initial_validation' must be true or false"},
      {with("resources:\n  slots_per_trial: 0\n"), "'resources.slots_per_trial' must be >= 1"},
      {with("resources:\n  max_slots: -1\n"), "'resources.max_slots' must be >= 1 (or 0"},
      {with("resources:\n  slots_per_trial: 4\n  max_slots: 2\n"),
       "'resources.max_slots' (2) is fewer than slots_per_trial (4): no trial could start"},
      {with("checkpoint_storage:\n  type: s3\n"), "only shared_fs"},
      {with("checkpoint_storage:\n  type: shared_fs\n"),
       "'checkpoint_storage.host_path' is required"},
      {with("hyperparameters:\n  lr:\n    type: log\n    minval: -1\n    maxval: -4\n"),
       "'hyperparameters.lr': minval -1 must be less than maxval -4"},
      {with("hyperparameters:\n  n:\n    type: int\n    minval: 1.5\n    maxval: 4\n"),
       "'hyperparameters.n.minval' must be an integer"},
      {with("hyperparameters:\n  a:\n    type: categorical\n    vals: []\n"),
       "needs a non-empty list 'vals'"},
      {with("hyperparameters:\n  a:\n    type: uniform\n"),
       "'hyperparameters.a.type' is 'uniform'"},
      {with("hyperparameters:\n  a:\n    type: const\n"), "(const) needs 'val'"},
      {with("min_validation_period:\n  batches: 0\n"),
       "'min_validation_period.batches' must be > 0"},
      {with("hyperparameters:\n  ? [x, y]\n  : 1\n"), "exp.yaml:7: unexpected value"},
      {with("? {a: 1}\n: 2\n"), "unexpected value"},
      {with("deep: " + std::string(100, '[') + std::string(100, ']') + "\n"),
       "exp.yaml:6: collections nested more than 64 deep"},
      {"", "'the file' must be a map"},
  };
  for (const Bad& b : cases) {
    CAPTURE(b.yaml);
    CHECK_THROWS_WITH_AS(ExperimentConfig::parse(b.yaml, "exp.yaml"),
                         doctest::Contains(b.message.c_str()), Error);
  }
  CHECK_THROWS_WITH_AS(ExperimentConfig::from_file("/nonexistent/exp.yaml"),
                       doctest::Contains("/nonexistent/exp.yaml"), Error);
}

TEST_CASE("experiment config: hostile YAML is an error, never a crash or unbounded work") {
  std::string bomb = with("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  bomb += "data: *a9\n";  // 9^10 values once expanded
  std::string block;      // `- - - ... x`: nesting without a bracket
  for (int i = 0; i < 300; ++i) block += "- ";
  const struct {
    std::string yaml, message;
  } cases[] = {
      {with("data: &a [*a]\n"), "nested more than 64 deep (a self-referencing alias"},
      {with("hyperparameters: &h {me: *h}\n"), "nested more than 64 deep"},
      {with("hyperparameters:\n  x: &v {type: categorical, vals: [*v]}\n"), "nested more"},
      {bomb, "expands to more than 100000 values (aliases of aliases?)"},
      {with("data:\n  " + block + "x\n"), "indented or nested more than 256 columns deep"},
      {with("name: caf\xe9\n"), "exp.yaml: not UTF-8 text (an invalid byte sequence at offset 79)"},
      {with("hyperparameters:\n  n: {type: int, minval: -9223372036854775808, maxval: 3}\n"),
       "'hyperparameters.n.minval' is -9223372036854775808; an int hyperparameter lies within "
       "+-2^53"},
      {with("checkpoint_storage: {host_path: /tmp, storage_path: ../up}\n"),
       "'checkpoint_storage.storage_path' ('../up') must be a relative path inside host_path"},
      {with("checkpoint_storage: {host_path: /tmp, storage_path: /etc}\n"), "without '..'"},
      {"searcher: {name: grid, metric: l, max_length: {batches: 3}, max_grid_points: 0}\n",
       "'searcher.max_grid_points' is 0, expected >= 1"},
      {"searcher: {metric: l, max_length: {epochs: 4}}\nrecords_per_epoch: 4611686018427387904\n",
       "a length of 4 epochs times records_per_epoch 4611686018427387904 overflows"},
  };
  for (const auto& b : cases) {
    CAPTURE(b.yaml.substr(0, 200));
    CHECK_THROWS_WITH_AS(ExperimentConfig::parse(b.yaml, "exp.yaml"),
                         doctest::Contains(b.message.c_str()), Error);
  }
  CHECK_THROWS_WITH_AS(ExperimentConfig::parse(std::string(5 << 20, ' '), "big.yaml"),
                       doctest::Contains("big.yaml: 5242880 bytes; an experiment file is at most"),
                       Error);
  // A shared (not self-referencing) alias is fine: each use expands once.
  const ExperimentConfig ok =
      ExperimentConfig::parse(with("x: &x {a: 1}\ndata: {p: *x, q: *x}\n"), "exp.yaml");
  CHECK(ok.data == nlohmann::json{{"p", {{"a", 1}}}, {"q", {{"a", 1}}}});
}

TEST_CASE("experiment config: lengths in records never overflow (no false 'less than a batch')") {
  const int64_t max = std::numeric_limits<int64_t>::max();
  const ExperimentConfig c = ExperimentConfig::parse(
      "searcher: {metric: l, max_length: {records: 9223372036854775807}}\n", "exp.yaml");
  CHECK(c.searcher.max_length.value == max);
  // ceil((2^63 - 1) / 4): the old (value + batch - 1) / batch wrapped to a negative count.
  CHECK(c.batches(c.searcher.max_length, 4) == max / 4 + 1);
  CHECK(c.batches(c.searcher.max_length, 1) == max);
  CHECK(c.batches(Length{.unit = Length::Records, .value = 9}, 4) == 3);
}

TEST_CASE("experiment config: the YAML's sha256 identifies what produced a trial's checkpoints") {
  const ExperimentConfig a = ExperimentConfig::parse(with(""), "a.yaml");
  const ExperimentConfig b = ExperimentConfig::parse(with("name: other\n"), "a.yaml");
  CHECK(a.sha256.size() == 64);
  CHECK(a.sha256 != b.sha256);
  CHECK(ExperimentConfig::parse(with(""), "x").sha256 == a.sha256);  // the text's, not the path's
}
