#include "tessera/autograd/causal_mask.h"

#include "tessera/ops.h"

namespace tessera::autograd {

Tensor causal_visibility(int64_t query_length, int64_t key_length, Device device) {
  const Tensor keys = arange(0, static_cast<double>(key_length), 1.0, DType::Int64, device);
  const Tensor last_visible = arange(static_cast<double>(key_length - query_length),
                                     static_cast<double>(key_length), 1.0, DType::Int64, device);
  return le(keys.unsqueeze(0), last_visible.unsqueeze(1));
}

}  // namespace tessera::autograd
