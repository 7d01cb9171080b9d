// Determined's metric reducers at 1, 2 and 4 ranks (this suite runs alone and under mpirun):
// its own test's values for the simple reducers, and hand computations for uneven batches
// across slots, custom reducers and the simple API's ordering.
#include <doctest/doctest.h>

#include <cmath>

#include "tessera/parallel/process_group.h"
#include "tessera/trial/metric_reducer.h"
#include "tessera/trial/reducer.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using trial::Metrics;
using trial::Reducer;

TEST_CASE("trial reducers: Determined's own figures for AVG, SUM, MIN, MAX and weighted AVG") {
  // determined/harness/tests/.../test_reducer: these metrics and batch counts give these values.
  const std::vector<double> m{0.25, 0.5, 0.75, 1, 25.5, 1.9};
  CHECK(std::round(trial::reduce_values(Reducer::AVG, m) * 100) / 100 == 4.98);
  CHECK(trial::reduce_values(Reducer::SUM, m) == doctest::Approx(29.9).epsilon(1e-15));
  CHECK(trial::reduce_values(Reducer::MIN, m) == 0.25);
  CHECK(trial::reduce_values(Reducer::MAX, m) == 25.5);
  CHECK(std::round(trial::reduce_values(Reducer::AVG, m, {1, 2, 5, 4, 5, 6}) * 100) / 100 == 6.43);
  CHECK_THROWS_WITH_AS(trial::reduce_values(Reducer::AVG, m, {1, 2}, "loss"),
                       doctest::Contains("'loss': 6 values but 2 weights"), Error);
  CHECK_THROWS_WITH_AS(trial::reduce_values(Reducer::MAX, {}, {}, "acc"),
                       doctest::Contains("'acc': no values"), Error);
}

TEST_CASE("trial reducers: evaluate_batch metrics over uneven slots") {
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  // Rank r evaluates r + 1 batches, except the last of several ranks, which has none. Batch b
  // of rank r reports loss = 10 r + b and acc = r - b.
  const int mine = (world > 1 && rank == world - 1) ? 0 : rank + 1;
  std::vector<Metrics> batches;
  for (int b = 0; b < mine; ++b)
    batches.push_back({{"loss", 10.0 * rank + b}, {"acc", static_cast<double>(rank - b)}});
  // By hand: each slot's mean, weighted by its batch count = the mean over every batch; SUM
  // of the slots' sums; MAX and MIN over every batch of the slots that have any.
  double loss_sum = 0, acc_max = -1e9, acc_min = 1e9;
  int64_t batches_all = 0;
  for (int r = 0; r < world; ++r) {
    const int n = (world > 1 && r == world - 1) ? 0 : r + 1;
    for (int b = 0; b < n; ++b) {
      loss_sum += 10.0 * r + b;
      acc_max = std::max(acc_max, static_cast<double>(r - b));
      acc_min = std::min(acc_min, static_cast<double>(r - b));
      ++batches_all;
    }
  }
  const Metrics avg = trial::reduce_batch_metrics(*group, batches);
  CHECK(avg.at("loss") == doctest::Approx(loss_sum / static_cast<double>(batches_all)));
  const Metrics per = trial::reduce_batch_metrics(
      *group, batches,
      std::map<std::string, Reducer>{{"loss", Reducer::SUM}, {"acc", Reducer::MAX}});
  CHECK(per.at("loss") == doctest::Approx(loss_sum));
  CHECK(per.at("acc") == acc_max);
  CHECK(trial::reduce_batch_metrics(*group, batches, Reducer::MIN).at("acc") == acc_min);
  if (mine > 0) {  // a metric without a reducer is named
    CHECK_THROWS_WITH_AS(
        trial::reduce_batch_metrics(*group, batches,
                                    std::map<std::string, Reducer>{{"loss", Reducer::AVG}}),
        doctest::Contains("no reducer for metric 'acc'"), Error);
  }
}

TEST_CASE("trial reducers: training metrics are averaged across slots batch by batch") {
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  std::vector<Metrics> batches{{{"loss", 1.0 + rank}}, {{"loss", 2.0 * rank}}};
  const auto avg = trial::average_training_metrics(*group, batches);
  REQUIRE(avg.size() == 2);
  // mean over r of (1 + r) and of 2 r
  CHECK(avg[0].at("loss") == doctest::Approx(1.0 + (world - 1) / 2.0));
  CHECK(avg[1].at("loss") == doctest::Approx(static_cast<double>(world - 1)));
  if (world == 1) return;
  // Rank 0 reports nothing (should_report_metrics false): the mean over ranks 1..N-1.
  const auto some = trial::average_training_metrics(
      *group, rank == 0 ? std::vector<Metrics>{} : std::vector<Metrics>{{{"loss", 1.0 * rank}}});
  REQUIRE(some.size() == 1);
  CHECK(some[0].at("loss") == doctest::Approx(world / 2.0));  // mean of 1..N-1
}

namespace {
struct MeanReducer : trial::MetricReducer {
  double sum = 0;
  int64_t count = 0;
  int resets = 0;
  void update(double v) { sum += v, ++count; }
  void reset() override { sum = 0, count = 0, ++resets; }
  nlohmann::json per_slot_reduce() override { return {sum, count}; }
  nlohmann::json cross_slot_reduce(const std::vector<nlohmann::json>& slots) override {
    double s = 0, n = 0;
    for (const auto& x : slots) s += x[0].get<double>(), n += x[1].get<double>();
    return s / n;
  }
};
}  // namespace

TEST_CASE("trial reducers: custom MetricReducer and the simple API's order across slots") {
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  trial::ReducerContext ctx;
  auto mean = ctx.wrap_reducer(std::make_shared<MeanReducer>(), "mean");
  std::vector<nlohmann::json> seen;
  auto order = ctx.wrap_reducer(
      [&](const std::vector<nlohmann::json>& values) {
        seen = values;
        return nlohmann::json(values.size());
      },
      "count", /*for_training=*/false, /*for_validation=*/true);
  auto both = ctx.wrap_reducer(std::make_shared<MeanReducer>(), std::nullopt, true, false);
  ctx.reset_reducers();
  CHECK(mean->resets == 1);
  // The global data set 0..11 sharded round-robin: rank r holds items r, r + world, ...
  for (int i = rank; i < 12; i += world) {
    mean->update(i);
    order->update(i);
  }
  const nlohmann::json val = ctx.reduce_metrics(*group, /*for_training=*/false);
  CHECK(val.at("mean").get<double>() == doctest::Approx(5.5));
  CHECK(val.at("count").get<int>() == 12);
  std::vector<int> flat;
  for (const auto& v : seen) flat.push_back(v.get<int>());
  std::vector<int> want(12);
  for (int i = 0; i < 12; ++i) want[i] = i;
  CHECK(flat == want);  // back in the order before sharding
  // An unnamed reducer must return an object of metrics; a named one must not.
  both->update(1.0);
  CHECK_THROWS_WITH_AS(ctx.reduce_metrics(*group, /*for_training=*/true),
                       doctest::Contains("must return an object of metric names"), Error);
  CHECK_THROWS_WITH_AS(ctx.wrap_reducer(std::make_shared<MeanReducer>(), "mean"),
                       doctest::Contains("'mean' is already registered"), Error);
}

TEST_CASE("trial reducers: strings of any length gathered in rank order") {
  auto group = parallel::world();
  const int rank = group->rank();
  const std::string mine(static_cast<size_t>(rank * 3), static_cast<char>('a' + rank));
  const auto all = trial::all_gather_strings(*group, mine);
  REQUIRE(static_cast<int>(all.size()) == group->size());
  for (int r = 0; r < group->size(); ++r)
    CHECK(all[r] == std::string(static_cast<size_t>(r * 3), static_cast<char>('a' + r)));
}

TEST_SUITE_END();
