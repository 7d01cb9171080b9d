// The single-trial harness against hand-derived schedules (periods, hooks, StepModes),
// against PyTorch (ReduceLROnPlateau), and against itself uninterrupted (a stop and resume
// must continue bit for bit; aggregation_frequency 2 of batch 4 must train as batch 8).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "regression_trial.h"
#include "tessera/error.h"
#include "tessera/io/event_file_reader.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/safetensors.h"

using namespace tessera;
using regression::Log;
using regression::RegressionTrial;
namespace fs = std::filesystem;

namespace {

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("tessera-trial-" + name);
  fs::remove_all(d);
  return d.string();
}

trial::TrialResult run(const std::string& yaml, Log& log, const nlohmann::json& hparams = nullptr) {
  RegressionTrial::log = &log;
  const auto r = regression::run_yaml(yaml, parallel::make_local_group(), hparams);
  RegressionTrial::log = nullptr;
  return r;
}

std::vector<nlohmann::json> metric_lines(const std::string& storage, const std::string& type) {
  std::ifstream in(fs::path(storage) / "regression" / "trial_1" / "metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

std::map<std::string, Tensor> final_weights(const trial::TrialResult& r) {
  return io::load_safetensors((fs::path(r.checkpoint) / "model0.safetensors").string());
}

}  // namespace

TEST_CASE("trial harness: validations and checkpoints at the periods, reports at every boundary") {
  // 10 batches; validation every 4, checkpoint every 3, reports every 5 (scheduling_unit):
  // the loop stops at 3 4 5 6 8 9 10; validations at 4 8 and the end (10); checkpoints at
  // 3 6 9 and the end (policy none: never because of a validation).
  const std::string dir = fresh_dir("periods");
  Log log;
  const auto r = run(regression::config_yaml(dir, 10,
                                             "min_validation_period: {batches: 4}\n"
                                             "min_checkpoint_period: {batches: 3}\n"
                                             "scheduling_unit: 5\ncheckpoint_policy: none\n"),
                     log);
  CHECK(r.state == "COMPLETED");
  CHECK(r.batches == 10);
  CHECK(log.validations == std::vector<int64_t>{4, 8, 10});
  CHECK(log.checkpoints == std::vector<int64_t>{3, 6, 9, 10});
  std::vector<int64_t> reports;
  for (const auto& l : metric_lines(dir, "training")) reports.push_back(l["batches"]);
  CHECK(reports == std::vector<int64_t>{3, 4, 5, 6, 8, 9, 10});
  // Each report's loss is the mean of its batches' losses (one slot: Determined's avg).
  const auto lines = metric_lines(dir, "training");
  REQUIRE(lines.size() == 7);
  CHECK(lines[1]["batch_metrics"].size() == 1);
  CHECK(lines[0]["metrics"]["loss"].get<double>() ==
        doctest::Approx((log.train_losses[0] + log.train_losses[1] + log.train_losses[2]) / 3)
            .epsilon(1e-12));
  // save_trial_latest 1 and save_trial_best 1 (defaults): at most two checkpoints remain.
  const auto index = io::JsonFields::parse_file(dir + "/regression/trial_1/checkpoints.json");
  CHECK(index["checkpoints"].size() <= 2);
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(dir + "/regression/trial_1/checkpoints"))
    dirs += e.is_directory();
  CHECK(dirs == static_cast<int>(index["checkpoints"].size()));
  CHECK(fs::path(r.checkpoint).filename() == index["latest"].get<std::string>());
  // TensorBoard: each batch's loss at its batch index, Determined's tags.
  std::string events;
  for (const auto& e : fs::directory_iterator(dir + "/regression/trial_1/tensorboard"))
    if (e.is_regular_file()) events = e.path().string();
  REQUIRE(!events.empty());
  const auto series = io::read_event_scalars(events);
  REQUIRE(series.count("Determined/loss"));
  std::vector<int64_t> steps;
  for (const auto& [step, value] : series.at("Determined/loss")) steps.push_back(step);
  CHECK(steps == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(series.at("Determined/loss")[4].second == doctest::Approx(log.train_losses[4]));
  std::vector<int64_t> val_steps;
  for (const auto& [step, value] : series.at("Determined/validation_loss"))
    val_steps.push_back(step);
  CHECK(val_steps == std::vector<int64_t>{4, 8, 10});
}

TEST_CASE("trial harness: checkpoint_policy best checkpoints after each best validation") {
  const std::string dir = fresh_dir("best");
  Log log;
  run(regression::config_yaml(dir, 24, "min_validation_period: {batches: 4}\n"), log);
  const auto vals = metric_lines(dir, "validation");
  REQUIRE(vals.size() == 6);
  std::vector<int64_t> expected;  // the batches whose validation loss beat every earlier one
  double best = 1e300;
  for (const auto& v : vals)
    if (double m = v["metrics"]["validation_loss"]; m < best)
      best = m, expected.push_back(v["batches"]);
  if (expected.back() != 24) expected.push_back(24);  // the end is always checkpointed
  CHECK(log.checkpoints == expected);
  const auto index = io::JsonFields::parse_file(dir + "/regression/trial_1/checkpoints.json");
  bool has_best = false;
  for (const auto& c : index["checkpoints"]) has_best |= c["searcher_metric"] == best;
  CHECK(has_best);
}

TEST_CASE("trial harness: callbacks in Determined's order") {
  // 64 points of batch 8: 8 batches per epoch. 9 batches, validation every 8, one report
  // per 100 batches: the loop stops at 8 (validation) and 9 (the end).
  const std::string dir = fresh_dir("hooks");
  Log log;
  run(regression::config_yaml(dir, 9, "min_validation_period: {batches: 8}\n"), log);
  std::vector<std::string> expected = {
      "startup 0 fresh",        "training_start",
      "epoch_start 0",          "epoch_end 0",
      "workload_end 8",         "validation_start",
      "validation_epoch_start", "validation_epoch_end 3",
      "validation_end",         "checkpoint_save_start",
      "checkpoint_write_end",   "checkpoint_upload_end",  // first: best
      "epoch_start 1",          "workload_end 1",
      "validation_start",       "validation_epoch_start",
      "validation_epoch_end 3", "validation_end",
      "checkpoint_save_start",  "checkpoint_write_end",
      "checkpoint_upload_end",  "shutdown"};
  CHECK(log.hooks == expected);
  // The callback's entry added in on_checkpoint_save_start is in the checkpoint.
  const auto index = io::JsonFields::parse_file(dir + "/regression/trial_1/checkpoints.json");
  const auto state = io::JsonFields::parse_file(dir + "/regression/trial_1/checkpoints/" +
                                                index["latest"].get<std::string>() + "/state.json");
  CHECK(state["recorder_note"] == "saved");
  CHECK(state["callbacks"]["recorder"]["validations_seen"] == 0);
}

TEST_CASE("trial harness: a stop request checkpoints; the rerun continues bit for bit") {
  for (int64_t aggregation : {1, 2}) {
    CAPTURE(aggregation);
    const std::string extra =
        "min_validation_period: {batches: 6}\n"
        "min_checkpoint_period: {batches: 10}\n"
        "optimizations: {aggregation_frequency: " +
        std::to_string(aggregation) + "}\n";
    const std::string straight_dir = fresh_dir("straight"), stop_dir = fresh_dir("stopped");
    Log straight;
    const auto a = run(regression::config_yaml(straight_dir, 20, extra), straight);

    Log first;
    first.stop_at = 7;
    const auto b = run(regression::config_yaml(stop_dir, 20, extra), first);
    CHECK(b.state == "STOPPED");
    // A stop waits for the end of the aggregation window (accumulated gradients are not saved).
    CHECK(b.batches == (aggregation == 1 ? 7 : 8));
    Log second;
    const auto c = run(regression::config_yaml(stop_dir, 20, extra), second);
    CHECK(c.state == "COMPLETED");
    CHECK(second.hooks.front() == "startup " + std::to_string(b.batches) + " resumed");
    CHECK(second.hooks[1] == "checkpoint_load_start " + std::to_string(b.batches));

    std::vector<double> both = first.train_losses;
    both.insert(both.end(), second.train_losses.begin(), second.train_losses.end());
    CHECK(both == straight.train_losses);  // every batch's loss, exactly
    CHECK(c.validation_metrics == a.validation_metrics);
    CHECK(metric_lines(stop_dir, "validation") == metric_lines(straight_dir, "validation"));
    const auto wa = final_weights(a), wc = final_weights(c);
    for (const auto& [name, t] : wa) CHECK(amax(abs(t - wc.at(name))).item() == 0.0);

    Log again;  // a completed trial run again does nothing more
    const auto d = run(regression::config_yaml(stop_dir, 20, extra), again);
    CHECK(d.state == "COMPLETED");
    CHECK(again.train_losses.empty());
    CHECK(d.validation_metrics == a.validation_metrics);
  }
}

TEST_CASE("trial harness: aggregation_frequency 2 of batch 4 trains as batch 8") {
  const std::string d1 = fresh_dir("agg1"), d2 = fresh_dir("agg2");
  Log l1, l2;
  const auto a = run(regression::config_yaml(d1, 10, ""), l1);
  std::string yaml = regression::config_yaml(d2, 20, "optimizations: {aggregation_frequency: 2}\n");
  yaml.replace(yaml.find("global_batch_size: 8"), 20, "global_batch_size: 4");
  const auto b = run(yaml, l2);
  const auto wa = final_weights(a), wb = final_weights(b);
  for (const auto& entry : wa) {  // (clang 14: no structured binding in CAPTURE's lambda)
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    CAPTURE(name);
    const double scale = amax(abs(t)).item();
    CHECK(amax(abs(t - wb.at(name))).item() <= 1e-6 * scale);
  }
}

namespace {

// Determined's ReduceLROnPlateau example: the scheduler steps on every validation's loss.
struct PlateauCallback : trial::PyTorchCallback {
  void on_validation_end(const nlohmann::json& metrics) override {
    scheduler->step(metrics["validation_loss"].get<double>());
    lrs.push_back(scheduler->get_last_lr()[0]);
  }
  std::shared_ptr<trial::ReduceLROnPlateau> scheduler;
  std::vector<double> lrs;
};

// A plateau scheduler that never sees an improvement after the first validation (an absolute
// threshold of 1e9): every later validation halves the lr.
std::shared_ptr<PlateauCallback> add_plateau(Log& log) {
  auto cb = std::make_shared<PlateauCallback>();
  log.extra_callbacks["plateau"] = cb;
  log.on_construct = [cb](trial::TrialContext& c) {
    trial::ReduceLROnPlateau::Options o;
    o.factor = 0.5;
    o.patience = 0;
    o.threshold = 1e9;
    o.threshold_mode = "abs";
    cb->scheduler =
        c.wrap_lr_scheduler(std::make_shared<trial::ReduceLROnPlateau>(*c.optimizers()[0], o),
                            trial::StepMode::MANUAL_STEP);
  };
  return cb;
}

}  // namespace

TEST_CASE("trial harness: ReduceLROnPlateau stepped by a callback on each validation, resumed") {
  const std::string extra = "min_validation_period: {batches: 4}\n";
  Log straight;
  auto a = add_plateau(straight);
  run(regression::config_yaml(fresh_dir("plateau"), 12, extra), straight);
  CHECK(a->lrs == std::vector<double>{0.05, 0.025, 0.0125});  // validations at 4, 8, 12
  // Stopped at 6 and resumed: the scheduler's state (best, lr) comes back from the checkpoint.
  const std::string dir = fresh_dir("plateau-stop");
  Log first;
  first.stop_at = 6;
  auto b = add_plateau(first);
  run(regression::config_yaml(dir, 12, extra), first);
  Log second;
  auto c = add_plateau(second);
  run(regression::config_yaml(dir, 12, extra), second);
  CHECK(b->lrs == std::vector<double>{0.05});
  CHECK(c->lrs == std::vector<double>{0.025, 0.0125});
  std::vector<double> both = first.train_losses;
  both.insert(both.end(), second.train_losses.begin(), second.train_losses.end());
  CHECK(both == straight.train_losses);
}

namespace {

// Records the batch index at each step.
struct CountingScheduler : trial::LRScheduler {
  explicit CountingScheduler(trial::TrialContext& c) : context(c) {}
  void step() override { steps.push_back(context.current_train_batch()); }
  std::vector<double> get_last_lr() const override { return {}; }
  nlohmann::json state_dict() const override { return nlohmann::json::object(); }
  void load_state_dict(const nlohmann::json&) override {}
  trial::TrialContext& context;
  std::vector<int64_t> steps;
};

std::vector<int64_t> scheduler_steps(trial::StepMode mode, int64_t frequency, int64_t aggregation) {
  Log log;
  std::shared_ptr<CountingScheduler> s;
  log.on_construct = [&](trial::TrialContext& c) {
    s = c.wrap_lr_scheduler(std::make_shared<CountingScheduler>(c), mode, frequency);
  };
  run(regression::config_yaml(
          fresh_dir("sched"), 20,
          "optimizations: {aggregation_frequency: " + std::to_string(aggregation) + "}\n"),
      log);
  return s->steps;
}

}  // namespace

TEST_CASE("trial harness: StepModes step the scheduler as Determined does") {
  using trial::StepMode;
  using V = std::vector<int64_t>;
  // 20 batches, 8 per epoch. Batch i's scheduler steps happen after its train_batch.
  V every;
  for (int64_t i = 0; i < 20; ++i) every.push_back(i);
  CHECK(scheduler_steps(StepMode::STEP_EVERY_BATCH, 1, 1) == every);
  CHECK(scheduler_steps(StepMode::STEP_EVERY_BATCH, 3, 1) == V{2, 5, 8, 11, 14, 17});
  // aggregation 2: no step without an optimizer step; the skipped batch is caught up.
  CHECK(scheduler_steps(StepMode::STEP_EVERY_BATCH, 1, 2) ==
        V{1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15, 17, 17, 19, 19});
  CHECK(scheduler_steps(StepMode::STEP_EVERY_OPTIMIZER_STEP, 1, 2) ==
        V{1, 3, 5, 7, 9, 11, 13, 15, 17, 19});
  CHECK(scheduler_steps(StepMode::STEP_EVERY_OPTIMIZER_STEP, 2, 1) ==
        V{1, 3, 5, 7, 9, 11, 13, 15, 17, 19});
  CHECK(scheduler_steps(StepMode::STEP_EVERY_EPOCH, 1, 1) == V{7, 15});
  CHECK(scheduler_steps(StepMode::STEP_EVERY_EPOCH, 2, 1) == V{15});
  CHECK(scheduler_steps(StepMode::STEP_EVERY_EPOCH, 1, 2) == V{7, 15});
  CHECK(scheduler_steps(StepMode::MANUAL_STEP, 1, 1).empty());
}

TEST_CASE("trial context: hyperparameters, batch sizes, position, files") {
  const std::string dir = fresh_dir("context");
  Log log;
  bool constructed = false;
  log.on_construct = [&](trial::TrialContext& c) {
    constructed = true;
    CHECK(c.get_hparam("lr").get<double>() == 0.05);
    CHECK_THROWS_WITH_AS(c.get_hparam("momentum"), doctest::Contains("global_batch_size, lr"),
                         Error);
    CHECK(c.get_hparams().size() == 2);
    CHECK(c.get_global_batch_size() == 8);
    CHECK(c.get_per_slot_batch_size() == 8);
    CHECK(c.get_trial_id() == 1);
    CHECK(c.get_trial_seed() == 1);
    CHECK(c.get_initial_batch() == 0);
    CHECK(c.get_data_config()["url"] == "file://x");
    CHECK(c.get_experiment_config().name == "regression");
    CHECK(c.distributed.size == 1);
    CHECK(c.distributed.is_chief());
    CHECK_THROWS_WITH_AS(c.current_train_batch(), doctest::Contains("has not started"), Error);
    CHECK(c.get_tensorboard_path() == dir + "/regression/trial_1/tensorboard");
    CHECK(!c.get_stop_requested());
  };
  std::vector<std::string> seen;
  log.on_batch = [&](trial::TrialContext& c) {
    seen.push_back(std::to_string(c.current_train_batch()) + ":" +
                   std::to_string(c.current_train_epoch()) + (c.is_epoch_start() ? "s" : "") +
                   (c.is_epoch_end() ? "e" : ""));
  };
  run(regression::config_yaml(dir, 10, "data:\n  url: file://x\n"), log);
  CHECK(constructed);
  CHECK(seen == std::vector<std::string>{"0:0s", "1:0", "2:0", "3:0", "4:0", "5:0", "6:0", "7:0e",
                                         "8:1s", "9:1"});
  CHECK(fs::exists(dir + "/regression/trial_1/tensorboard"));
}

TEST_CASE("trial: errors name the thing") {
  const std::string dir = fresh_dir("errors");
  Log log;
  std::string yaml = regression::config_yaml(dir, 4, "");
  yaml.replace(yaml.find("metric: validation_loss"), 23, "metric: accuracy");
  CHECK_THROWS_WITH_AS(run(yaml, log),
                       doctest::Contains("searcher.metric 'accuracy' is not a scalar among the "
                                         "validation metrics the trial returned "
                                         "(validation_loss"),
                       Error);
  const auto cfg = trial::ExperimentConfig::parse(
      "hyperparameters: {lr: {type: double, minval: 0.1, maxval: 1}}\n"
      "searcher: {name: single, metric: m, max_length: {batches: 1}}\n",
      "exp.yaml");
  CHECK_THROWS_WITH_AS(trial::trial_hparams(cfg, nullptr),
                       doctest::Contains("hyperparameter 'lr' is searched over"), Error);
  CHECK(trial::trial_hparams(cfg, {{"lr", 0.5}}).at("lr") == 0.5);
  CHECK_THROWS_WITH_AS(trial::trial_hparams(cfg, {{"lr", 0.5}, {"lrr", 1}}),
                       doctest::Contains("no hyperparameter 'lrr'"), Error);
  std::string odd = regression::config_yaml(dir, 4, "");
  odd.replace(odd.find("global_batch_size: 8"), 20, "global_batch_size: 0");
  CHECK_THROWS_WITH_AS(run(odd, log), doctest::Contains("global_batch_size' must be a positive"),
                       Error);
}

TEST_CASE("ReduceLROnPlateau reproduces torch's learning rates") {
  const auto fixture = io::JsonFields::parse_file(TESSERA_FIXTURES_DIR "/trial/plateau.json");
  const auto metrics = fixture["metrics"].get<std::vector<double>>();
  for (const auto& c : fixture["cases"]) {
    CAPTURE(c["options"].dump());
    Tensor a = zeros({1}), b = zeros({1});
    optim::SGD opt({{{"a"}, {a}, 0.1, 0.0}, {{"b"}, {b}, 0.02, 0.0}});
    trial::ReduceLROnPlateau::Options o;
    const auto& j = c["options"];
    o.mode = j.value("mode", o.mode);
    o.factor = j.value("factor", o.factor);
    o.patience = j.value("patience", o.patience);
    o.threshold = j.value("threshold", o.threshold);
    o.threshold_mode = j.value("threshold_mode", o.threshold_mode);
    o.cooldown = j.value("cooldown", o.cooldown);
    o.min_lr = j.value("min_lr", o.min_lr);
    o.eps = j.value("eps", o.eps);
    trial::ReduceLROnPlateau s(opt, o);
    for (size_t i = 0; i < metrics.size(); ++i) {
      s.step(metrics[i]);
      const auto want = c["lrs"][i].get<std::vector<double>>();
      CHECK(s.get_last_lr()[0] == doctest::Approx(want[0]).epsilon(1e-12));
      CHECK(s.get_last_lr()[1] == doctest::Approx(want[1]).epsilon(1e-12));
    }
    // The state round-trips into a fresh scheduler, which then steps identically.
    Tensor a2 = zeros({1}), b2 = zeros({1});
    optim::SGD opt2({{{"a"}, {a2}, 0.1, 0.0}, {{"b"}, {b2}, 0.02, 0.0}});
    trial::ReduceLROnPlateau s2(opt2, o);
    s2.load_state_dict(s.state_dict());
    s.step(2.0);
    s2.step(2.0);
    CHECK(s.get_last_lr() == s2.get_last_lr());
  }
  Tensor p = zeros({1});
  optim::SGD opt({{{"p"}, {p}, 0.1, 0.0}});
  trial::ReduceLROnPlateau s(opt);
  CHECK_THROWS_WITH_AS(s.step(), doctest::Contains("needs the metric"), Error);
}
