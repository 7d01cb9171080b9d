// Keys and values already computed for earlier positions, one pair per layer: what lets
// autoregressive decoding (models/generate.h) run each new token through one position.
#pragma once
#include <vector>

#include "tessera/tensor.h"

namespace tessera::models {

struct KVCache {
  std::vector<Tensor> keys, values;  // [B, H, T_cached, D]
  int64_t length = 0;
  // Prompts of different lengths in one batch sit right-aligned: row b starts with
  // left_padding[b] filler positions that no query attends to and that take no position (its
  // tokens are numbered from 0 after them). Empty: no row is padded.
  std::vector<int64_t> left_padding;
  // The keys each row attends to in the current forward, [B, 1, 1, T_cached + T] bool (set by
  // the model from left_padding).
  Tensor attend;
};

}  // namespace tessera::models
