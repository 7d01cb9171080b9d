// checkpoints.json, the contract between a trial and the experiment that follows it: what one
// side writes the other reads back field for field, and a damaged file is an error naming the
// file and the field (never a JSON exception, never a path outside the trial's directory).
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "tessera/error.h"
#include "tessera/trial/checkpoint_index.h"

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
  for (const auto& [text, message] : cases) {
    CAPTURE(text);
    dir.write(text);
    CHECK_THROWS_WITH_AS(trial::CheckpointIndex::read(dir.path.string()),
                         doctest::Contains(message), Error);
  }
}
