#include "tessera/parallel/zero_checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace fs = std::filesystem;

std::string zero_shard_file(int rank, int tp_rank) {
  const std::string tp = tp_rank >= 0 ? "_tp" + std::to_string(tp_rank) : std::string();
  return "zero_rank" + std::to_string(rank) + tp + ".safetensors";
}

nlohmann::json zero_metadata(int stage, const ShardLayout& layout) {
  nlohmann::json params = nlohmann::json::array();
  for (const auto& e : layout.entries) params.push_back({e.name, e.shape});
  return {{"stage", stage}, {"world_size", layout.world}, {"params", params}};
}

namespace {

struct SavedLayout {
  int stage = 0;
  ShardLayout layout;
};

SavedLayout read_saved_layout(const fs::path& dir) {
  const fs::path meta_path = dir / "engine.json";
  TS_CHECK(fs::exists(meta_path), "'", meta_path.string(), "' does not exist (not a checkpoint?)");
  const nlohmann::json meta = io::JsonFields::parse_file(meta_path.string());
  const io::JsonFields root(meta, io::quoted(meta_path.string()));
  TS_CHECK(root.has("zero"), root.where(),
           " has no \"zero\" section: the checkpoint was saved without ZeRO (its "
           "model.safetensors is already whole)");
  const io::JsonFields z = root.object("zero");
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& p : z.array("params")) {
    TS_CHECK(p.is_array() && p.size() == 2 && p[0].is_string() && p[1].is_array(), z.where(),
             ": every 'params' entry must be [name, shape], found ", p.dump());
    Shape shape;
    int64_t numel = 1;
    for (const auto& d : p[1]) {
      TS_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (1ull << 40), z.where(), ": '",
               p[0].get<std::string>(), "' has an invalid shape ", p[1].dump());
      shape.push_back(d.get<int64_t>());
      TS_CHECK(!__builtin_mul_overflow(numel, shape.back(), &numel) && numel < (1ll << 40),
               z.where(), ": '", p[0].get<std::string>(), "' has a shape too large: ", p[1].dump());
    }
    shapes.emplace_back(p[0].get<std::string>(), shape);
  }
  return {static_cast<int>(z.integer("stage", 1, 3)),
          ShardLayout(shapes, static_cast<int>(z.integer("world_size", 1, 1 << 20)))};
}

fs::path shard_path(const fs::path& dir, int rank, int world, int tp_rank) {
  const fs::path f = dir / zero_shard_file(rank, tp_rank);
  TS_CHECK(fs::exists(f), "'", f.string(), "' is missing: the checkpoint was saved by ", world,
           " ranks and needs every rank's shard file");
  return f;
}

// The parameter a saved key belongs to ("<param>" or "<param>.<slot>"), or an error naming
// the file.
const ShardLayout::Entry* owner(const ShardLayout& layout, const std::string& key, bool& master,
                                const fs::path& file) {
  const ShardLayout::Entry* e = layout.owner_of(key, &master);
  TS_CHECK(e, "'", file.string(), "': tensor '", key, "' belongs to no parameter in engine.json");
  return e;
}

}  // namespace

ConsolidatedState consolidate_zero_checkpoint(const std::string& tag_dir, int tp_rank) {
  const fs::path dir(tag_dir);
  const SavedLayout saved = read_saved_layout(dir);
  const ShardLayout& layout = saved.layout;
  ConsolidatedState out;
  out.stage = saved.stage;
  out.world_size = layout.world;

  std::vector<std::map<std::string, Tensor>> shards;
  for (int r = 0; r < out.world_size; ++r)
    shards.push_back(io::load_safetensors(shard_path(dir, r, out.world_size, tp_rank).string()));
  auto it = shards[0].find("step");
  TS_CHECK(it != shards[0].end(), "'", (dir / zero_shard_file(0, tp_rank)).string(),
           "' has no 'step'");
  out.optimizer["step"] = it->second;
  // Every other key of rank 0's file names a parameter or "<parameter>.<slot>".
  for (const auto& [key, first] : shards[0]) {
    if (key == "step") continue;
    bool master = false;
    const ShardLayout::Entry* e = owner(layout, key, master, dir / zero_shard_file(0, tp_rank));
    Tensor full_padded = Tensor::empty({e->shard * out.world_size}, first.dtype());
    for (int r = 0; r < out.world_size; ++r) {
      auto s = shards[static_cast<size_t>(r)].find(key);
      TS_CHECK(s != shards[static_cast<size_t>(r)].end() && s->second.numel() == e->shard, "'",
               (dir / zero_shard_file(r, tp_rank)).string(), "': '", key, "' is missing or not ",
               e->shard, " elements");
      full_padded.narrow(0, r * e->shard, e->shard).copy_(s->second);
    }
    (master ? out.masters : out.optimizer)[key] =
        full_padded.narrow(0, 0, e->numel).view(e->shape).contiguous();
  }
  for (const auto& e : layout.entries)
    TS_CHECK(out.masters.count(e.name), "'", (dir / zero_shard_file(0, tp_rank)).string(),
             "' has no master values for '", e.name, "'");
  return out;
}

ConsolidatedState load_zero_partition(const std::string& tag_dir, const ShardLayout& layout,
                                      int rank, int tp_rank) {
  const fs::path dir(tag_dir);
  const SavedLayout saved = read_saved_layout(dir);
  const ShardLayout& old = saved.layout;
  ConsolidatedState out;
  out.stage = saved.stage;
  out.world_size = old.world;
  // Saved files are opened (mapped) only when a part of this rank's partition is in them.
  std::map<int, io::SafetensorsFile> files;
  auto file = [&](int q) -> const io::SafetensorsFile& {
    auto it = files.find(q);
    if (it == files.end())
      it = files.emplace(q, io::SafetensorsFile(shard_path(dir, q, old.world, tp_rank).string()))
               .first;
    return it->second;
  };
  // Every shard file lists the same keys: take them from one this rank needs anyway (its
  // own when the sizes agree).
  const io::SafetensorsFile& index =
      file(static_cast<int>(static_cast<int64_t>(rank) * old.world / layout.world));
  TS_CHECK(index.contains("step"), "'", index.path(), "' has no 'step'");
  out.optimizer["step"] = index.get("step");
  for (const std::string& key : index.names()) {
    if (key == "step") continue;
    bool master = false;
    const ShardLayout::Entry* e_old = owner(old, key, master, index.path());
    const ShardLayout::Entry* mine = layout.find(e_old->name);
    TS_CHECK(mine, "ZeRO checkpoint '", tag_dir, "': parameter '", e_old->name,
             "' is not in this model");
    const ShardLayout::Entry& e = *mine;
    TS_CHECK(e.numel == e_old->numel, "ZeRO checkpoint: '", e.name, "' has ", e_old->numel,
             " elements, the model's parameter ", e.numel);
    // This rank's elements [lo, hi) of the whole parameter, taken from the saved shards that
    // hold them.
    const int64_t lo = rank * e.shard, hi = lo + e.valid(rank);
    Tensor shard;
    for (int q = static_cast<int>(lo / std::max<int64_t>(e_old->shard, 1));
         lo < hi && q < old.world; ++q) {
      const int64_t q_lo = q * e_old->shard, q_hi = q_lo + e_old->valid(q);
      const int64_t a = std::max(lo, q_lo), b = std::min(hi, q_hi);
      if (a >= b) break;
      const io::SafetensorsFile& f = file(q);
      TS_CHECK(f.contains(key) && f.entry(key).shape == Shape{e_old->shard}, "'", f.path(), "': '",
               key, "' is missing or not ", e_old->shard, " elements");
      Tensor part = f.get_range(key, a - q_lo, b - a);
      if (!shard.defined()) shard = zeros({e.shard}, part.dtype());
      shard.narrow(0, a - lo, b - a).copy_(part);
    }
    if (!shard.defined()) shard = zeros({e.shard}, index.entry(key).dtype);
    (master ? out.masters : out.optimizer)[key] = shard;
  }
  for (const auto& e : layout.entries)
    TS_CHECK(out.masters.count(e.name), "'", index.path(), "' has no master values for '", e.name,
             "'");
  return out;
}

void gather_whole_state(ProcessGroup& group, const ShardLayout& layout,
                        const std::map<std::string, Tensor>& shards,
                        std::map<std::string, Tensor>& masters,
                        std::map<std::string, Tensor>& optimizer) {
  const int world = group.size();
  for (const auto& e : layout.entries) {
    const std::string prefix = e.name + ".";
    for (auto it = shards.lower_bound(e.name); it != shards.end(); ++it) {
      const std::string& key = it->first;
      const bool master = key == e.name;
      if (!master && key.compare(0, prefix.size(), prefix) != 0) break;
      if (!master && key.find('.', prefix.size()) != std::string::npos) continue;  // another's
      Tensor all = Tensor::empty({world * e.shard}, it->second.dtype(), it->second.device());
      group.all_gather(all, it->second.contiguous());
      Tensor whole = all.narrow(0, 0, e.numel).reshape(e.shape);
      (master ? masters[e.name] : optimizer[key]) = whole;
    }
  }
}

}  // namespace tessera::parallel
