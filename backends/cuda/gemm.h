// Batched GEMM through cuBLASLt, shared by the matmul kernel and attention.
// Row-major semantics: C[b] (M x N) = alpha * op(A[b]) (M x K) * op(B[b]) (K x N) + beta * C[b].
#pragma once
#include <library_types.h>

#include <cstdint>

#include "tessera/tensor_base.h"

namespace tessera::cuda {

// A logical row-major [rows, cols] operand: element (r, c) at r * ld + c, or at c * ld + r
// when `transposed` (a transposed view handed to cuBLAS as such, never copied).
struct GemmOperand {
  const void* ptr;
  int64_t ld;
  int64_t batch_stride;  // 0: the same matrix for every batch entry
  bool transposed;
};

// Work fused into the product by cuBLASLt (epilogues), batch 1, in C's type:
// bias [N] added to every row of C before C is rounded (CUBLASLT_EPILOGUE_BIAS), or
// a_row_sums [M] = the sums over k of op(A)'s rows (CUBLASLT_EPILOGUE_BGRADB: a linear
// layer's bias gradient, from the product that gives its weight gradient).
struct GemmEpilogue {
  const void* bias = nullptr;
  void* a_row_sums = nullptr;
  bool any() const { return bias || a_row_sums; }
};

// ab: type of A and B; c: type of C (float32 C with 16-bit A/B is allowed). Accumulates in
// float32 (float64 for float64; TF32 for float32 only when cuda_allow_tf32()). Returns false,
// having done nothing, when cuBLASLt has no algorithm for the requested epilogue (the caller
// then does that work itself); fails when it has none for the plain product.
bool gemm(Device device, cudaDataType_t ab, cudaDataType_t c, int64_t batch, int64_t M, int64_t N,
          int64_t K, const GemmOperand& a, const GemmOperand& b, void* out, int64_t ldc,
          int64_t c_batch_stride, double alpha = 1.0, double beta = 0.0,
          const GemmEpilogue& epilogue = {});

cudaDataType_t cuda_type(DType dtype);

// Describes a [batch, rows, cols] view as a GEMM operand; false when it needs a copy.
bool describe_operand(const TensorBase& t, GemmOperand& op);

}  // namespace tessera::cuda
