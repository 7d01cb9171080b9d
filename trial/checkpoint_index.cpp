#include "tessera/trial/checkpoint_index.h"

#include <algorithm>
#include <filesystem>

#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"

namespace tessera::trial {

namespace fs = std::filesystem;

CheckpointIndex CheckpointIndex::read(const std::string& trial_dir) {
  const fs::path path = fs::path(trial_dir) / kFileName;
  CheckpointIndex index;
  if (!fs::exists(path)) return index;
  const nlohmann::json j = io::JsonFields::parse_file(path.string());
  const std::string where = io::quoted(path.string());
  TS_CHECK(j.is_object(), where, ": not a checkpoint index (not a JSON object)");
  const io::JsonFields f(j, where);
  if (f.has("latest") && !j["latest"].is_null()) index.latest = f.string("latest");
  const nlohmann::json& list = f.array("checkpoints");
  for (size_t i = 0; i < list.size(); ++i) {
    TS_CHECK(list[i].is_object(), where, ": checkpoints[", i, "] is not an object");
    const io::JsonFields e(list[i], where + ": checkpoints[" + std::to_string(i) + "]");
    CheckpointIndexEntry entry{e.string("uuid"), e.integer("batches", 0), std::nullopt};
    TS_CHECK(!entry.uuid.empty() && entry.uuid.find_first_of("/\\") == std::string::npos &&
                 entry.uuid != "." && entry.uuid != "..",
             where, ": checkpoints[", i, "] has uuid '", entry.uuid,
             "', which is not a directory name");
    if (e.has("searcher_metric") && !list[i]["searcher_metric"].is_null())
      entry.searcher_metric = e.number("searcher_metric");
    index.checkpoints.push_back(std::move(entry));
  }
  TS_CHECK(!index.latest || index.find(*index.latest), where, ": its latest checkpoint '",
           *index.latest, "' is not in its list");
  return index;
}

void CheckpointIndex::write(const std::string& trial_dir) const {
  nlohmann::json list = nlohmann::json::array();
  for (const CheckpointIndexEntry& e : checkpoints)
    list.push_back({{"uuid", e.uuid},
                    {"batches", e.batches},
                    {"searcher_metric",
                     e.searcher_metric ? nlohmann::json(*e.searcher_metric) : nlohmann::json()}});
  const nlohmann::json j = {{"latest", latest ? nlohmann::json(*latest) : nlohmann::json()},
                            {"checkpoints", list}};
  io::write_file_atomically((fs::path(trial_dir) / kFileName).string(),
                            [&](std::ostream& out) { out << j.dump(1) << "\n"; });
}

void CheckpointIndex::remove(const std::string& uuid) {
  std::erase_if(checkpoints, [&](const CheckpointIndexEntry& e) { return e.uuid == uuid; });
  if (latest == uuid) latest.reset();
}

const CheckpointIndexEntry* CheckpointIndex::find(const std::string& uuid) const {
  const auto it = std::find_if(checkpoints.begin(), checkpoints.end(),
                               [&](const CheckpointIndexEntry& e) { return e.uuid == uuid; });
  return it == checkpoints.end() ? nullptr : &*it;
}

}  // namespace tessera::trial
