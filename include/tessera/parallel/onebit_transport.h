// The exchange of 1-bit compressed momentum (optim::compressed_all_reduce) over a process
// group: the all-to-all of packed signs as point-to-point pairs, the all-gathers as the
// group's all_gather, each counted by the group's comms logger.
#pragma once
#include <memory>

#include "tessera/optim/compressed_allreduce.h"
#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

class ProcessGroupOneBitTransport : public optim::OneBitTransport {
 public:
  explicit ProcessGroupOneBitTransport(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)) {}
  int rank() const override { return group_->rank(); }
  int world() const override { return group_->size(); }
  std::vector<std::vector<int32_t>> all_to_all(
      const std::vector<std::vector<int32_t>>& send) override;
  std::vector<std::vector<int32_t>> all_gather(const std::vector<int32_t>& mine) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace tessera::parallel
