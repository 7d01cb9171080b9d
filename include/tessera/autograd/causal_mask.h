// The causal attention mask, shared by attention written from ops and the fused kernel's
// fallbacks, so that every path hides the same keys.
#pragma once
#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::autograd {

// Bool [query_length, key_length]: true where query i may attend to key j, that is
// j <= i + key_length - query_length (queries aligned with the last keys, as
// scaled_dot_product_attention's `causal` aligns them).
Tensor causal_visibility(int64_t query_length, int64_t key_length, Device device);

}  // namespace tessera::autograd
