// Helpers shared by the op implementations (ops_*.cpp): kernel calls with fresh outputs,
// broadcasting gradients back to input shapes, argument checks.
#pragma once
#include <functional>
#include <vector>

#include "tessera/autograd/node.h"
#include "tessera/dispatch.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

namespace tessera::detail {

// Runs `k` on `inputs` (dispatching on `dtype` and the first input's device) into one
// freshly allocated contiguous output.
Tensor run1(Kernel k, const std::vector<TensorBase>& inputs, const Shape& out_shape,
            DType out_dtype, DType dispatch_dtype, const KernelAttrs& attrs = {});

// Sums `grad` over the dims that broadcasting expanded, giving a tensor of `shape`.
Tensor sum_to_shape(const Tensor& grad, const Shape& shape);

void check_same_device(const char* op, const std::vector<Tensor>& tensors);
void check_floating(const char* op, const Tensor& t);

// The compute dtype of a 16-bit float's kernels (float32), else the dtype itself.
inline DType compute_dtype(DType t) {
  return is_reduced_float(t) ? DType::Float32 : t;
}

// A tensor with no autograd history that shares storage (for saving outputs in a node
// without creating a reference cycle output -> node -> output).
inline Tensor untracked(const Tensor& t) {
  return t.defined() ? t.detach() : t;
}

// Reserves the dropout counters of a tensor of `elements` as one process would draw them:
// under data parallelism those of the whole global batch, under sequence (or head)
// parallelism those of the whole row; returns this rank's first counter. `seq` receives the
// shard whose chunk of each row this rank draws.
GeneratorState reserve_dropout_counters(uint64_t elements, Generator* gen, SequenceShard& seq);

// Runs a dropout-like op over `x` as dropout draws its counters: `block(row, state)` once for
// the whole of x (row -1), or under sequence parallelism once per row (that row's chunk of
// one process's counters), the rows' results concatenated.
Tensor over_dropout_blocks(const char* op, const Tensor& x, Generator* gen,
                           const std::function<Tensor(int64_t row, GeneratorState)>& block);

}  // namespace tessera::detail
