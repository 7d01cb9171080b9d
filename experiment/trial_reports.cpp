#include "trial_reports.h"

#include <filesystem>

#include "tessera/trial/checkpoint_index.h"

namespace fs = std::filesystem;

namespace tessera::experiment {

void delete_trial_checkpoint(const std::string& trial_dir, const std::string& uuid) {
  trial::CheckpointIndex index = trial::CheckpointIndex::read(trial_dir);
  index.remove(uuid);
  index.write(trial_dir);
  fs::remove_all(fs::path(trial_dir) / "checkpoints" / uuid);
}

}  // namespace tessera::experiment
