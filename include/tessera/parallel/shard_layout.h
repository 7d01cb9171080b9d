// How ZeRO splits parameters over the ranks of a data-parallel group: every parameter is
// cut into `world` equal shards of ceil(numel / world) elements (the last one zero-padded);
// a rank's partition is its shard of every parameter, one after another, in one flat buffer.
// Layouts of different world sizes convert through the full tensors (checkpoint resharding).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/shape.h"

namespace tessera::parallel {

struct ShardLayout {
  struct Entry {
    std::string name;
    Shape shape;
    int64_t numel = 0;
    int64_t shard = 0;   // elements per rank (padded)
    int64_t offset = 0;  // where this parameter's shard starts in a partition
    // Elements of the real tensor in rank r's shard (the rest is padding).
    int64_t valid(int r) const;
  };
  int world = 1;
  std::vector<Entry> entries;
  int64_t partition_numel = 0;

  ShardLayout() = default;
  ShardLayout(const std::vector<std::pair<std::string, Shape>>& params, int world_size);
  int64_t total_numel() const;                       // Ψ, without padding
  const Entry* find(const std::string& name) const;  // null when no parameter has that name
  // The parameter a state key belongs to: the parameter itself ("<param>", *is_param set)
  // or one of its optimizer slots ("<param>.<slot>"; slot names have no dot); null if none.
  const Entry* owner_of(const std::string& key, bool* is_param = nullptr) const;

 private:
  std::map<std::string, size_t> index_;  // name -> position in entries
};

}  // namespace tessera::parallel
