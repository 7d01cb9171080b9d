#include "op_util.h"

namespace tessera::detail {

Tensor run1(Kernel k, const std::vector<TensorBase>& inputs, const Shape& out_shape,
            DType out_dtype, DType dispatch_dtype, const KernelAttrs& attrs) {
  const Device device = inputs.empty() ? Device::cpu() : inputs[0].device();
  Tensor out = Tensor::empty(out_shape, out_dtype, device);
  TensorBase outs[1] = {out};
  run_kernel(k, device, dispatch_dtype, inputs, outs, attrs);
  return out;
}

Tensor sum_to_shape(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
  Tensor s = dims.empty() ? grad : sum(grad, dims, true);
  return s.reshape(shape);
}

void check_same_device(const char* op, const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.device() == tensors[0].device()) continue;
    fail(op, ": expected all tensors on one device, got ", tensors[0].describe(), " and ",
         t.describe());
  }
}

void check_floating(const char* op, const Tensor& t) {
  TS_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ", t.describe());
}

GeneratorState reserve_dropout_counters(uint64_t elements, Generator* gen, SequenceShard& seq) {
  const DataParallelShard shard = data_parallel_shard();
  seq = sequence_shard();
  const uint64_t per_rank = elements * static_cast<uint64_t>(seq.world);
  GeneratorState s =
      (gen ? *gen : default_generator()).reserve(per_rank * static_cast<uint64_t>(shard.world));
  s.offset += static_cast<uint64_t>(shard.rank) * per_rank;
  return s;
}

Tensor over_dropout_blocks(const char* op, const Tensor& x, Generator* gen,
                           const std::function<Tensor(int64_t row, GeneratorState)>& block) {
  // Under data parallelism: the counters of the whole global batch, this rank's slice of them;
  // under sequence parallelism also of the whole sequence, this rank's chunk of each row.
  const auto n = static_cast<uint64_t>(x.numel());
  SequenceShard seq;
  const GeneratorState s = reserve_dropout_counters(n, gen, seq);
  if (seq.world == 1) return block(-1, s);
  TS_CHECK(x.dim() >= 2, op, " under sequence parallelism: ", x.describe(),
           " is not [batch, sequence, ...]");
  // Row b's chunk is the seq.rank-th of the row's seq.world chunks.
  const int64_t rows = x.size(0);
  const uint64_t chunk = rows > 0 ? n / static_cast<uint64_t>(rows) : 0;
  std::vector<Tensor> out;
  for (int64_t b = 0; b < rows; ++b) {
    GeneratorState row = s;
    row.offset += (static_cast<uint64_t>(b) * static_cast<uint64_t>(seq.world) +
                   static_cast<uint64_t>(seq.rank)) *
                  chunk;
    out.push_back(block(b, row));
  }
  return cat(out, 0);
}

}  // namespace tessera::detail
