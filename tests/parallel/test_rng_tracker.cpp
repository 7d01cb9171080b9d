// DeepSpeed's model_parallel_cuda_manual_seed / RNG tracker semantics, hand-derived: the
// default generator gets `seed`, the "model-parallel-rng" state seed + 2718 + the tensor-
// parallel rank; a fork draws from that state and keeps its advance; an activation checkpoint
// replays the tracker's states in its rerun (gradients equal a plain backward's).
#include <doctest/doctest.h>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/rng_tracker.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

TEST_CASE("RNG tracker: model_parallel_cuda_manual_seed and fork") {
  auto group = parallel::world();
  const uint64_t r = static_cast<uint64_t>(group->rank());
  set_data_parallel_shard(0, 1);
  parallel::model_parallel_cuda_manual_seed(1234, group.get());
  auto& tracker = parallel::get_cuda_rng_tracker();
  CHECK(default_generator().state().seed == 1234);
  CHECK(default_generator().state().offset == 0);
  const auto states = tracker.get_states();
  REQUIRE(states.size() == 1);
  CHECK(states.at("model-parallel-rng").seed == 1234 + 2718 + r);
  Tensor first, second;
  {
    auto fork = tracker.fork();
    first = dropout(ones({64}), 0.5);
  }
  CHECK(default_generator().state().offset == 0);  // the default stream did not move
  CHECK(tracker.get_states().at("model-parallel-rng").offset == 64);
  {
    auto fork = tracker.fork();
    second = dropout(ones({64}), 0.5);
  }
  Generator mine(1234 + 2718 + r);
  CHECK(first.to_vector() == dropout(ones({64}), 0.5, true, &mine).to_vector());
  CHECK(second.to_vector() == dropout(ones({64}), 0.5, true, &mine).to_vector());
  CHECK_THROWS_WITH_AS(tracker.add("model-parallel-rng", 7), doctest::Contains("already exists"),
                       Error);
  CHECK_THROWS_WITH_AS(tracker.add("other", 1234 + 2718 + r),
                       doctest::Contains(("seed " + std::to_string(1234 + 2718 + r)).c_str()),
                       Error);
  CHECK_THROWS_WITH_AS((void)tracker.fork("missing"), doctest::Contains("'missing' is not added"),
                       Error);
  tracker.reset();
}

TEST_CASE("RNG tracker: an activation checkpoint replays the forked dropout in its rerun") {
  auto group = parallel::world();
  set_data_parallel_shard(0, 1);
  manual_seed(3);
  const Tensor w0 = randn({8, 8});
  auto layer = [](const Tensor& x, const Tensor& w) {
    auto fork = parallel::get_cuda_rng_tracker().fork();
    return dropout(tanh(matmul(x, w)), 0.3);
  };
  Tensor grads[2];
  for (int ck = 0; ck < 2; ++ck) {
    parallel::model_parallel_cuda_manual_seed(99, group.get());
    Tensor w = w0.clone().requires_grad_(true);
    const Tensor x = ones({4, 8}).requires_grad_(true);  // (as torch: an input needs one)
    parallel::ActivationCheckpointing checkpointing({}, nullptr);
    const Tensor y =
        ck ? checkpointing.checkpoint([w, layer](const Tensor& in) { return layer(in, w); }, x)
           : layer(x, w);
    sum(y * y).backward();
    grads[ck] = w.grad();
  }
  CHECK(grads[1].to_vector() == grads[0].to_vector());
  parallel::get_cuda_rng_tracker().reset();
}

TEST_SUITE_END();
