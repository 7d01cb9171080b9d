// PipelineModule's activation_checkpoint_interval: a stage's checkpoints (which runs of layers,
// counted by the ActivationCheckpointing profile) follow DeepSpeed's rule (k positions from the
// stage's first, checkpointed when one holds parameters) or, with checkpointable_layers, runs of
// up to k listed layers; either way the loss and every gradient equal the plain forward's bit
// for bit, dropout included (the rerun replays its masks).
#include <doctest/doctest.h>

#include "pipe_test_layers.h"

#include "tessera/ops.h"
#include "tessera/parallel/pipeline_module.h"
#include "tessera/rng.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using parallel::LayerSpec;
using parallel::PipeLayer;
using parallel::PipeValue;
using pipe_test::Dense;
using pipe_test::mse;

namespace {

class Noise : public PipeLayer {  // no parameters; draws from the default generator
 public:
  using PipeLayer::PipeLayer;
  PipeValue forward(const PipeValue& x) override { return {dropout(x.at(0), 0.5, is_training())}; }
  std::string type_name() const override { return "Noise"; }
};

std::vector<LayerSpec> layers() {
  return {LayerSpec::of<Noise>("Noise"),       LayerSpec::of<Dense>("Dense", 4, 8),
          LayerSpec::of<Dense>("Dense", 8, 8), LayerSpec::of<Noise>("Noise"),
          LayerSpec::of<Dense>("Dense", 8, 8), LayerSpec::unary<nn::Linear>("Linear", 8, 4)};
}

struct Run {
  double loss = 0;
  std::map<std::string, Tensor> grads;
};

// One forward and backward of a one-stage module built from seed 5, dropout drawn from seed 7.
Run run(parallel::PipelineModuleOptions options) {
  manual_seed(5);
  parallel::PipelineModule m(layers(), mse, 0, std::move(options));
  manual_seed(11);
  const Tensor x = randn({3, 4}), y = randn({3, 4});
  manual_seed(7);
  const Tensor loss = m.loss(m.forward({x}), {y});
  loss.backward();
  Run r{loss.item(), {}};
  for (auto& [name, t] : m.named_parameters()) r.grads[name] = t->grad().clone();
  return r;
}

void check_equal(const Run& a, const Run& b) {
  CHECK(a.loss == b.loss);
  REQUIRE(a.grads.size() == b.grads.size());
  for (const auto& entry : a.grads) {
    const std::string& name = entry.first;  // (clang 14: INFO's lambda takes no bindings)
    INFO(name);
    CHECK(amax(abs(entry.second - b.grads.at(name))).item() == 0.0);
  }
}

std::shared_ptr<parallel::ActivationCheckpointing> profiled() {
  parallel::ActivationCheckpointingOptions o;
  o.profile = true;
  return std::make_shared<parallel::ActivationCheckpointing>(o);
}

}  // namespace

TEST_CASE("pipeline checkpoints: DeepSpeed's runs of k positions, those with parameters") {
  const Run plain = run({});
  for (const auto& [interval, checkpoints] : {std::pair<int64_t, size_t>{1, 4}, {2, 3}, {4, 2}}) {
    const int64_t k = interval;  // (clang 14: INFO's lambda takes no bindings)
    INFO("interval ", k);
    auto ckpt = profiled();
    // k 1: each Dense and the Linear; k 2: [Noise Dense] [Dense Noise] [Dense Linear];
    // k 4: [Noise Dense Dense Noise] [Dense Linear].
    check_equal(run({.activation_checkpoint_interval = k, .checkpointing = ckpt}), plain);
    REQUIRE(ckpt->profile().size() == static_cast<size_t>(checkpoints));
    for (const auto& p : ckpt->profile()) CHECK((p.forwards == 1 && p.recomputes == 1));
  }
  // Without an ActivationCheckpointing: autograd's checkpoint, the same values.
  check_equal(run({.activation_checkpoint_interval = 2}), plain);
}

TEST_CASE("pipeline checkpoints: checkpointable_layers groups runs of listed layers") {
  const Run plain = run({});
  auto ckpt = profiled();
  // Noise alone, [Dense Dense], Noise alone, [Dense], Linear alone: two checkpoints.
  check_equal(run({.activation_checkpoint_interval = 3,
                   .checkpointable_layers = {"Dense"},
                   .checkpointing = ckpt}),
              plain);
  CHECK(ckpt->profile().size() == 2);
}

TEST_CASE("pipeline checkpoints: what a stage cannot honour is an error") {
  parallel::ActivationCheckpointingOptions o;
  o.contiguous_memory_optimization = true;
  o.number_checkpoints = 2;
  CHECK_THROWS_WITH(run({.activation_checkpoint_interval = 1,
                         .checkpointing = std::make_shared<parallel::ActivationCheckpointing>(o)}),
                    doctest::Contains("contiguous_memory_optimization"));
  CHECK_THROWS_WITH(run({.activation_checkpoint_interval = -1}),
                    doctest::Contains("activation_checkpoint_interval must be >= 0"));
}

TEST_SUITE_END();
