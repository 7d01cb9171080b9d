// Keys and values already computed for earlier positions, one pair per layer: what lets
// autoregressive decoding (models/generate.h) run each new token through one position.
#pragma once
#include <vector>

#include "tessera/tensor.h"

namespace tessera::models {

struct KVCache {
  std::vector<Tensor> keys, values;  // [B, H, T_cached, D]
  int64_t length = 0;
};

}  // namespace tessera::models
