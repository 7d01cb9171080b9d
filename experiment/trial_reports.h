// An ended trial's checkpoints deleted from its directory (trial_harness.h lists the files; the
// trial's own readers and writers: trial/checkpoint_index.h, trial/metrics_report.h). Private
// to experiment/.
#pragma once
#include <string>

namespace tessera::experiment {

// Drops checkpoint `uuid` from the ended trial's index (trial/checkpoint_index.h; atomically
// rewritten, "latest" becoming null if it was that one), then deletes its directory: for an
// ended trial's collected checkpoints. An unreadable index is an Error and nothing is deleted.
void delete_trial_checkpoint(const std::string& trial_dir, const std::string& uuid);

}  // namespace tessera::experiment
