// A process group that only has a size: layers built over it have a rank's shapes (rank 0's;
// every rank's are alike), and any communication is an error. estimate-memory builds the
// run's own tensor-parallel layers and pipeline stages over it, so a prediction cannot drift
// from what the layers hold.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

class ShapeOnlyGroup : public ProcessGroup {
 public:
  explicit ShapeOnlyGroup(int size);
  int rank() const override { return 0; }
  int size() const override { return size_; }
  std::string backend() const override { return "shape-only"; }
  Work all_reduce_async(Tensor, ReduceOp) override { refuse(); }
  Work reduce_scatter_async(Tensor, Tensor, ReduceOp) override { refuse(); }
  Work all_gather_async(Tensor, Tensor) override { refuse(); }
  Work all_to_all_async(Tensor, Tensor) override { refuse(); }
  Work broadcast_async(Tensor, int) override { refuse(); }
  Work send_async(Tensor, int, int) override { refuse(); }
  Work recv_async(Tensor, int, int) override { refuse(); }
  Work barrier_async() override { refuse(); }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>&) override { refuse(); }

 private:
  [[noreturn]] static void refuse();
  int size_;
};

}  // namespace tessera::parallel
