// Reading what a trial process writes into its directory while it runs (trial_harness.h lists
// the files): new lines of metrics.jsonl; an ended trial's checkpoints deleted. Private to
// experiment/.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::experiment {

// metrics.jsonl read as it grows. A trial resumed from a checkpoint truncates the file to its
// reports up to the checkpoint and reports the rest again: the caller skips reports it has.
class MetricsTail {
 public:
  explicit MetricsTail(std::string path) : path_(std::move(path)) {}
  // The complete lines added since the last call (from the start again if the file shrank);
  // a line that is not JSON (cut by a crash, then truncated away) is skipped.
  std::vector<nlohmann::json> read_new();

 private:
  std::string path_;
  std::uintmax_t offset_ = 0;
};

// Drops checkpoint `uuid` from the ended trial's index (trial/checkpoint_index.h; atomically
// rewritten, "latest" becoming null if it was that one), then deletes its directory: for an
// ended trial's collected checkpoints. An unreadable index is an Error and nothing is deleted.
void delete_trial_checkpoint(const std::string& trial_dir, const std::string& uuid);

}  // namespace tessera::experiment
