// Fused (flash-style) attention for float16/bfloat16 on tensor cores: scores never leave
// shared memory. Covers head sizes 64 and 128 with Dv == D; returns false for anything else,
// and the caller takes the cuBLASLt math path.
#pragma once
#include "attention_mask.cuh"
#include "tessera/tensor_base.h"

namespace tessera::cuda {

bool flash_attention_supported(const TensorBase& q, const TensorBase& k, const TensorBase& v);

// o [B,H,Tq,D] (q's dtype), lse [B,H,Tq] float32.
void flash_attention_forward(const TensorBase& q, const TensorBase& k, const TensorBase& v,
                             const MaskView& mask, bool causal, float scale, TensorBase& o,
                             TensorBase& lse);

// dq, dk, dv in q's dtype. Deterministic: dK/dV and dQ are separate passes, no atomics.
void flash_attention_backward(const TensorBase& dO, const TensorBase& q, const TensorBase& k,
                              const TensorBase& v, const TensorBase& o, const TensorBase& lse,
                              const MaskView& mask, bool causal, float scale, TensorBase& dq,
                              TensorBase& dk, TensorBase& dv);

}  // namespace tessera::cuda
