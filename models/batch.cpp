#include "tessera/models/pretrained.h"

namespace tessera::models {

Batch Batch::to(Device device) const {
  auto move = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {move(input_ids),           move(targets),   move(attention_mask), move(token_type_ids),
          move(next_sentence_label), target_weight};
}

}  // namespace tessera::models
