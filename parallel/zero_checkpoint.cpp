#include "tessera/parallel/zero_checkpoint.h"

#include <filesystem>

#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace fs = std::filesystem;

std::string zero_shard_file(int rank) {
  return "zero_rank" + std::to_string(rank) + ".safetensors";
}

nlohmann::json zero_metadata(int stage, const ShardLayout& layout) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& e : layout.entries) params.push_back({e.name, e.shape});
  return {{"stage", stage}, {"world_size", layout.world}, {"params", params}};
}

ConsolidatedState consolidate_zero_checkpoint(const std::string& tag_dir) {
  const fs::path dir(tag_dir);
  const fs::path meta_path = dir / "engine.json";
  TS_CHECK(fs::exists(meta_path), "'", meta_path.string(), "' does not exist (not a checkpoint?)");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(io::read_text_file(meta_path.string()));
  } catch (const nlohmann::json::exception& e) {
    fail("'", meta_path.string(), "': ", e.what());
  }
  TS_CHECK(meta.contains("zero"), "'", meta_path.string(),
           "' has no \"zero\" section: the checkpoint was saved without ZeRO (its "
           "model.safetensors is already whole)");
  const auto& z = meta["zero"];
  ConsolidatedState out;
  out.stage = z.at("stage").get<int>();
  out.world_size = z.at("world_size").get<int>();
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& p : z.at("params"))
    shapes.emplace_back(p[0].get<std::string>(), p[1].get<Shape>());
  const ShardLayout layout(shapes, out.world_size);

  std::vector<std::map<std::string, Tensor>> shards;
  for (int r = 0; r < out.world_size; ++r) {
    const fs::path f = dir / zero_shard_file(r);
    TS_CHECK(fs::exists(f), "'", f.string(), "' is missing: the checkpoint was saved by ",
             out.world_size, " ranks and needs every rank's shard file");
    shards.push_back(io::load_safetensors(f.string()));
  }
  auto it = shards[0].find("step");
  TS_CHECK(it != shards[0].end(), "'", (dir / zero_shard_file(0)).string(), "' has no 'step'");
  out.optimizer["step"] = it->second;
  // Every other key of rank 0's file names a parameter or "<parameter>.<slot>".
  std::map<std::string, const ShardLayout::Entry*> by_name;
  for (const auto& e : layout.entries) by_name[e.name] = &e;
  for (const auto& [key, first] : shards[0]) {
    if (key == "step") continue;
    auto p = by_name.find(key);
    const bool master = p != by_name.end();
    if (!master) {
      const size_t dot = key.rfind('.');
      if (dot != std::string::npos) p = by_name.find(key.substr(0, dot));
      TS_CHECK(p != by_name.end(), "'", (dir / zero_shard_file(0)).string(), "': tensor '", key,
               "' belongs to no parameter in engine.json");
    }
    const ShardLayout::Entry* e = p->second;
    Tensor full_padded = Tensor::empty({e->shard * out.world_size}, first.dtype());
    for (int r = 0; r < out.world_size; ++r) {
      auto s = shards[static_cast<size_t>(r)].find(key);
      TS_CHECK(s != shards[static_cast<size_t>(r)].end() && s->second.numel() == e->shard, "'",
               (dir / zero_shard_file(r)).string(), "': '", key, "' is missing or not ", e->shard,
               " elements");
      full_padded.narrow(0, r * e->shard, e->shard).copy_(s->second);
    }
    (master ? out.masters : out.optimizer)[key] =
        full_padded.narrow(0, 0, e->numel).view(e->shape).contiguous();
  }
  for (const auto& e : layout.entries)
    TS_CHECK(out.masters.count(e.name), "'", (dir / zero_shard_file(0)).string(),
             "' has no master values for '", e.name, "'");
  return out;
}

}  // namespace tessera::parallel
