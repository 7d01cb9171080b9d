// A trial on N slots (this suite runs alone and under mpirun -np 2 and 4) reproduces the
// same trial on one slot (weights and validation loss within 1e-6, dropout included), and a
// stop requested on one slot stops every slot at the same batch with a checkpoint from which
// the rerun continues bit for bit.
#include <doctest/doctest.h>

#include <filesystem>

#include "regression_trial.h"
#include "tessera/io/safetensors.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using regression::Log;
using regression::RegressionTrial;
namespace fs = std::filesystem;

namespace {

// A directory every rank agrees on (rank 0's temp dir + a name), emptied by rank 0.
std::string shared_dir(parallel::ProcessGroup& world, const std::string& name) {
  const std::string d = (fs::temp_directory_path() /
                         ("tessera-trial-slots-" + std::to_string(world.size()) + "-" + name))
                            .string();
  if (world.rank() == 0) fs::remove_all(d);
  world.barrier();
  return d;
}

trial::TrialResult run(const std::string& yaml, std::shared_ptr<parallel::ProcessGroup> group,
                       Log& log) {
  RegressionTrial::log = &log;
  auto r = regression::run_yaml(yaml, std::move(group));
  RegressionTrial::log = nullptr;
  return r;
}

std::string slots_yaml(const std::string& dir, int64_t slots, const std::string& extra = "") {
  return regression::config_yaml(dir, 16,
                                 "min_validation_period: {batches: 5}\n"
                                 "min_checkpoint_period: {batches: 8}\n"
                                 "resources: {slots_per_trial: " +
                                     std::to_string(slots) + "}\n" + extra);
}

}  // namespace

TEST_CASE("trial on N slots reproduces one slot (dropout included)") {
  auto world = parallel::world();
  const std::string dir = shared_dir(*world, "n");
  Log n_log;
  const auto n = run(slots_yaml(dir, world->size()), world, n_log);
  // Each rank also trains the one-slot trial in a directory of its own.
  const std::string one_dir = dir + "-one-rank" + std::to_string(world->rank());
  fs::remove_all(one_dir);
  Log one_log;
  const auto one = run(slots_yaml(one_dir, 1), parallel::make_local_group(), one_log);
  REQUIRE(n.state == "COMPLETED");
  const double a = n.validation_metrics["validation_loss"],
               b = one.validation_metrics["validation_loss"];
  CHECK(std::abs(a - b) <= 1e-6 * std::abs(b));
  const auto wn = io::load_safetensors((fs::path(n.checkpoint) / "model0.safetensors").string());
  const auto w1 = io::load_safetensors((fs::path(one.checkpoint) / "model0.safetensors").string());
  for (const auto& entry : w1) {  // (clang 14: no structured binding in CAPTURE's lambda)
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    CAPTURE(name);
    CHECK(amax(abs(t - wn.at(name))).item() <= 1e-6 * amax(abs(t)).item());
  }
  world->barrier();
  fs::remove_all(one_dir);
}

TEST_CASE("trial on N slots: a stop on one slot stops all; the rerun continues bit for bit") {
  auto world = parallel::world();
  const std::string straight_dir = shared_dir(*world, "straight"), dir = shared_dir(*world, "stop");
  Log straight;
  const auto a = run(slots_yaml(straight_dir, world->size()), world, straight);
  Log first;
  if (world->rank() == world->size() - 1) first.stop_at = 6;  // only the last slot asks
  const auto b = run(slots_yaml(dir, world->size()), world, first);
  CHECK(b.state == "STOPPED");
  CHECK(b.batches == 6);
  Log second;
  const auto c = run(slots_yaml(dir, world->size()), world, second);
  CHECK(c.state == "COMPLETED");
  std::vector<double> both = first.train_losses;
  both.insert(both.end(), second.train_losses.begin(), second.train_losses.end());
  CHECK(both == straight.train_losses);
  CHECK(c.validation_metrics == a.validation_metrics);
}

TEST_SUITE_END();
