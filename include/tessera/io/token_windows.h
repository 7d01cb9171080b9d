// A causal language model's examples from a token file, as a Dataset: window i holds tokens
// [i * block, i * block + block + 1): the inputs are its first `block` tokens, the targets
// its last `block` (the inputs shifted by one). Windows do not overlap, so an epoch reads each
// token once (HF's group_texts); the DataLoader shuffles and shards them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/io/dataset.h"
#include "tessera/io/token_data.h"
#include "tessera/tensor.h"

namespace tessera::io {

using TokenWindow = std::vector<int32_t>;  // block + 1 tokens

class TokenWindows : public Dataset<TokenWindow> {
 public:
  // `what` names the split in errors ("data.path's validation split").
  TokenWindows(const TokenFile& tokens, int64_t block, const std::string& what);
  int64_t size() const override { return windows_; }
  TokenWindow get(int64_t index) const override;

  // (inputs, targets), int64 [B, block] each.
  static std::pair<Tensor, Tensor> collate(const std::vector<TokenWindow>& windows);

 private:
  const TokenFile& tokens_;
  int64_t block_, windows_;
};

}  // namespace tessera::io
