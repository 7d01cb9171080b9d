// The engine's observability: the flops_profiler section (which step is profiled, what the
// report holds, where it goes), the wall-clock timers against a clock around each call, and
// the trace section's kernel events on one rank (tests/engine/test_trace.cpp: N ranks).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tiny_gpt.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {
const char* kObservedConfig = R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}})";

std::string read(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("flops_profiler: the profile step's micro-batches, reported once after its step") {
  const fs::path dir = fs::temp_directory_path() / "tessera-flops-profile";
  fs::remove_all(dir);
  const fs::path out = dir / "sub" / "profile.txt";  // its directory is made
  test::TinyGpt run(std::string(kObservedConfig) +
                    R"(, "flops_profiler": {"enabled": true, "profile_step": 1, "module_depth": 2,
                       "detailed": false, "output_file": ")" +
                    out.string() + "\"}}");
  // One forward of a micro-batch, counted by hand on the same model (no engine).
  const int64_t one =
      nn::get_model_profile<models::Batch>(*run.model, test::TinyGpt::batch(0)).flops;
  int64_t k = 0;
  for (int64_t step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro) run.train_step(k++);
    CAPTURE(step);
    CHECK(fs::exists(out) == (step >= 1));
    CHECK(run.engine->flops_profile().has_value() == (step >= 1));
  }
  const nn::ModelProfile& p = *run.engine->flops_profile();
  CHECK(p.flops == 2 * one);  // both micro-batches of step 1
  CHECK(p.params == run.model->num_parameters());
  const std::string text = read(out);
  CHECK(text == p.text);
  for (const char* line :
       {"Profile Summary at step 1:", "world size:", "batch size per GPU:",
        "forwards profiled (micro-batches of the step):", "fwd latency:", "bwd latency:",
        "step latency:", "iter latency:", "samples/second:", "depth 1:"})
    CHECK_MESSAGE(text.find(line) != std::string::npos, line);
  CHECK(text.find("depth 2:") == std::string::npos);          // module_depth 2
  CHECK(text.find("Detailed Profile") == std::string::npos);  // detailed false
  fs::remove_all(dir);
}

TEST_CASE("flops_profiler: bad keys are errors naming them") {
  for (const char* bad : {R"("profile_step": -1)", R"("top_modules": 0)", R"("module_depth": -2)",
                          R"("recompute_fwd_factor": -0.5)"}) {
    CAPTURE(bad);
    const std::string key = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    CHECK_THROWS_WITH_AS(io::TrainConfig::parse(std::string(kObservedConfig) +
                                                R"(, "flops_profiler": {)" + bad + "}}"),
                         doctest::Contains(("flops_profiler." + key).c_str()), Error);
  }
}

TEST_CASE("wall_clock_breakdown: forward + backward + step add up to a clock around the calls") {
  const fs::path dir = fs::temp_directory_path() / "tessera-timer-sum";
  fs::remove_all(dir);
  test::TinyGpt run(std::string(kObservedConfig) +
                    R"(, "gradient_accumulation_steps": 1, "train_batch_size": 2,
                       "wall_clock_breakdown": true, "steps_per_print": 1000,
                       "csv_monitor": {"enabled": true, "output_path": ")" +
                    dir.string() + R"(", "job_name": "j"}})");
  // A clock around each step's calls; the timers' three intervals of that step. The median
  // step's share is checked, so a step preempted on a busy machine does not decide it.
  const int steps = 9;
  std::vector<double> outside_ms;
  for (int64_t k = 0; k < steps; ++k) {
    const models::Batch b =
        test::TinyGpt::batch(k, 128);  // several ms a step: the timers' cost is us
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor loss = run.engine->forward(b);
    run.engine->backward(loss);
    run.engine->step();
    outside_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> inside_ms(steps, 0.0);
  for (const char* event : {"forward", "backward", "step"}) {
    std::ifstream f(dir / "j" / (std::string("Train_Samples_elapsed_time_ms_") + event + ".csv"));
    std::string line;
    std::getline(f, line);
    int row = 0;
    for (; std::getline(f, line) && row < steps; ++row)
      inside_ms[row] += std::stod(line.substr(line.find(',') + 1));
    CHECK(row == steps);
  }
  std::vector<double> share;
  for (int k = 0; k < steps; ++k) {
    CAPTURE(k);
    CHECK(inside_ms[k] <= outside_ms[k]);
    share.push_back(inside_ms[k] / outside_ms[k]);
  }
  std::sort(share.begin(), share.end());
  CAPTURE(share);
  CHECK(share[steps / 2] >= 0.95);
  fs::remove_all(dir);
}

TEST_CASE("trace: with kernels, each kernel's event inside its phase; bad steps are errors") {
  const fs::path dir = fs::temp_directory_path() / "tessera-trace-kernels";
  fs::remove_all(dir);
  {
    test::TinyGpt run(std::string(kObservedConfig) +
                      R"(, "trace": {"enabled": true, "kernels": true, "steps": [0, 0],
                         "output_path": ")" +
                      dir.string() + "\"}}");
    for (int64_t k = 0; k < 4; ++k) run.train_step(k);  // steps 0 and 1; only 0 is traced
  }
  std::ifstream f(dir / "trace_rank0.json");
  const nlohmann::json trace = nlohmann::json::parse(f);
  double fwd_start = 0, fwd_end = 0;
  int fwd = 0, matmuls = 0, batches = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    if (e.at("name") == "fwd" && fwd++ == 0) {
      fwd_start = e.at("ts").get<double>();
      fwd_end = fwd_start + e.at("dur").get<double>();
    }
    if (e.at("name") == "train_batch") ++batches;
  }
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") != "kernel" || e.at("name") != "matmul") continue;
    CHECK(e.at("args").at("device") == "cpu");
    CHECK(e.at("args").at("inputs").get<std::string>().find("float32[") == 0);
    const double ts = e.at("ts").get<double>();
    if (ts >= fwd_start && ts <= fwd_end) ++matmuls;
  }
  CHECK(fwd == 2);      // step 0's two micro-batches
  CHECK(batches == 1);  // one global step
  CHECK(matmuls > 0);   // the first forward's products lie inside it
  fs::remove_all(dir);
  for (const char* bad : {R"([3, 1])", R"([-1, 2])", R"("1-3")", R"([1])"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(io::TrainConfig::parse(std::string(kObservedConfig) +
                                                R"(, "trace": {"steps": )" + bad + "}}"),
                         doctest::Contains("trace.steps"), Error);
  }
}

TEST_CASE("monitors: a hand-written engine loop gets Train/Samples/train_loss at each boundary") {
  const fs::path dir = fs::temp_directory_path() / "tessera-engine-train-loss";
  fs::remove_all(dir);
  test::TinyGpt run(std::string(kObservedConfig) +
                    R"(, "csv_monitor": {"enabled": true, "output_path": ")" + dir.string() +
                    R"(", "job_name": "j"}})");
  // forward / backward / step by hand (no Trainer): 2 micro-batches a step, 3 steps.
  std::vector<double> expected;
  int64_t k = 0;
  for (int step = 0; step < 3; ++step) {
    double sum = 0;
    for (int micro = 0; micro < 2; ++micro) {
      const Tensor loss = run.engine->forward(test::TinyGpt::batch(k++));
      sum += loss.item();
      run.engine->backward(loss);
      run.engine->step();
    }
    CHECK(run.engine->wrote_train_loss());
    expected.push_back(sum / 2);  // the mean of the step's micro-batch losses
  }
  std::ifstream f(dir / "j" / "Train_Samples_train_loss.csv");
  std::string line;
  std::getline(f, line);
  CHECK(line == "step,train_loss");
  for (int step = 0; step < 3; ++step) {
    REQUIRE(std::getline(f, line));
    CAPTURE(line);
    CHECK(std::stoll(line.substr(0, line.find(','))) == 4 * (step + 1));  // global samples
    CHECK(std::stod(line.substr(line.find(',') + 1)) == expected[static_cast<size_t>(step)]);
  }
  CHECK_FALSE(std::getline(f, line));  // once per step, not per micro-batch
  fs::remove_all(dir);
}
