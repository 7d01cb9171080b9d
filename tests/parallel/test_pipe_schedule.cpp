// Pipeline schedules: DeepSpeed's TrainSchedule, InferenceSchedule and DataParallelSchedule
// instruction for instruction against DeepSpeed's own classes (deepspeed/pipe_schedules.json,
// tests/fixtures/generate_pipe_schedule_fixtures.py); interleaved and ZB-H1 against orders
// derived by hand; every stream replayed at unit cost gives the textbook bubble.
#include <doctest/doctest.h>

#include "fixture_util.h"
#include "tessera/parallel/pipe_schedule.h"
#include "tessera/parallel/pipe_schedule_registry.h"
#include "tessera/parallel/pipe_simulator.h"
#include "tessera/parallel/pipeline_config.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using namespace tessera::parallel;
using json = nlohmann::json;
using I = PipeInstruction;

namespace {

std::unique_ptr<PipeSchedule> deepspeed_kind(const std::string& name, int64_t m, int64_t p,
                                             int64_t s) {
  if (name == "TrainSchedule") return std::make_unique<TrainSchedule>(m, p, s);
  if (name == "InferenceSchedule") return std::make_unique<InferenceSchedule>(m, p, s);
  return std::make_unique<DataParallelSchedule>(m, p, s);
}

// "F0.1": forward of micro-batch 1 of chunk 0 (B backward, I input gradient, W weight gradient).
std::vector<std::string> compute_order(const std::vector<PipeStep>& steps) {
  std::vector<std::string> out;
  for (const PipeStep& step : steps)
    for (const I& in : step) {
      const char* k = in.kind == I::ForwardPass          ? "F"
                      : in.kind == I::BackwardPass       ? "B"
                      : in.kind == I::BackwardInputPass  ? "I"
                      : in.kind == I::BackwardWeightPass ? "W"
                                                         : nullptr;
      if (k) out.push_back(k + std::to_string(in.chunk) + "." + std::to_string(in.micro_batch));
    }
  return out;
}

}  // namespace

TEST_CASE("pipe schedules: DeepSpeed's streams, instruction for instruction") {
  const json fx = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/pipe_schedules.json");
  REQUIRE(fx["cases"].size() >= 50);
  for (const json& c : fx["cases"]) {
    const std::string name = c["schedule"];
    const int64_t m = c["micro_batches"], p = c["stages"], s = c["stage_id"];
    CAPTURE(name);
    CAPTURE(m);
    CAPTURE(p);
    CAPTURE(s);
    const auto sched = deepspeed_kind(name, m, p, s);
    CHECK(sched->num_pipe_buffers() == c["num_pipe_buffers"].get<int64_t>());
    const std::vector<PipeStep> steps = sched->steps();
    REQUIRE(steps.size() == c["steps"].size());
    for (size_t i = 0; i < steps.size(); ++i) {
      json got = json::array();
      for (const I& in : steps[i])
        got.push_back({in.name(), in.buffer_id < 0 ? json(nullptr) : json(in.buffer_id)});
      CHECK(got == c["steps"][i]);
    }
  }
}

TEST_CASE("1F1B (TrainSchedule): bubble (p - 1) / (m + p - 1), at most p - stage in flight") {
  for (const auto& pm : {std::pair<int64_t, int64_t>{2, 4}, {4, 8}, {4, 16}, {3, 5}, {5, 2}}) {
    const int64_t p = pm.first, m = pm.second;  // (clang 14 cannot capture bindings)
    CAPTURE(p);
    CAPTURE(m);
    const auto streams = pipeline_streams(p, [&](int64_t s) { return TrainSchedule(m, p, s); });
    const PipeSimulation sim = simulate_pipeline(streams);
    CHECK(sim.bubble_fraction() ==
          doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(m + p - 1)));
    CHECK(sim.messages == 2 * m * (p - 1));  // every send matched by a receive
    for (int64_t s = 0; s < p; ++s) CHECK(sim.peak_in_flight[s] <= std::min(p - s, m));
    // The same at a backward twice the forward: 1F1B's bubble does not depend on the ratio.
    const PipeSimulation slow = simulate_pipeline(streams, {1.0, 2.0, 1.0, 1.0});
    CHECK(slow.bubble_fraction() ==
          doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(m + p - 1)));
  }
}

TEST_CASE("interleaved 1F1B: Megatron's order, bubble (p - 1) / (v m + p - 1)") {
  // p 2, v 2, m 4, stage 0: warm-up (p - 1) * 2 + (v - 1) * p = 4 forwards in groups of p
  // micro-batches per chunk, then one forward and one backward (from the last chunk), then the
  // remaining backwards.
  CHECK(compute_order(InterleavedSchedule(4, 2, 0, 2).steps()) ==
        std::vector<std::string>{"F0.0", "F0.1", "F1.0", "F1.1", "F0.2", "B1.0", "F0.3", "B1.1",
                                 "F1.2", "B0.0", "F1.3", "B0.1", "B1.2", "B1.3", "B0.2", "B0.3"});
  for (const auto& pvm :
       {std::tuple<int64_t, int64_t, int64_t>{2, 2, 4}, {4, 2, 8}, {4, 3, 8}, {2, 4, 6}}) {
    const int64_t p = std::get<0>(pvm), v = std::get<1>(pvm), m = std::get<2>(pvm);
    CAPTURE(p);
    CAPTURE(v);
    CAPTURE(m);
    const auto sim = simulate_pipeline(
        pipeline_streams(p, [&](int64_t s) { return InterleavedSchedule(m, p, s, v); }));
    const double want = static_cast<double>(p - 1) / static_cast<double>(v * m + p - 1);
    CHECK(sim.bubble_fraction() == doctest::Approx(want));
    CHECK(want < static_cast<double>(p - 1) / static_cast<double>(m + p - 1));
  }
  CHECK_THROWS_WITH(InterleavedSchedule(5, 2, 0, 2),
                    doctest::Contains("5 micro-batches are not a multiple of the 2 stages"));
}

TEST_CASE("ZB-H1: the hand-derived order and bubble (p - 1) / (3 m + p - 1)") {
  // p 2, m 3 at unit cost: stage 0 F0 F1 (waits) I0 W0 F2 I1 W1 I2 W2; stage 1 (waits) F0 I0
  // F1 I1 W0 F2 I2 W1 W2 (its weight passes a micro-batch late): each stage idles one unit of 10.
  CHECK(compute_order(ZeroBubbleH1Schedule(3, 2, 0).steps()) ==
        std::vector<std::string>{"F0.0", "F0.1", "I0.0", "W0.0", "F0.2", "I0.1", "W0.1", "I0.2",
                                 "W0.2"});
  CHECK(compute_order(ZeroBubbleH1Schedule(3, 2, 1).steps()) ==
        std::vector<std::string>{"F0.0", "I0.0", "F0.1", "I0.1", "W0.0", "F0.2", "I0.2", "W0.1",
                                 "W0.2"});
  for (const auto& pm : std::vector<std::pair<int64_t, int64_t>>{
           {2, 3}, {2, 8}, {3, 5}, {4, 4}, {4, 8}, {4, 16}, {8, 16}}) {
    const int64_t p = pm.first, m = pm.second;
    CAPTURE(p);
    CAPTURE(m);
    const auto sim = simulate_pipeline(
        pipeline_streams(p, [&](int64_t s) { return ZeroBubbleH1Schedule(m, p, s); }));
    CHECK(sim.bubble_fraction() ==
          doctest::Approx(static_cast<double>(p - 1) / static_cast<double>(3 * m + p - 1)));
    for (int64_t s = 0; s < p; ++s) {
      CHECK(sim.peak_in_flight[s] <= std::min(p - s, m));  // forward to input gradient
      // Forward to weight gradient: 1F1B's first stage's p, on every stage.
      CHECK(peak_activations(ZeroBubbleH1Schedule(m, p, s).steps()) == std::min(p, m));
    }
  }
  // 1F1B holds p - stage: peak_activations reads it off the stream.
  for (int64_t s = 0; s < 4; ++s) CHECK(peak_activations(TrainSchedule(8, 4, s).steps()) == 4 - s);
}

TEST_CASE("simulator: a receive nobody sends is a deadlock naming the stage") {
  std::vector<std::vector<PipeStep>> streams{{{{I::RecvGrad, 0, 0, 0}}},
                                             {{{I::RecvActivation, 0, 0, 0}}}};
  CHECK_THROWS_WITH(simulate_pipeline(streams),
                    doctest::Contains("stage 0 waits at RecvGrad(buffer_id=0)"));
  std::vector<std::vector<PipeStep>> unmatched{{{{I::SendActivation, 0, 0, 0}}}, {}};
  CHECK_THROWS_WITH(simulate_pipeline(unmatched),
                    doctest::Contains("stage 0 sends 1 activation(s) to stage 1"));
}

TEST_SUITE_END();

TEST_CASE("the pipeline schedule registry: a config's schedule and chunks checked by its entry") {
  auto cfg = [](const std::string& pipeline, int64_t gas = 4) -> io::TrainConfig {
    // (The reader runs parallel::check_pipeline_schedule.)
    return io::TrainConfig::parse(
        R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": )" +
            std::to_string(gas) + R"(, "pipeline": )" + pipeline + "}",
        2, "p.json");
  };
  // virtual_stages left out: the schedule's default (Megatron's 2 for interleaved).
  auto virtual_stages = [&](const std::string& pipeline) {
    return parallel::pipeline_config(cfg(pipeline)).virtual_stages;
  };
  CHECK(virtual_stages(R"({"stages": 2})") == 1);
  CHECK(virtual_stages(R"({"stages": 2, "schedule": "interleaved"})") == 2);
  CHECK(virtual_stages(R"({"stages": 2, "schedule": "interleaved", "virtual_stages": 3})") == 3);
  CHECK_THROWS_WITH_AS(cfg(R"({"stages": 2, "schedule": "gpipe"})"),
                       doctest::Contains("p.json: 'pipeline.schedule' is \"gpipe\", expected one "
                                         "of 1f1b, zb-h1, interleaved"),
                       Error);
  CHECK_THROWS_WITH_AS(cfg(R"({"stages": 2, "virtual_stages": 2})"),
                       doctest::Contains("'pipeline.virtual_stages' is 2: model chunks per stage "
                                         "need the interleaved schedule"),
                       Error);
  CHECK_THROWS_WITH_AS(cfg(R"({"stages": 2, "schedule": "interleaved", "virtual_stages": 1})"),
                       doctest::Contains("the interleaved schedule needs 2 or more model chunks"),
                       Error);
  CHECK_THROWS_WITH_AS(cfg(R"({"stages": 1, "schedule": "interleaved"})"),
                       doctest::Contains("\"interleaved\" needs 'stages' >= 2"), Error);
  CHECK_THROWS_WITH_AS(cfg(R"({"stages": 2, "schedule": "interleaved"})", 3),
                       doctest::Contains("needs gradient_accumulation_steps (3, the micro-batches "
                                         "of a step) to be a multiple of pipeline.stages (2)"),
                       Error);

  // A schedule of one's own: one entry, then a config can name it and it builds.
  if (!parallel::has_pipe_schedule("1f1b-again"))
    parallel::register_pipe_schedule({"1f1b-again", "1F1B under another name", 1, 1, 1, 1, false,
                                      [](int64_t m, int64_t s, int64_t id, int64_t) {
                                        return std::unique_ptr<parallel::PipeSchedule>(
                                            std::make_unique<parallel::TrainSchedule>(m, s, id));
                                      }});
  CHECK_THROWS_WITH_AS(parallel::register_pipe_schedule(parallel::find_pipe_schedule("zb-h1")),
                       doctest::Contains("'zb-h1' is registered twice"), Error);
  CHECK(parallel::registered_pipe_schedule_list() == "1f1b, zb-h1, interleaved, 1f1b-again");
  CHECK(virtual_stages(R"({"stages": 2, "schedule": "1f1b-again"})") == 1);
  for (int64_t stage = 0; stage < 3; ++stage)
    CHECK(parallel::train_schedule("1f1b-again", 4, 3, stage)->steps() ==
          parallel::TrainSchedule(4, 3, stage).steps());
}
