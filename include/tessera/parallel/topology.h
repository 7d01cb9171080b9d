// ProcessTopology: ranks laid out on named axes, e.g. {"pipe", "data", "model"} with sizes
// {2, 2, 2}; the last axis varies fastest (rank = row-major index of its coordinates), as in
// DeepSpeed's PipeModelDataParallelTopology. Parallelism modules ask it which ranks share
// a group along an axis and build those groups from the world.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

class ProcessTopology {
 public:
  ProcessTopology(std::vector<std::string> axes, std::vector<int> dims);

  int world_size() const { return world_size_; }
  const std::vector<std::string>& axes() const { return axes_; }
  int dim(const std::string& axis) const;
  int rank_of(const std::map<std::string, int>& coords) const;
  std::map<std::string, int> coords_of(int rank) const;
  // Every group of ranks that differ only in `axis` (one list per setting of the others).
  std::vector<std::vector<int>> axis_groups(const std::string& axis) const;
  // Ranks whose coordinates match `fixed` on the axes it names.
  std::vector<int> filter(const std::map<std::string, int>& fixed) const;
  // Builds every group along `axis` from `world` (a collective call on every rank) and
  // returns the one containing world->rank().
  std::shared_ptr<ProcessGroup> group_for(ProcessGroup& world, const std::string& axis) const;

 private:
  size_t axis_index(const std::string& axis) const;
  std::vector<std::string> axes_;
  std::vector<int> dims_;
  int world_size_ = 1;
};

}  // namespace tessera::parallel
