#include "tessera/nn/sparse_self_attention.h"

#include "tessera/error.h"
#include "tessera/ops.h"

namespace tessera::nn {

SparseSelfAttention::SparseSelfAttention(Module* parent, const std::string& name,
                                         SparsityConfig config, int64_t num_heads,
                                         int64_t max_seq_length, uint64_t seed)
    : Module(parent, name),
      config_(std::move(config)),
      num_heads_(num_heads),
      max_seq_length_(max_seq_length) {
  PythonRandom random(seed);
  master_layout_ = make_sparsity_layout(config_, num_heads, max_seq_length, random);
}

Tensor SparseSelfAttention::layout(int64_t seq_len) const {
  TS_CHECK(seq_len >= 1 && seq_len <= max_seq_length_ && seq_len % config_.block == 0,
           "SparseSelfAttention: a sequence of ", seq_len,
           " tokens; expected a multiple of sparse_attention.block ", config_.block,
           " up to max_seq_length ", max_seq_length_, " (pad the sequence to the block size)");
  const int64_t n = seq_len / config_.block;
  return master_layout_.narrow(1, 0, n).narrow(2, 0, n).contiguous();
}

Tensor SparseSelfAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_padding_mask, bool causal) {
  TS_CHECK(q.dim() == 4 && q.shape()[1] == num_heads_, "SparseSelfAttention: q must be [B, ",
           num_heads_, ", T, D], got ", q.describe());
  return block_sparse_attention(q, k, v, layout(q.shape()[2]), key_padding_mask, causal);
}

}  // namespace tessera::nn
