// A trial directory's metrics.jsonl: one line per training report and validation. The trial
// harness appends them (and, resuming from a checkpoint, drops the lines after it); the
// experiment runner reads them as the file grows. One struct, one writer, one reader for both:
//   {"type": "training" | "validation", "batches", "epochs", "metrics": {...},
//    "batch_metrics": [...] (training), "awaits_decision": true (a validation the trial waits on)}
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::trial {

struct MetricsReport {
  static constexpr const char* kFileName = "metrics.jsonl";
  enum class Kind { Training, Validation };

  Kind kind = Kind::Training;
  int64_t batches = 0;  // batches trained when it was reported
  int64_t epochs = 0;
  nlohmann::json metrics = nlohmann::json::object();  // name -> value (a reducer's may be any)
  nlohmann::json batch_metrics;                       // training: each batch's metrics
  bool awaits_decision = false;  // validation: the trial waits for "continue" or "stop"

  nlohmann::json to_json() const;
  // The report a line holds; nullopt for a line that is not one (cut by a crash, say).
  static std::optional<MetricsReport> parse(const std::string& line);

  // Appends one line to trial_dir's file (a whole line per write).
  void append_to(const std::string& trial_dir) const;
  // Keeps the reports up to `batches` (a trial resumed from the checkpoint at that batch
  // reports the rest again), rewriting the file atomically; lines that are not reports go.
  static void truncate(const std::string& trial_dir, int64_t batches);
};

// trial_dir's metrics.jsonl read as it grows. A resumed trial truncates the file (see above):
// read from the start again when it shrank; the caller skips reports it has.
class MetricsTail {
 public:
  explicit MetricsTail(const std::string& trial_dir);
  // The complete reports added since the last call (a line without its newline yet waits).
  std::vector<MetricsReport> read_new();

 private:
  std::string path_;
  std::uintmax_t offset_ = 0;
};

}  // namespace tessera::trial
