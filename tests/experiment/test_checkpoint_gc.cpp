// Determined's checkpoint GC rules on hand-made trials: what each policy keeps.
#include <doctest/doctest.h>

#include <algorithm>

#include "tessera/experiment/checkpoint_gc.h"

using namespace tessera;
using namespace tessera::experiment;

namespace {

CheckpointRecord ckpt(const std::string& uuid, int64_t batches, std::optional<double> loss) {
  CheckpointRecord c;
  c.uuid = uuid;
  c.batches = batches;
  if (loss) c.metrics = {{"validation_loss", *loss}};
  return c;
}

trial::ExperimentConfig policy(int64_t experiment_best, int64_t trial_best, int64_t latest) {
  trial::ExperimentConfig c;
  c.searcher.metric = "validation_loss";
  c.checkpoint_storage.save_experiment_best = experiment_best;
  c.checkpoint_storage.save_trial_best = trial_best;
  c.checkpoint_storage.save_trial_latest = latest;
  return c;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Trial A (ended): a1 at 10 (loss 3.0), a2 at 20 (2.0), a3 at 30 (2.5), a4 at 40 (none).
// Trial B (ended): b1 at 10 (1.5), b2 at 20 (1.8). Trial C (running): c1 at 10 (1.0).
std::vector<TrialCheckpoints> trials() {
  return {
      {true, {ckpt("a1", 10, 3.0), ckpt("a2", 20, 2.0), ckpt("a3", 30, 2.5), ckpt("a4", 40, {})}},
      {true, {ckpt("b1", 10, 1.5), ckpt("b2", 20, 1.8)}},
      {false, {ckpt("c1", 10, 1.0)}}};
}

}  // namespace

TEST_CASE("checkpoint GC: Determined's defaults keep each trial's best and latest") {
  // A: best a2, latest a4; B: best b1, latest b2. C runs: untouched.
  CHECK(sorted(checkpoints_to_delete(trials(), policy(0, 1, 1))) ==
        std::vector<std::string>{"a1", "a3"});
}

TEST_CASE("checkpoint GC: only the experiment's best") {
  // The best of all is c1 (running, kept anyway): every ended trial's checkpoint goes.
  CHECK(sorted(checkpoints_to_delete(trials(), policy(1, 0, 0))) ==
        std::vector<std::string>{"a1", "a2", "a3", "a4", "b1", "b2"});
  // The two best of all: c1 and b1.
  CHECK(sorted(checkpoints_to_delete(trials(), policy(2, 0, 0))) ==
        std::vector<std::string>{"a1", "a2", "a3", "a4", "b2"});
}

TEST_CASE("checkpoint GC: counts larger than a trial has keep everything") {
  CHECK(checkpoints_to_delete(trials(), policy(0, 5, 0)) == std::vector<std::string>{"a4"});
  CHECK(checkpoints_to_delete(trials(), policy(0, 0, 9)).empty());
}

TEST_CASE("checkpoint GC: larger is better") {
  trial::ExperimentConfig c = policy(0, 1, 0);
  c.searcher.smaller_is_better = false;
  // A's best is a1 (3.0), B's b2 (1.8).
  CHECK(sorted(checkpoints_to_delete(trials(), c)) ==
        std::vector<std::string>{"a2", "a3", "a4", "b1"});
}
