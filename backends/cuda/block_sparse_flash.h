// Block-sparse attention on tensor cores (block_sparse_flash.cu) for float16/bfloat16 with
// head size 64 or 128 (Dv == D); block_sparse_attention.cu's warp kernels take the rest.
#pragma once
#include "tessera/tensor_base.h"

namespace tessera::cuda {

bool sparse_flash_supported(const TensorBase& q, const TensorBase& v);

// layout: int64 [H, n, n] on the host; key_mask: bool [B, T] on the GPU or undefined.
// o [B,H,T,D] (q's dtype), lse [B,H,T] float32.
void sparse_flash_forward(const TensorBase& q, const TensorBase& k, const TensorBase& v,
                          const TensorBase& layout, const TensorBase& key_mask, bool causal,
                          float scale, TensorBase& o, TensorBase& lse);

// dq, dk, dv in q's dtype; deterministic (no atomics).
void sparse_flash_backward(const TensorBase& dO, const TensorBase& q, const TensorBase& k,
                           const TensorBase& v, const TensorBase& o, const TensorBase& lse,
                           const TensorBase& layout, const TensorBase& key_mask, bool causal,
                           float scale, TensorBase& dq, TensorBase& dk, TensorBase& dv);

}  // namespace tessera::cuda
