#include "tessera/experiment/experiment_store.h"

#include <sqlite3.h>

#include <chrono>

#include "tessera/error.h"

namespace tessera::experiment {

namespace {

constexpr int kSchemaVersion = 1;

const char* kSchema = R"(
CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL,
  config TEXT NOT NULL, searcher_state TEXT, created REAL NOT NULL);
CREATE TABLE trials (id INTEGER PRIMARY KEY,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id), request_id INTEGER NOT NULL,
  state TEXT NOT NULL, hparams TEXT NOT NULL, batches INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0, UNIQUE (experiment_id, request_id));
CREATE TABLE metrics (id INTEGER PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id),
  kind TEXT NOT NULL CHECK (kind IN ('training', 'validation')), batches INTEGER NOT NULL,
  time REAL NOT NULL, metrics TEXT NOT NULL);
CREATE INDEX metrics_by_trial ON metrics (trial_id, kind, batches);
CREATE TABLE checkpoints (uuid TEXT PRIMARY KEY, trial_id INTEGER NOT NULL REFERENCES trials(id),
  path TEXT NOT NULL, batches INTEGER NOT NULL, metrics TEXT);
CREATE TABLE transitions (id INTEGER PRIMARY KEY, entity TEXT NOT NULL, entity_id INTEGER NOT NULL,
  from_state TEXT NOT NULL, to_state TEXT NOT NULL, time REAL NOT NULL);
)";

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One prepared statement: bind by position (from 1), step, read columns (from 0).
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) : db_(db), path_(path) {
    sqlite3_stmt* s = nullptr;
    const int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr);
    stmt_.reset(s);
    TS_CHECK(rc == SQLITE_OK, "experiment store '", path, "': ", sqlite3_errmsg(db), " in: ", sql);
  }
  Statement& bind(int i, int64_t v) { return check(sqlite3_bind_int64(stmt_.get(), i, v)); }
  Statement& bind(int i, double v) { return check(sqlite3_bind_double(stmt_.get(), i, v)); }
  Statement& bind(int i, const std::string& v) {
    return check(
        sqlite3_bind_text(stmt_.get(), i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Statement& bind_null(int i) { return check(sqlite3_bind_null(stmt_.get(), i)); }
  bool step() {  // true: a row is ready
    const int rc = sqlite3_step(stmt_.get());
    TS_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, "experiment store '", path_,
             "': ", sqlite3_errmsg(db_));
    return rc == SQLITE_ROW;
  }
  void run() {
    while (step()) {
    }
  }
  int64_t integer(int c) const { return sqlite3_column_int64(stmt_.get(), c); }
  double real(int c) const { return sqlite3_column_double(stmt_.get(), c); }
  bool is_null(int c) const { return sqlite3_column_type(stmt_.get(), c) == SQLITE_NULL; }
  std::string text(int c) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_.get(), c));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_.get(), c)))
             : std::string();
  }
  nlohmann::json json(int c) const {
    return is_null(c) ? nlohmann::json() : nlohmann::json::parse(text(c));
  }

 private:
  Statement& check(int rc) {
    TS_CHECK(rc == SQLITE_OK, "experiment store '", path_, "': ", sqlite3_errmsg(db_));
    return *this;
  }
  struct Finalize {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
  };
  sqlite3* db_;
  const std::string& path_;
  std::unique_ptr<sqlite3_stmt, Finalize> stmt_;
};

void exec(sqlite3* db, const std::string& sql, const std::string& path) {
  char* message = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
  const std::string why = message ? message : "";
  sqlite3_free(message);
  TS_CHECK(rc == SQLITE_OK, "experiment store '", path, "': ", why);
}

}  // namespace

// BEGIN IMMEDIATE ... COMMIT, rolled back when the scope ends without commit().
class ExperimentStore::Transaction {
 public:
  explicit Transaction(ExperimentStore& s) : s_(s) {
    exec(s_.db_.get(), "BEGIN IMMEDIATE", s_.path_);
  }
  ~Transaction() {
    if (!done_) sqlite3_exec(s_.db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    exec(s_.db_.get(), "COMMIT", s_.path_);
    done_ = true;
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

 private:
  ExperimentStore& s_;
  bool done_ = false;
};

void ExperimentStore::Close::operator()(sqlite3* db) const {
  sqlite3_close(db);
}

ExperimentStore::ExperimentStore(const std::string& path) : path_(path) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  db_.reset(db);
  TS_CHECK(rc == SQLITE_OK, "experiment store '", path,
           "': cannot open: ", db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_busy_timeout(db, 10000);  // another process's transaction: wait for it
  exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", path);
  Statement version(db, "PRAGMA user_version", path_);
  version.step();
  const int64_t v = version.integer(0);
  if (v == 0) {
    Transaction t(*this);
    exec(db, kSchema, path);
    exec(db, "PRAGMA user_version=" + std::to_string(kSchemaVersion), path);
    t.commit();
  } else {
    TS_CHECK(v == kSchemaVersion, "experiment store '", path, "': schema version ", v,
             ", this tessera reads version ", kSchemaVersion);
  }
}

void ExperimentStore::transition(const std::string& entity, int64_t id, const std::string& from,
                                 const std::string& to) {
  Statement(db_.get(),
            "INSERT INTO transitions (entity, entity_id, from_state, to_state, time) "
            "VALUES (?, ?, ?, ?, ?)",
            path_)
      .bind(1, entity)
      .bind(2, id)
      .bind(3, from)
      .bind(4, to)
      .bind(5, now())
      .run();
}

bool is_final_state(const std::string& state) {
  return state == "COMPLETED" || state == "CANCELED" || state == "ERROR";
}

int64_t ExperimentStore::create_experiment(const std::string& name, const std::string& config) {
  Transaction t(*this);
  Statement(db_.get(),
            "INSERT INTO experiments (name, state, config, created) VALUES (?, 'ACTIVE', ?, ?)",
            path_)
      .bind(1, name)
      .bind(2, config)
      .bind(3, now())
      .run();
  const int64_t id = sqlite3_last_insert_rowid(db_.get());
  transition("experiment", id, "", "ACTIVE");
  t.commit();
  return id;
}

void ExperimentStore::set_experiment_state(int64_t experiment, const std::string& state) {
  Transaction t(*this);
  const std::string from = this->experiment(experiment).state;
  Statement(db_.get(), "UPDATE experiments SET state = ? WHERE id = ?", path_)
      .bind(1, state)
      .bind(2, experiment)
      .run();
  transition("experiment", experiment, from, state);
  t.commit();
}

void ExperimentStore::save_searcher_state(int64_t experiment, const nlohmann::json& state) {
  Transaction t(*this);
  Statement(db_.get(), "UPDATE experiments SET searcher_state = ? WHERE id = ?", path_)
      .bind(1, state.dump())
      .bind(2, experiment)
      .run();
  TS_CHECK(sqlite3_changes(db_.get()) == 1, "experiment store: no experiment ", experiment);
  t.commit();
}

int64_t ExperimentStore::add_trial(int64_t experiment, int64_t request_id,
                                   const nlohmann::json& hparams) {
  Transaction t(*this);
  Statement(db_.get(),
            "INSERT INTO trials (experiment_id, request_id, state, hparams) "
            "VALUES (?, ?, 'ACTIVE', ?)",
            path_)
      .bind(1, experiment)
      .bind(2, request_id)
      .bind(3, hparams.dump())
      .run();
  const int64_t id = sqlite3_last_insert_rowid(db_.get());
  transition("trial", id, "", "ACTIVE");
  t.commit();
  return id;
}

void ExperimentStore::set_trial_state(int64_t trial, const std::string& state) {
  Transaction t(*this);
  const std::string from = this->trial(trial).state;
  Statement(db_.get(), "UPDATE trials SET state = ? WHERE id = ?", path_)
      .bind(1, state)
      .bind(2, trial)
      .run();
  transition("trial", trial, from, state);
  t.commit();
}

void ExperimentStore::count_restart(int64_t trial) {
  Transaction t(*this);
  Statement(db_.get(), "UPDATE trials SET restarts = restarts + 1 WHERE id = ?", path_)
      .bind(1, trial)
      .run();
  TS_CHECK(sqlite3_changes(db_.get()) == 1, "experiment store: no trial ", trial);
  t.commit();
}

void ExperimentStore::report(int64_t trial, int64_t batches, const std::string& kind,
                             const nlohmann::json& metrics) {
  Transaction t(*this);
  Statement(db_.get(),
            "INSERT INTO metrics (trial_id, kind, batches, time, metrics) VALUES (?, ?, ?, ?, ?)",
            path_)
      .bind(1, trial)
      .bind(2, kind)
      .bind(3, batches)
      .bind(4, now())
      .bind(5, metrics.dump())
      .run();
  Statement(db_.get(), "UPDATE trials SET batches = MAX(batches, ?) WHERE id = ?", path_)
      .bind(1, batches)
      .bind(2, trial)
      .run();
  t.commit();
}

void ExperimentStore::report_training(int64_t trial, int64_t batches,
                                      const nlohmann::json& metrics) {
  report(trial, batches, "training", metrics);
}

void ExperimentStore::report_validation(int64_t trial, int64_t batches,
                                        const nlohmann::json& metrics) {
  report(trial, batches, "validation", metrics);
}

void ExperimentStore::add_checkpoint(const CheckpointRecord& c) {
  Transaction t(*this);
  Statement s(db_.get(),
              "INSERT INTO checkpoints (uuid, trial_id, path, batches, metrics) "
              "VALUES (?, ?, ?, ?, ?)",
              path_);
  s.bind(1, c.uuid).bind(2, c.trial_id).bind(3, c.path).bind(4, c.batches);
  if (c.metrics.is_null())
    s.bind_null(5);
  else
    s.bind(5, c.metrics.dump());
  s.run();
  t.commit();
}

void ExperimentStore::delete_checkpoint(const std::string& uuid) {
  Transaction t(*this);
  Statement(db_.get(), "DELETE FROM checkpoints WHERE uuid = ?", path_).bind(1, uuid).run();
  t.commit();
}

std::vector<ExperimentRecord> ExperimentStore::experiments() const {
  Statement s(db_.get(),
              "SELECT id, name, state, config, searcher_state FROM experiments ORDER BY id", path_);
  std::vector<ExperimentRecord> out;
  while (s.step()) out.push_back({s.integer(0), s.text(1), s.text(2), s.text(3), s.json(4)});
  return out;
}

std::vector<ExperimentRecord> ExperimentStore::experiment_rows() const {
  Statement s(db_.get(), "SELECT id, name, state FROM experiments ORDER BY id", path_);
  std::vector<ExperimentRecord> out;
  while (s.step()) out.push_back({s.integer(0), s.text(1), s.text(2), "", nullptr});
  return out;
}

ExperimentRecord ExperimentStore::experiment(int64_t id) const {
  Statement s(db_.get(),
              "SELECT id, name, state, config, searcher_state FROM experiments WHERE id = ?",
              path_);
  s.bind(1, id);
  TS_CHECK(s.step(), "experiment store '", path_, "': no experiment ", id);
  return {s.integer(0), s.text(1), s.text(2), s.text(3), s.json(4)};
}

namespace {
const char* kTrialColumns =
    "SELECT id, experiment_id, request_id, state, hparams, batches, restarts FROM trials ";

TrialRecord trial_of(const Statement& s) {
  return {s.integer(0), s.integer(1), s.integer(2), s.text(3),
          s.json(4),    s.integer(5), s.integer(6)};
}
}  // namespace

std::vector<TrialRecord> ExperimentStore::trials(int64_t experiment) const {
  Statement s(db_.get(), std::string(kTrialColumns) + "WHERE experiment_id = ? ORDER BY id", path_);
  s.bind(1, experiment);
  std::vector<TrialRecord> out;
  while (s.step()) out.push_back(trial_of(s));
  return out;
}

TrialRecord ExperimentStore::trial(int64_t id) const {
  Statement s(db_.get(), std::string(kTrialColumns) + "WHERE id = ?", path_);
  s.bind(1, id);
  TS_CHECK(s.step(), "experiment store '", path_, "': no trial ", id);
  return trial_of(s);
}

std::vector<MetricRecord> ExperimentStore::metrics(int64_t trial, const std::string& kind) const {
  Statement s(db_.get(),
              "SELECT trial_id, batches, kind, time, metrics FROM metrics WHERE trial_id = ? "
              "AND (? = '' OR kind = ?) ORDER BY id",
              path_);
  s.bind(1, trial).bind(2, kind).bind(3, kind);
  std::vector<MetricRecord> out;
  while (s.step()) out.push_back({s.integer(0), s.integer(1), s.text(2), s.real(3), s.json(4)});
  return out;
}

std::vector<CheckpointRecord> ExperimentStore::checkpoints(int64_t trial) const {
  Statement s(db_.get(),
              "SELECT uuid, path, trial_id, batches, metrics FROM checkpoints WHERE trial_id = ? "
              "ORDER BY batches",
              path_);
  s.bind(1, trial);
  std::vector<CheckpointRecord> out;
  while (s.step()) out.push_back({s.text(0), s.text(1), s.integer(2), s.integer(3), s.json(4)});
  return out;
}

std::vector<TransitionRecord> ExperimentStore::transitions(const std::string& entity,
                                                           int64_t id) const {
  Statement s(db_.get(),
              "SELECT entity, entity_id, from_state, to_state, time FROM transitions "
              "WHERE entity = ? AND entity_id = ? ORDER BY id",
              path_);
  s.bind(1, entity).bind(2, id);
  std::vector<TransitionRecord> out;
  while (s.step()) out.push_back({s.text(0), s.integer(1), s.text(2), s.text(3), s.real(4)});
  return out;
}

std::optional<double> ExperimentStore::best_validation(int64_t trial, const std::string& metric,
                                                       bool smaller_is_better) const {
  std::optional<double> best;
  for (const MetricRecord& m : metrics(trial, "validation")) {
    auto it = m.metrics.find(metric);
    if (it == m.metrics.end() || !it->is_number()) continue;
    const double v = it->get<double>();
    if (!best || (smaller_is_better ? v < *best : v > *best)) best = v;
  }
  return best;
}

std::string ExperimentStore::integrity_check() const {
  Statement s(db_.get(), "PRAGMA integrity_check", path_);
  std::string verdict = s.step() ? s.text(0) : "no answer";
  Statement fk(db_.get(), "PRAGMA foreign_key_check", path_);
  int64_t violations = 0;
  while (fk.step()) ++violations;
  if (violations) verdict += "; " + std::to_string(violations) + " foreign-key violations";
  return verdict;
}

}  // namespace tessera::experiment
