// The monitor registry: a monitor of one's own (JSON lines) in one class and one
// RegisterMonitor line is a config section like DeepSpeed's csv_monitor (its keys read, an
// unknown one warned about and refused under strict), built by the engine on rank 0, and gets
// the events the engine writes: each step's train loss (the mean of its micro-batch losses) and
// lr at the number of samples trained, as derived by hand.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/engine/monitor_registry.h"
#include "tessera/error.h"
#include "tiny_gpt.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

// One JSON object per event, in <output_path>/<job_name>/events.jsonl.
class JsonLinesMonitor : public engine::Monitor {
 public:
  explicit JsonLinesMonitor(const io::TrainConfig::Monitor& config) {
    fs::create_directories(fs::path(config.output_path) / config.job_name);
    file_.open(fs::path(config.output_path) / config.job_name / "events.jsonl");
  }
  void write_events(const std::vector<engine::MonitorEvent>& events) override {
    for (const auto& e : events)
      file_ << nlohmann::json{{"name", e.name}, {"value", e.value}, {"step", e.step}}.dump()
            << "\n";
    file_.flush();
  }

 private:
  std::ofstream file_;
};

const engine::RegisterMonitor kJsonLines{
    {"jsonl_monitor", "one JSON object per event in output_path/job_name/events.jsonl",
     [](const io::TrainConfig::Monitor& s) { return std::make_unique<JsonLinesMonitor>(s); }}};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a monitor of one's own is a config section with DeepSpeed's monitor keys") {
  const auto c = io::TrainConfig::parse(
      R"({"train_batch_size": 2, "jsonl_monitor": {"enabled": true, "output_path": "runs/",
          "job_name": "a", "flush_secs": 5}})",
      1, "cfg.json");
  CHECK(c.monitor("jsonl_monitor").enabled);
  CHECK(c.monitor("jsonl_monitor").output_path == "runs/");
  CHECK(c.monitor("jsonl_monitor").job_name == "a");
  CHECK_FALSE(c.monitor("csv_monitor").enabled);  // every registered one, its defaults
  CHECK(c.monitor("csv_monitor").job_name == "DeepSpeedJobName");
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("'jsonl_monitor.flush_secs'") != std::string::npos);
  CHECK(error_of([] {
          io::TrainConfig::parse(R"({"train_batch_size": 2, "strict": true,
              "jsonl_monitor": {"flush_secs": 5}})");
        }).find("jsonl_monitor.flush_secs") != std::string::npos);
  CHECK(error_of([&] { c.monitor("wandb"); })
            .find("'wandb' is not a registered monitor (registered: csv_monitor, jsonl_monitor, "
                  "tensorboard)") != std::string::npos);
  CHECK(error_of([] {
          engine::register_monitor({"jsonl_monitor", "again", [](const auto& s) {
                                      return std::make_unique<JsonLinesMonitor>(s);
                                    }});
        }).find("'jsonl_monitor' is registered twice") != std::string::npos);
  CHECK(error_of([] {
          engine::register_monitor({"zero_optimization", "not a monitor", [](const auto& s) {
                                      return std::make_unique<JsonLinesMonitor>(s);
                                    }});
        }).find("'zero_optimization' is a config section already") != std::string::npos);
}

TEST_CASE("the engine writes its events to a monitor of one's own") {
  const fs::path dir = fs::temp_directory_path() / "tessera-monitor-registry";
  fs::remove_all(dir);
  test::TinyGpt run(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "SGD", "params": {"lr": 0.01}},
      "jsonl_monitor": {"enabled": true, "output_path": ")" +
                    dir.string() + R"(", "job_name": "j"}})");
  std::vector<double> expected;  // each step's mean micro-batch loss
  int64_t k = 0;
  for (int step = 0; step < 3; ++step) {
    double sum = 0;
    for (int micro = 0; micro < 2; ++micro) {
      const Tensor loss = run.engine->forward(test::TinyGpt::batch(k++));
      sum += loss.item();
      run.engine->backward(loss);
      run.engine->step();
    }
    expected.push_back(sum / 2);
  }
  std::ifstream f(dir / "j" / "events.jsonl");
  std::map<std::string, std::vector<std::pair<int64_t, double>>> events;
  for (std::string line; std::getline(f, line);) {
    const auto e = nlohmann::json::parse(line);
    events[e["name"].get<std::string>()].push_back({e["step"].get<int64_t>(), e["value"]});
  }
  using Points = std::vector<std::pair<int64_t, double>>;
  // 4 samples a step; the lr is constant (no scheduler).
  CHECK(events["Train/Samples/train_loss"] ==
        Points{{4, expected[0]}, {8, expected[1]}, {12, expected[2]}});
  CHECK(events["Train/Samples/lr"] == Points{{4, 0.01}, {8, 0.01}, {12, 0.01}});
  fs::remove_all(dir);
}
