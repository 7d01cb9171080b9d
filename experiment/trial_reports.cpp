#include "trial_reports.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tessera/io/files.h"

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

nlohmann::json read_checkpoint_index(const std::string& trial_dir) {
  nlohmann::json empty = {{"latest", nullptr}, {"checkpoints", nlohmann::json::array()}};
  std::ifstream in(fs::path(trial_dir) / "checkpoints.json");
  if (!in) return empty;
  auto j = nlohmann::json::parse(in, nullptr, false);  // written atomically: whole or absent
  if (j.is_discarded() || !j.is_object() || !j.contains("checkpoints") ||
      !j["checkpoints"].is_array())
    return empty;
  return j;
}

void delete_trial_checkpoint(const std::string& trial_dir, const std::string& uuid) {
  nlohmann::json index = read_checkpoint_index(trial_dir);
  auto& list = index["checkpoints"];
  list.erase(std::remove_if(list.begin(), list.end(),
                            [&](const nlohmann::json& e) { return e.value("uuid", "") == uuid; }),
             list.end());
  if (index["latest"] == uuid) index["latest"] = nullptr;
  io::write_file_atomically((fs::path(trial_dir) / "checkpoints.json").string(),
                            [&](std::ostream& out) { out << index.dump(1) << "\n"; });
  fs::remove_all(fs::path(trial_dir) / "checkpoints" / uuid);
}

}  // namespace tessera::experiment
