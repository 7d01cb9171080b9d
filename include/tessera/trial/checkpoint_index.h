// A trial directory's checkpoints.json: which checkpoints the trial keeps and which is the
// latest. The trial harness writes it (after each checkpoint, atomically); the experiment runner
// reads it to follow a running trial, and rewrites it only once the trial has ended (when its
// collected checkpoints are deleted). One struct, one reader, one writer for both.
//   {"latest": uuid or null, "checkpoints": [{"uuid", "batches", "searcher_metric"}]}
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::trial {

struct CheckpointIndexEntry {
  std::string uuid;
  int64_t batches = 0;                    // batches trained when it was written
  std::optional<double> searcher_metric;  // the searcher's metric at that batch, if validated
};

struct CheckpointIndex {
  static constexpr const char* kFileName = "checkpoints.json";

  std::optional<std::string> latest;
  std::vector<CheckpointIndexEntry> checkpoints;

  // trial_dir's index (empty when there is none yet); a file that is not an index is an Error
  // naming it and the field.
  static CheckpointIndex read(const std::string& trial_dir);
  // Written atomically: a reader sees the old index or the new one, never part of one.
  void write(const std::string& trial_dir) const;
  // Drops `uuid` from the list (and from latest).
  void remove(const std::string& uuid);
  const CheckpointIndexEntry* find(const std::string& uuid) const;
};

}  // namespace tessera::trial
