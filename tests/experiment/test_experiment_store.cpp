// The SQLite experiment store: what is written reads back (and after reopening), errors name
// the file, and a writer killed (SIGKILL) at random moments leaves a sound database in which
// every call happened wholly or not at all.
#include <doctest/doctest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "tessera/error.h"
#include "tessera/experiment/experiment_store.h"

using namespace tessera;
using experiment::ExperimentStore;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("tessera-store-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("experiment store: experiments, trials, metrics, checkpoints, transitions") {
  TempDir dir;
  const std::string db = (dir.path / "exp.db").string();
  int64_t e = 0, t1 = 0, t2 = 0;
  {
    ExperimentStore s(db);
    e = s.create_experiment("asha", "name: asha\n");
    t1 = s.add_trial(e, 1, {{"lr", 0.01}});
    t2 = s.add_trial(e, 2, {{"lr", 0.1}});
    s.report_training(t1, 10, {{"loss", 3.0}});
    s.report_validation(t1, 10, {{"validation_loss", 2.5}});
    s.report_validation(t1, 20, {{"validation_loss", 2.25}});
    s.report_validation(t2, 10, {{"validation_loss", 2.75}});
    s.add_checkpoint({"uuid-a", "ckpt/a", t1, 20, {{"validation_loss", 2.25}}});
    s.add_checkpoint({"uuid-b", "ckpt/b", t2, 10, nullptr});
    s.delete_checkpoint("uuid-b");
    s.set_trial_state(t2, "STOPPING_COMPLETED");
    s.set_trial_state(t2, "COMPLETED");
    s.count_restart(t1);
    s.save_searcher_state(e, {{"rungs", {1, 2}}});
    s.set_experiment_state(e, "PAUSED");
  }
  ExperimentStore s(db);  // reopened: everything is there
  REQUIRE(s.experiments().size() == 1);
  const auto exp = s.experiment(e);
  CHECK(exp.name == "asha");
  CHECK(exp.state == "PAUSED");
  CHECK(exp.config == "name: asha\n");
  CHECK(exp.searcher_state == nlohmann::json{{"rungs", {1, 2}}});
  const auto trials = s.trials(e);
  REQUIRE(trials.size() == 2);
  CHECK(trials[0].hparams == nlohmann::json{{"lr", 0.01}});
  CHECK(trials[0].batches == 20);
  CHECK(trials[0].restarts == 1);
  CHECK(trials[1].state == "COMPLETED");
  CHECK(s.metrics(t1).size() == 3);
  CHECK(s.metrics(t1, "validation").size() == 2);
  CHECK(s.metrics(t1, "training")[0].metrics == nlohmann::json{{"loss", 3.0}});
  CHECK(s.best_validation(t1, "validation_loss", true) == 2.25);
  CHECK(s.best_validation(t1, "validation_loss", false) == 2.5);
  CHECK(!s.best_validation(t1, "accuracy", true));
  REQUIRE(s.checkpoints(t1).size() == 1);
  CHECK(s.checkpoints(t1)[0].path == "ckpt/a");
  CHECK(s.checkpoints(t2).empty());
  const auto moves = s.transitions("trial", t2);
  REQUIRE(moves.size() == 3);
  CHECK((moves[0].from == "" && moves[0].to == "ACTIVE"));
  CHECK((moves[2].from == "STOPPING_COMPLETED" && moves[2].to == "COMPLETED"));
  CHECK(s.transitions("experiment", e).back().to == "PAUSED");
  CHECK(s.integrity_check() == "ok");
  CHECK_THROWS_WITH_AS(s.trial(99), doctest::Contains("no trial 99"), Error);
  CHECK_THROWS_WITH_AS(s.add_trial(e, 1, {}), doctest::Contains("UNIQUE"), Error);
  CHECK_THROWS_WITH_AS(s.report_training(77, 1, {}), doctest::Contains("FOREIGN KEY"), Error);
}

TEST_CASE("experiment store: a file that is not a store is an error naming it") {
  TempDir dir;
  const std::string junk = (dir.path / "junk.db").string();
  std::ofstream(junk) << "not a database, just text that is long enough to have a header....";
  CHECK_THROWS_WITH_AS(ExperimentStore{junk}, doctest::Contains(junk.c_str()), Error);
  const std::string other = (dir.path / "other.db").string();
  { ExperimentStore s(other); }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(other.c_str(), &db) == SQLITE_OK);
  sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  CHECK_THROWS_WITH_AS(ExperimentStore{other}, doctest::Contains("schema version 99"), Error);
  CHECK_THROWS_WITH_AS(ExperimentStore{(dir.path / "missing" / "x.db").string()},
                       doctest::Contains("cannot open"), Error);
}

TEST_CASE("experiment store: a writer killed at random moments leaves every call whole") {
  TempDir dir;
  const std::string db = (dir.path / "kill.db").string();
  int64_t trial = 0;
  {
    ExperimentStore s(db);
    trial = s.add_trial(s.create_experiment("kill", "x"), 1, {{"lr", 1}});
  }
  std::mt19937 delays(42);
  for (int round = 0; round < 6; ++round) {
    CAPTURE(round);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // writes until killed: each report moves batches with it, atomically
      try {
        ExperimentStore s(db);
        for (int64_t i = s.trial(trial).batches + 1;; ++i) {
          s.report_validation(trial, i, {{"i", i}});
          s.set_trial_state(trial, i % 2 ? "PAUSED" : "ACTIVE");
        }
      } catch (...) {
      }
      ::_exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + delays() % 80));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFSIGNALED(status));
    ExperimentStore s(db);
    CHECK(s.integrity_check() == "ok");
    const auto reports = s.metrics(trial, "validation");
    const auto t = s.trial(trial);
    // The batches column moved with its report: it equals the last report's.
    CHECK(t.batches == (reports.empty() ? 0 : reports.back().batches));
    for (size_t k = 0; k < reports.size(); ++k)
      CHECK(reports[k].metrics["i"] == reports[k].batches);
    // The state is the last transition's.
    CHECK(s.transitions("trial", trial).back().to == t.state);
  }
  ExperimentStore s(db);
  CHECK(s.metrics(trial).size() > 0);  // the writers got somewhere
}
