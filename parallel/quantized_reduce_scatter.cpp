#include "quantized_reduce_scatter.h"

#include <string>
#include <vector>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/quantized_blocks.h"

namespace tessera::parallel {

namespace {

constexpr int64_t kBits = 4;

// `segments` equal segments of `packed` (int4 blocks), read back and summed in order, as
// float32 [segments / parts][n]: segment s adds into row s % rows.
Tensor dequantized_sum(const Tensor& packed, int64_t parts, int64_t rows, int64_t n) {
  Tensor values = Tensor::empty({parts * rows * n}, DType::Float32, packed.device());
  dequantize_blocks_into(values, packed, parts * rows, QuantizedReduceScatter::kBlock, kBits);
  Tensor sum = values.narrow(0, 0, rows * n).clone();
  for (int64_t p = 1; p < parts; ++p) sum.add_(values.narrow(0, p * rows * n, rows * n));
  return sum;
}

}  // namespace

std::shared_ptr<QuantizedReduceScatter> QuantizedReduceScatter::make(
    const std::shared_ptr<ProcessGroup>& group, int ranks_per_node, std::string* why) {
  const int world = group->size(), rank = group->rank();
  if (ranks_per_node <= 0 || ranks_per_node >= world) {
    *why = "all " + std::to_string(world) + " ranks are on one node";
    return nullptr;
  }
  if (world % ranks_per_node != 0) {
    *why = std::to_string(ranks_per_node) + " processes per host do not divide the " +
           std::to_string(world) + " ranks into whole nodes";
    return nullptr;
  }
  std::shared_ptr<QuantizedReduceScatter> q(new QuantizedReduceScatter);
  q->local_ = ranks_per_node;
  q->nodes_ = world / ranks_per_node;
  const int node = rank / q->local_, index = rank % q->local_;
  std::vector<int> intra, inter;
  for (int l = 0; l < q->local_; ++l) intra.push_back(node * q->local_ + l);
  for (int m = 0; m < q->nodes_; ++m) inter.push_back(m * q->local_ + index);
  q->intra_ = group->new_group(intra);
  q->inter_ = group->new_group(inter);
  return q;
}

void QuantizedReduceScatter::run(Tensor out, const Tensor& in) {
  NoGradGuard no_grad;
  const int64_t n = out.numel(), L = local_, N = nodes_;
  TS_CHECK(in.numel() == L * N * n, "qgZ: an input of ", in.numel(), " elements for ", L * N,
           " chunks of ", n);
  // Chunk q = m * L + l' goes to rank (m, l'): grouped by local index l' for the node's
  // all-to-all, [L][N][n].
  const Tensor by_local = in.reshape({N, L, n}).transpose(0, 1).contiguous();
  const Tensor sent = quantize_blocks(by_local, L * N, kBlock, kBits);
  Tensor received = Tensor::empty(sent.shape(), DType::Int32, sent.device());
  intra_->all_to_all(received, sent);
  // From each node mate, the N chunks of this rank's local index: their sum, [N][n].
  const Tensor node_sums = dequantized_sum(received, L, N, n);
  const Tensor across = quantize_blocks(node_sums, N, kBlock, kBits);
  Tensor gathered = Tensor::empty(across.shape(), DType::Int32, across.device());
  inter_->all_to_all(gathered, across);
  out.copy_(dequantized_sum(gathered, N, 1, n));
}

}  // namespace tessera::parallel
