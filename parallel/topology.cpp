#include "tessera/parallel/topology.h"

#include "tessera/error.h"

namespace tessera::parallel {

ProcessTopology::ProcessTopology(std::vector<std::string> axes, std::vector<int> dims)
    : axes_(std::move(axes)), dims_(std::move(dims)) {
  TS_CHECK(!axes_.empty() && axes_.size() == dims_.size(), "ProcessTopology: ", axes_.size(),
           " axis names for ", dims_.size(), " sizes");
  for (size_t i = 0; i < axes_.size(); ++i) {
    TS_CHECK(dims_[i] >= 1, "ProcessTopology: axis '", axes_[i], "' has size ", dims_[i]);
    for (size_t j = 0; j < i; ++j)
      TS_CHECK(axes_[i] != axes_[j], "ProcessTopology: axis '", axes_[i], "' given twice");
    world_size_ *= dims_[i];
  }
}

size_t ProcessTopology::axis_index(const std::string& axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i] == axis) return i;
  std::string known;
  for (const auto& a : axes_) known += (known.empty() ? "" : ", ") + a;
  fail("ProcessTopology: no axis '", axis, "' (axes: ", known, ")");
}

int ProcessTopology::dim(const std::string& axis) const {
  return dims_[axis_index(axis)];
}

int ProcessTopology::rank_of(const std::map<std::string, int>& coords) const {
  TS_CHECK(coords.size() == axes_.size(), "ProcessTopology.rank_of: expected ", axes_.size(),
           " coordinates, got ", coords.size());
  int rank = 0;
  for (size_t i = 0; i < axes_.size(); ++i) {
    auto it = coords.find(axes_[i]);
    TS_CHECK(it != coords.end(), "ProcessTopology.rank_of: no coordinate for axis '", axes_[i],
             "'");
    TS_CHECK(it->second >= 0 && it->second < dims_[i], "ProcessTopology.rank_of: ", axes_[i], "=",
             it->second, " is outside [0, ", dims_[i], ")");
    rank = rank * dims_[i] + it->second;
  }
  return rank;
}

std::map<std::string, int> ProcessTopology::coords_of(int rank) const {
  TS_CHECK(rank >= 0 && rank < world_size_, "ProcessTopology.coords_of: rank ", rank,
           " is outside a world of ", world_size_);
  std::map<std::string, int> c;
  for (size_t i = axes_.size(); i-- > 0;) {
    c[axes_[i]] = rank % dims_[i];
    rank /= dims_[i];
  }
  return c;
}

std::vector<int> ProcessTopology::filter(const std::map<std::string, int>& fixed) const {
  std::vector<int> out;
  for (int r = 0; r < world_size_; ++r) {
    const auto c = coords_of(r);
    bool match = true;
    for (const auto& [axis, v] : fixed) match &= c.at(axes_[axis_index(axis)]) == v;
    if (match) out.push_back(r);
  }
  return out;
}

std::vector<std::vector<int>> ProcessTopology::axis_groups(const std::string& axis) const {
  const size_t a = axis_index(axis);
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size_; ++r) {
    if (coords_of(r).at(axes_[a]) != 0) continue;  // one group per first member
    auto fixed = coords_of(r);
    fixed.erase(axes_[a]);
    groups.push_back(filter(fixed));
  }
  return groups;
}

std::shared_ptr<ProcessGroup> ProcessTopology::group_for(ProcessGroup& world,
                                                         const std::string& axis) const {
  TS_CHECK(world.size() == world_size_, "ProcessTopology: the world has ", world.size(),
           " ranks, the topology ", world_size_);
  std::shared_ptr<ProcessGroup> mine;
  for (const auto& ranks : axis_groups(axis)) {
    auto g = world.new_group(ranks);
    if (g) mine = g;
  }
  return mine;
}

}  // namespace tessera::parallel
