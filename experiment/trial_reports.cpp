#include "trial_reports.h"

#include <filesystem>
#include <fstream>

#include "tessera/trial/checkpoint_index.h"

namespace fs = std::filesystem;

namespace tessera::experiment {

std::vector<nlohmann::json> MetricsTail::read_new() {
  std::vector<nlohmann::json> out;
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path_, ec);
  if (ec) return out;
  if (size < offset_) offset_ = 0;  // truncated by a resumed trial
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: a line still being written
    offset_ += line.size() + 1;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

void delete_trial_checkpoint(const std::string& trial_dir, const std::string& uuid) {
  trial::CheckpointIndex index = trial::CheckpointIndex::read(trial_dir);
  index.remove(uuid);
  index.write(trial_dir);
  fs::remove_all(fs::path(trial_dir) / "checkpoints" / uuid);
}

}  // namespace tessera::experiment
