// DeepSpeed's SparseSelfAttention (deepspeed.ops.sparse_attention): block-sparse attention of
// q, k, v [B, H, T, D] over a sparsity config's layout. As DeepSpeed's, the layout is drawn once
// for max_seq_length at construction (its random blocks from `seed`, as Python's random after
// random.seed(seed)) and a shorter sequence takes its top-left corner; T must be a multiple
// of the config's block (DeepSpeed's pad_to_block_size is the caller's).
//
//   nn::SparsityConfig c;  // DeepSpeed's "fixed" defaults
//   nn::SparseSelfAttention attn(this, "attn", c, /*num_heads=*/12, /*max_seq_length=*/4096);
//   Tensor o = attn.forward(q, k, v, key_padding_mask);  // [B, 12, T, D]
#pragma once
#include <cstdint>
#include <string>

#include "tessera/nn/module.h"
#include "tessera/nn/sparsity_config.h"

namespace tessera::nn {

class SparseSelfAttention : public Module {
 public:
  SparseSelfAttention(Module* parent, const std::string& name, SparsityConfig config,
                      int64_t num_heads, int64_t max_seq_length = 2048, uint64_t seed = 0);
  // key_padding_mask: bool [B, T], true = attend. causal hides key j > query i (with a
  // unidirectional layout, the blocks past the diagonal are already absent).
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& key_padding_mask = {}, bool causal = false);
  // The layout a sequence of seq_len tokens uses: int64 [H, seq_len / block, seq_len / block].
  Tensor layout(int64_t seq_len) const;
  const SparsityConfig& config() const { return config_; }
  std::string type_name() const override { return "SparseSelfAttention"; }

 private:
  SparsityConfig config_;
  int64_t num_heads_, max_seq_length_;
  Tensor master_layout_;  // for max_seq_length
};

}  // namespace tessera::nn
