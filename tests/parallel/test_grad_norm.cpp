// The one gradient norm of every layout (parallel::global_grad_norm): squares summed in
// double over the groups that hold disjoint parts, the root rounded to float32 as one process
// rounds it. Expected values are the float64 sums written out by hand for each rank count.
#include <doctest/doctest.h>

#include <cmath>

#include "tessera/optim/optimizer.h"
#include "tessera/parallel/grad_norm.h"
#include "tessera/parallel/process_group.h"
#include "tessera/tessera.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

namespace ts = tessera;
using ts::parallel::global_grad_norm;

namespace {

double rounded_root(double squares) {
  return static_cast<float>(std::sqrt(squares));
}

}  // namespace

TEST_CASE("global_grad_norm: partitions, shards and stages summed once each; replicas once") {
  auto world = ts::parallel::world();
  const int w = world->size(), r = world->rank();
  const ts::parallel::GradSquares mine{.tensor_parallel = 0.5 * (r + 1), .replicated = 2.0};
  const double shards = 0.25 * w * (w + 1);  // sum over ranks of 0.5 (r + 1)
  // One process (no group): its own squares.
  CHECK(global_grad_norm(mine, {}) == rounded_root(0.5 * (r + 1) + 2.0));
  // Tensor parallel: the shards summed, the replicated squares counted once.
  CHECK(global_grad_norm(mine, {.tensor = world.get()}) == rounded_root(shards + 2.0));
  // ZeRO's partitions: both kinds summed over the partitions.
  CHECK(global_grad_norm(mine, {.partition = world.get()}) == rounded_root(shards + 2.0 * w));
  // Pipeline stages: each stage's total summed.
  CHECK(global_grad_norm(mine, {.pipe = world.get()}) == rounded_root(shards + 2.0 * w));
  // Float64 gradients keep the root unrounded (optim::norm_from_squares).
  CHECK(global_grad_norm({.replicated = 2.0}, {}, true) == std::sqrt(2.0));
}

TEST_CASE("global_grad_norm on one process equals optim::grad_norm bit for bit") {
  ts::manual_seed(3);
  std::vector<ts::Tensor> params{ts::randn({7, 5}).requires_grad_(),
                                 ts::randn({9}).requires_grad_()};
  ts::sum(ts::mul(params[0], params[0])).backward();
  ts::sum(params[1] * 3.0).backward();
  const double squares = ts::optim::sum_of_squares({params[0].grad(), params[1].grad()});
  CHECK(global_grad_norm({.replicated = squares}, {}) == ts::optim::grad_norm(params));
}

TEST_SUITE_END();
