// The trace section on N ranks: one Chrome trace-event file per rank, its events on that
// rank's track (pid), the engine's phases for each step of the window (under ZeRO with the
// optimizer's parts inside step), and every collective the process group ran in the window
// (against the comms logger's counts over the same steps).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "regressor.h"
#include "skip.h"
#include "tessera/engine/engine.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);  // throws (fails the test) on invalid JSON
}

}  // namespace

namespace {

// Trains steps 0-3 with the trace on steps 1-2 at ZeRO `stage` and checks this rank's file.
void check_trace(int stage) {
  CAPTURE(stage);
  auto group = parallel::world();
  const int world = group->size(), rank = group->rank();
  const fs::path dir = fs::temp_directory_path() /
                       ("tessera-trace-np" + std::to_string(world) + "-" + std::to_string(stage));
  if (rank == 0) fs::remove_all(dir);
  group->barrier();
  manual_seed(3);
  test::Regressor model;
  auto engine = engine::initialize(
      model,
      io::TrainConfig::parse(R"({"train_batch_size": 8, "gradient_accumulation_steps": 1,
        "optimizer": {"type": "Adam", "params": {"lr": 0.05}},
        "comms_logger": {"enabled": true, "prof_all": true},
        "wall_clock_breakdown": true, "steps_per_print": 1,
        "zero_optimization": {"stage": )" +
                                 std::to_string(stage) + R"(},
        "trace": {"enabled": true, "steps": [1, 2], "output_path": ")" +
                                 dir.string() + "\"}}",
                             world),
      group);
  std::map<std::string, parallel::CommsLogger::OpStats> before, after;
  std::stringstream printed;  // rank 0's wall_clock_breakdown lines
  std::streambuf* cerr = std::cerr.rdbuf(printed.rdbuf());
  for (int64_t step = 0; step < 4; ++step) {
    if (step == 1) before = group->logger().totals();
    const test::Rows b =
        test::make_rows(8 / world, 100 + static_cast<uint64_t>(step * world + rank));
    engine->backward(engine->forward(b));
    engine->step();
    if (step == 2) after = group->logger().totals();
  }
  std::cerr.rdbuf(cerr);
  if (rank == 0) {
    // DeepSpeed's lines: under ZeRO the optimizer's parts each step (measured, not zeros).
    const std::string text = printed.str();
    CHECK(text.find("time (ms) | fwd: ") != std::string::npos);
    const size_t at = text.find("time (ms) | optimizer_allgather: ");
    CHECK((at != std::string::npos) == (stage > 0));
    if (stage > 0) {  // DeepSpeed's order; each a number of milliseconds
      const std::string line = text.substr(at, text.find('\n', at) - at);
      double allgather = -1, gradients = -1, step = -1;
      CHECK(std::sscanf(line.c_str(),
                        "time (ms) | optimizer_allgather: %lf | optimizer_gradients: %lf | "
                        "optimizer_step: %lf",
                        &allgather, &gradients, &step) == 3);
      CHECK(std::min({allgather, gradients, step}) >= 0);
    }
  }
  const fs::path mine = dir / ("trace_rank" + std::to_string(rank) + ".json");
  CHECK(fs::exists(mine));  // written when the window ended, before the engine goes
  engine.reset();
  group->barrier();

  const nlohmann::json trace = read_json(mine);
  std::map<std::string, int64_t> calls, bytes;
  std::map<int64_t, int> train_batches;
  std::map<std::string, int> optimizer_parts;  // ZeRO's, each inside a step event
  std::vector<std::pair<double, double>> steps;
  int fwd = 0, named = 0;
  for (const auto& e : trace.at("traceEvents")) {
    CHECK(e.at("pid") == rank);  // this rank's track
    if (e.at("ph") == "M") {
      if (e.at("name") == "process_name" &&
          e.at("args").at("name") == "rank " + std::to_string(rank))
        ++named;
      continue;
    }
    CHECK(e.at("ph") == "X");
    CHECK(e.at("dur").get<double>() >= 0);
    const std::string cat = e.at("cat"), name = e.at("name");
    if (cat == "engine" && name == "fwd") ++fwd;
    if (cat == "engine" && name == "train_batch") ++train_batches[e.at("args").at("global_step")];
    if (cat == "engine" && name == "step")
      steps.emplace_back(e.at("ts").get<double>(),
                         e.at("ts").get<double>() + e.at("dur").get<double>());
    if (cat == "collective") {
      ++calls[name];
      bytes[name] += e.at("args").at("bytes").get<int64_t>();
      CHECK(e.at("args").at("group") == "mpi, " + std::to_string(world) + " ranks");
    }
  }
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("name").get<std::string>().rfind("optimizer_", 0) != 0) continue;
    const double a = e.at("ts").get<double>(), b = a + e.at("dur").get<double>();
    const bool inside = std::any_of(steps.begin(), steps.end(), [&](const auto& s) {
      return a >= s.first - 1e-3 && b <= s.second + 1e-3;
    });
    CHECK(inside);
    ++optimizer_parts[e.at("name")];
  }
  if (stage > 0)
    CHECK(optimizer_parts == std::map<std::string, int>{{"optimizer_allgather", 2},
                                                        {"optimizer_gradients", 2},
                                                        {"optimizer_step", 2}});
  else
    CHECK(optimizer_parts.empty());
  CHECK(named == 1);
  CHECK(fwd == 2);  // steps 1 and 2, one micro-batch each
  CHECK(train_batches == std::map<int64_t, int>{{1, 1}, {2, 1}});
  // Every collective of steps 1-2, as the comms logger counted them over the same steps.
  std::map<std::string, int64_t> want_calls, want_bytes;
  for (const auto& [op, st] : after) {
    const int64_t c = st.calls - (before.count(op) ? before.at(op).calls : 0);
    if (c == 0) continue;
    want_calls[op] = c;
    want_bytes[op] = st.message_bytes - (before.count(op) ? before.at(op).message_bytes : 0);
  }
  CHECK(!want_calls.empty());  // the gradients' all-reduce, at least
  CHECK(calls == want_calls);
  CHECK(bytes == want_bytes);
  // Every rank's file is there for a person to open side by side.
  for (int r = 0; r < world; ++r)
    CHECK(fs::exists(dir / ("trace_rank" + std::to_string(r) + ".json")));
  group->barrier();
  if (rank == 0) fs::remove_all(dir);
}

}  // namespace

TEST_CASE("trace: a trace-event file per rank with its phases and every collective" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  check_trace(0);  // data parallelism: the gradients' all-reduce
  check_trace(2);  // ZeRO-2: reduce-scatter in backward, the optimizer's parts, all-gather
}

TEST_SUITE_END();
