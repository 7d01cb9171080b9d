// Which keys a query sees in attention: the causal rule (key j visible to query i when
// j <= i + Tk - Tq, the last query aligned with the last key) and an optional bool mask given
// as a broadcast view of [B, H, Tq, Tk] (true = attend).
#pragma once
#include <cstdint>

#include "tessera/tensor_base.h"

namespace tessera::cuda {

struct MaskView {
  const bool* ptr = nullptr;
  int64_t sb = 0, sh = 0, sq = 0, sk = 0;
  int64_t H = 1;
};

inline MaskView mask_view(const TensorBase& mask, int64_t H) {
  MaskView m;
  if (!mask.defined()) return m;
  const auto& st = mask.strides();
  m.ptr = static_cast<const bool*>(mask.data_ptr());
  m.sb = st[0];
  m.sh = st[1];
  m.sq = st[2];
  m.sk = st[3];
  m.H = H;
  return m;
}

__device__ inline bool visible(const MaskView& m, bool causal, int64_t bh, int64_t i, int64_t j,
                               int64_t Tq, int64_t Tk) {
  if (causal && j > i + Tk - Tq) return false;
  if (m.ptr) {
    const int64_t b = bh / m.H, h = bh % m.H;
    return m.ptr[b * m.sb + h * m.sh + i * m.sq + j * m.sk];
  }
  return true;
}

}  // namespace tessera::cuda
