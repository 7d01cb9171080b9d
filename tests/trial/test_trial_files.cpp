// The files a trial writes and the experiment that follows it reads: checkpoints.json and
// metrics.jsonl. What one side writes the other reads back field for field; a damaged index is
// an error naming the file and the field (never a JSON exception, never a path outside the
// trial's directory); a metrics line cut by a crash is passed over.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "tessera/error.h"
#include "tessera/trial/checkpoint_index.h"
#include "tessera/trial/metrics_report.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

struct TrialDir {
  fs::path path = fs::temp_directory_path() / ("tessera-index-" + std::to_string(::getpid()));
  TrialDir() { fs::create_directories(path); }
  ~TrialDir() { fs::remove_all(path); }
  void write(const std::string& text) const { std::ofstream(path / "checkpoints.json") << text; }
};

}  // namespace

TEST_CASE("CheckpointIndex: absent is empty; written and read back field for field") {
  const TrialDir dir;
  const trial::CheckpointIndex none = trial::CheckpointIndex::read(dir.path.string());
  CHECK(!none.latest);
  CHECK(none.checkpoints.empty());

  trial::CheckpointIndex index;
  index.checkpoints = {{"a1", 10, 2.5}, {"b2", 20, std::nullopt}, {"c3", 30, -1e-300}};
  index.latest = "c3";
  index.write(dir.path.string());
  const trial::CheckpointIndex back = trial::CheckpointIndex::read(dir.path.string());
  REQUIRE(back.checkpoints.size() == 3);
  CHECK(back.latest == "c3");
  CHECK(back.checkpoints[0].uuid == "a1");
  CHECK(back.checkpoints[0].batches == 10);
  CHECK(back.checkpoints[0].searcher_metric == 2.5);
  CHECK(!back.checkpoints[1].searcher_metric);
  CHECK(back.checkpoints[2].searcher_metric == -1e-300);
  CHECK(fs::directory_iterator(dir.path) != fs::directory_iterator());  // no draft left over
  for (const auto& e : fs::directory_iterator(dir.path))
    CHECK(e.path().filename() == "checkpoints.json");

  index.remove("c3");  // the latest: latest becomes null
  CHECK(!index.latest);
  CHECK(index.find("c3") == nullptr);
  CHECK(index.find("a1") != nullptr);
  index.write(dir.path.string());
  CHECK(!trial::CheckpointIndex::read(dir.path.string()).latest);
}

TEST_CASE("CheckpointIndex: a damaged file names the file and the field") {
  const TrialDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"{\"latest\": null, \"checkpoints\": [", "checkpoints.json"},
      {"[1, 2]", "not a checkpoint index"},
      {"{\"latest\": null}", "checkpoints"},
      {"{\"latest\": 7, \"checkpoints\": []}", "latest"},
      {"{\"latest\": null, \"checkpoints\": [3]}", "checkpoints[0] is not an object"},
      {"{\"latest\": null, \"checkpoints\": [{\"batches\": 1}]}", "uuid"},
      {"{\"latest\": null, \"checkpoints\": [{\"uuid\": \"x\", \"batches\": -1}]}", "batches"},
      {"{\"latest\": null, \"checkpoints\": [{\"uuid\": \"../../etc\", \"batches\": 1}]}",
       "not a directory name"},
      {"{\"latest\": null, \"checkpoints\": [{\"uuid\": \"..\", \"batches\": 1}]}",
       "not a directory name"},
      {"{\"latest\": \"gone\", \"checkpoints\": [{\"uuid\": \"x\", \"batches\": 1}]}",
       "latest checkpoint 'gone' is not in its list"},
      {"{\"latest\": null, \"checkpoints\": [{\"uuid\": \"x\", \"batches\": 1, "
       "\"searcher_metric\": \"low\"}]}",
       "searcher_metric"},
  };
  for (const auto& c : cases) {  // (no structured binding: clang's CAPTURE cannot take one)
    const char* text = c.first;
    const char* message = c.second;
    CAPTURE(text);
    dir.write(text);
    CHECK_THROWS_WITH_AS(trial::CheckpointIndex::read(dir.path.string()),
                         doctest::Contains(message), Error);
  }
}

TEST_CASE("MetricsReport: appended, tailed as the file grows, truncated at a checkpoint") {
  const TrialDir dir;
  const std::string d = dir.path.string();
  using Kind = trial::MetricsReport::Kind;
  trial::MetricsTail tail(d);
  CHECK(tail.read_new().empty());  // no file yet
  const trial::MetricsReport t1{Kind::Training, 5, 0, {{"loss", 2.5}}, {{{"loss", 2.5}}}, false};
  const trial::MetricsReport v1{Kind::Validation, 5, 0, {{"val_loss", 2.0}}, nullptr, true};
  t1.append_to(d);
  v1.append_to(d);
  std::vector<trial::MetricsReport> got = tail.read_new();
  REQUIRE(got.size() == 2);
  CHECK(got[0].kind == Kind::Training);
  CHECK(got[0].batches == 5);
  CHECK(got[0].metrics == nlohmann::json{{"loss", 2.5}});
  CHECK(got[0].batch_metrics == nlohmann::json::array({{{"loss", 2.5}}}));
  CHECK(!got[0].awaits_decision);
  CHECK(got[1].kind == Kind::Validation);
  CHECK(got[1].awaits_decision);
  CHECK(got[1].metrics["val_loss"] == 2.0);
  CHECK(tail.read_new().empty());  // nothing new

  // A line still being written (no newline yet) waits; one cut by a crash and other junk are
  // passed over.
  {
    std::ofstream out(dir.path / "metrics.jsonl", std::ios::app);
    out << "{\"type\": \"training\", \"batc\n[1]\n{\"type\": \"other\", \"batches\": 1}\n"
        << "{\"type\": \"training\", \"batches\": 10, \"metrics\": {}}\n{\"type\": \"vali";
  }
  got = tail.read_new();
  REQUIRE(got.size() == 1);
  CHECK(got[0].batches == 10);
  {
    std::ofstream out(dir.path / "metrics.jsonl", std::ios::app);
    out << "dation\", \"batches\": 10, \"epochs\": 1}\n";
  }
  got = tail.read_new();
  REQUIRE(got.size() == 1);
  CHECK(got[0].kind == Kind::Validation);
  CHECK(got[0].epochs == 1);

  // Resumed from the checkpoint at batch 5: the reports after it go (and the junk), the file
  // shrinks, and the tail reads it from the start again.
  trial::MetricsReport::truncate(d, 5);
  got = tail.read_new();
  REQUIRE(got.size() == 2);
  CHECK(got[0].batches == 5);
  CHECK(got[1].batches == 5);
  for (const auto& e : fs::directory_iterator(dir.path))
    CHECK(e.path().filename() == "metrics.jsonl");  // no draft left over
}
