// Collectives, topology and bucketed gradient averaging on 1, 2 and 4 ranks (run by mpirun
// from meson; alone it is a world of one, where point-to-point cases are skipped). Expected
// values are closed forms in the rank.
#include <doctest/doctest.h>

#include <numeric>

#include "skip.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/grad_buckets.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/shard_layout.h"
#include "tessera/parallel/topology.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using namespace tessera::parallel;

namespace {
// Rank r's tensor: element i = r * 100 + i.
Tensor ramp(int64_t n, int r, DType d = DType::Float32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = r * 100.0 + static_cast<double>(i);
  return from_vector(v, {n}).to(d);
}
}  // namespace

TEST_CASE("all_reduce sum, avg and max, in float32, float64 and bfloat16") {
  auto w = world();
  const int n = w->size(), r = w->rank();
  const double rank_sum = n * (n - 1) / 2.0;
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const double eps = d == DType::BFloat16 ? 1e-2 : 1e-12;  // bf16 rounds the inputs (8 bits)
    Tensor t = ramp(5, r, d);
    w->all_reduce(t, ReduceOp::Sum);
    for (int64_t i = 0; i < 5; ++i)
      CHECK(t.to_vector()[static_cast<size_t>(i)] ==
            doctest::Approx(100 * rank_sum + n * i).epsilon(eps));
    Tensor a = ramp(5, r, d);
    w->all_reduce(a, ReduceOp::Avg);
    CHECK(a.to_vector()[2] == doctest::Approx((100 * rank_sum + 2 * n) / n).epsilon(1e-2));
    Tensor m = ramp(5, r, d);
    w->all_reduce(m, ReduceOp::Max);
    CHECK(m.to_vector()[4] == doctest::Approx(100.0 * (n - 1) + 4).epsilon(eps));
  }
  CHECK(w->all_reduce_scalar(r + 1.0) == doctest::Approx(rank_sum + n));
}

TEST_CASE("reduce_scatter, all_gather (also in place), broadcast, send/recv, barrier") {
  auto w = world();
  const int n = w->size(), r = w->rank();
  Tensor in = ramp(3 * n, r), out = Tensor::empty({3});
  w->reduce_scatter(out, in);
  for (int64_t i = 0; i < 3; ++i)
    CHECK(out.to_vector()[static_cast<size_t>(i)] ==
          doctest::Approx(100.0 * n * (n - 1) / 2 + n * (3.0 * r + i)));
  Tensor gathered = Tensor::empty({2 * n});
  w->all_gather(gathered, ramp(2, r));
  for (int q = 0; q < n; ++q)
    CHECK(gathered.to_vector()[static_cast<size_t>(2 * q + 1)] == 100.0 * q + 1);
  Tensor buf = zeros({2 * n});
  buf.narrow(0, 2 * r, 2).copy_(ramp(2, r));
  w->all_gather(buf, buf.narrow(0, 2 * r, 2));  // MPI_IN_PLACE
  CHECK(buf.to_vector() == gathered.to_vector());
  Tensor b = r == 0 ? ramp(4, 7) : zeros({4});
  w->broadcast(b, 0);
  CHECK(b.to_vector()[3] == 703.0);
  w->barrier();
  CHECK_THROWS_WITH_AS(w->all_gather(Tensor::empty({3}), ramp(2, r)),
                       doctest::Contains("all_gather"), Error);
}

TEST_CASE("send/recv between two ranks" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  auto w = world();
  const int r = w->rank();
  if (r == 0) w->send(ramp(3, 9), 1, 5);
  if (r == 1) {
    Tensor got = zeros({3});
    w->recv(got, 0, 5);
    CHECK(got.to_vector() == std::vector<double>{900.0, 901.0, 902.0});
  }
  w->barrier();
}

TEST_CASE("async collectives complete in order and the logger counts bus bytes") {
  auto w = world();
  const int n = w->size();
  w->logger().enable(true);
  w->logger().reset();
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000}, k + 1.0));
    works.push_back(w->all_reduce_async(ts.back()));
  }
  for (auto& wk : works) wk.wait();
  for (int k = 0; k < 4; ++k) CHECK(ts[static_cast<size_t>(k)].to_vector()[999] == (k + 1.0) * n);
  const auto t = w->logger().totals().at("all_reduce");
  CHECK(t.calls == 4);
  CHECK(t.message_bytes == 4 * 4000);
  CHECK(t.bus_bytes == doctest::Approx(4 * 4000 * 2.0 * (n - 1) / n));
  w->logger().enable(false);
}

TEST_CASE("sub-groups and topology") {
  auto w = world();
  const int n = w->size(), r = w->rank();
  ProcessTopology topo({"pipe", "data"}, {n >= 2 ? 2 : 1, n >= 2 ? n / 2 : 1});
  CHECK(topo.world_size() == n);
  CHECK(topo.rank_of(topo.coords_of(r)) == r);
  auto data = topo.group_for(*w, "data");
  REQUIRE(data);
  CHECK(data->size() == topo.dim("data"));
  Tensor t = full({1}, 1.0);
  data->all_reduce(t);
  CHECK(t.item() == topo.dim("data"));
  ProcessTopology three({"pipe", "data", "model"}, {2, 2, 2});
  CHECK(three.coords_of(5) == std::map<std::string, int>{{"pipe", 1}, {"data", 0}, {"model", 1}});
  CHECK(three.axis_groups("data") == std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK_THROWS_WITH_AS(three.dim("tensor"), doctest::Contains("no axis 'tensor'"), Error);
}

TEST_CASE("shard layout pads every parameter to world equal shards") {
  ShardLayout l({{"a", {5}}, {"b", {2, 3}}}, 4);
  CHECK(l.entries[0].shard == 2);
  CHECK(l.entries[1].shard == 2);
  CHECK(l.entries[1].offset == 2);
  CHECK(l.partition_numel == 4);
  CHECK(l.entries[0].valid(2) == 1);
  CHECK(l.entries[0].valid(3) == 0);
  CHECK(l.total_numel() == 11);
  bool is_param = false;
  CHECK(l.find("b") == &l.entries[1]);
  CHECK(l.find("c") == nullptr);
  CHECK(l.owner_of("a", &is_param) == &l.entries[0]);
  CHECK(is_param);
  CHECK(l.owner_of("b.exp_avg", &is_param) == &l.entries[1]);
  CHECK_FALSE(is_param);
  CHECK(l.owner_of("c.exp_avg") == nullptr);
  CHECK(l.owner_of("exp_avg") == nullptr);
}

TEST_CASE("bucketed averaging gives every rank the mean gradient") {
  auto w = world();
  const int n = w->size(), r = w->rank();
  // Rank r's loss: sum((r + 1) * x * y) over two leaves; gradients (r + 1) * y and (r + 1) * x.
  Tensor x = ramp(7, 0).requires_grad_(), y = ramp(3, 1).requires_grad_();
  GradBuckets::Options o;
  o.bucket_numel = 4;  // several buckets
  o.post_scale = 1.0 / n;
  GradBuckets b(w, {&x, &y}, GradBuckets::Mode::AllReduce, o);
  b.begin_backward(true);
  ((sum(x) * sum(y)) * (r + 1.0)).backward();
  b.end_backward();
  const double mean_factor = (n + 1) / 2.0;
  CHECK(x.grad().to_vector()[0] == doctest::Approx(mean_factor * (300 + 3)));
  CHECK(y.grad().to_vector()[2] == doctest::Approx(mean_factor * 21));
}

TEST_CASE("ring exchange: every rank sends to the next and receives from the previous at once" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  // 4 MB messages go by rendezvous: run in call order as blocking calls, every rank's send
  // would wait for a receive its peer has not posted yet.
  auto w = world();
  const int n = w->size(), r = w->rank();
  const auto saved = w->timeout();
  w->set_timeout(std::chrono::seconds(60));
  const int64_t count = 1 << 20;
  Tensor out = full({count}, r + 1.0), in = zeros({count});
  Work s = w->send_async(out, (r + 1) % n, 3);
  Work v = w->recv_async(in, (r + n - 1) % n, 3);
  v.wait();
  s.wait();
  const int prev = (r + n - 1) % n;
  CHECK(in.to_vector()[0] == prev + 1.0);
  CHECK(in.to_vector()[static_cast<size_t>(count - 1)] == prev + 1.0);
  // The same exchange as one batch (the form NCCL needs).
  Tensor again = zeros({count});
  for (Work& k : w->batch_send_recv(
           {{P2POp::Kind::Send, out, (r + 1) % n, 4}, {P2POp::Kind::Recv, again, prev, 4}}))
    k.wait();
  CHECK(again.to_vector()[0] == prev + 1.0);
  w->set_timeout(saved);
}

TEST_SUITE_END();
