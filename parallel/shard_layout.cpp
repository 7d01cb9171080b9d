#include "tessera/parallel/shard_layout.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera::parallel {

int64_t ShardLayout::Entry::valid(int r) const {
  return std::clamp<int64_t>(numel - static_cast<int64_t>(r) * shard, 0, shard);
}

ShardLayout::ShardLayout(const std::vector<std::pair<std::string, Shape>>& params, int world_size)
    : world(world_size) {
  TS_CHECK(world_size >= 1, "ShardLayout: world size ", world_size);
  for (const auto& [name, shape] : params) {
    Entry e;
    e.name = name;
    e.shape = shape;
    e.numel = numel_of(shape);
    e.shard = (e.numel + world - 1) / world;
    e.offset = partition_numel;
    partition_numel += e.shard;
    index_[e.name] = entries.size();
    entries.push_back(std::move(e));
  }
}

int64_t ShardLayout::total_numel() const {
  int64_t n = 0;
  for (const auto& e : entries) n += e.numel;
  return n;
}

const ShardLayout::Entry* ShardLayout::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries[it->second];
}

const ShardLayout::Entry* ShardLayout::owner_of(const std::string& key, bool* is_param) const {
  const Entry* e = find(key);
  if (is_param) *is_param = e != nullptr;
  if (e) return e;
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? nullptr : find(key.substr(0, dot));
}

}  // namespace tessera::parallel
