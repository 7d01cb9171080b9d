// DeepSpeed's `sparse_attention` config section, and the built-in models' self-attention over
// its layouts. In DeepSpeed the section only describes a layout and a user swaps the model's
// attention for SparseSelfAttention by hand; here stating the section makes GPT-2's attention
// block-sparse in every layout (one process, ZeRO, tensor and sequence parallel, pipelines).
//
// Each layer's layout is drawn as DeepSpeed's modules draw theirs after random.seed(seed):
// layer i's is the (i + 1)-th layout drawn from one Python random stream seeded with
// train.seed, over n_positions rounded up to the block (a layer cut into a pipeline stage or
// split over tensor-parallel ranks holds the same layout, its heads' rows). A sequence that is
// not a multiple of the block is padded inside the attention (the padding attends to nothing
// and is cut off), as DeepSpeed's pad_to_block_size does around the model.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "tessera/io/config_section.h"
#include "tessera/nn/sparsity_config.h"
#include "tessera/tensor.h"

namespace tessera::models {

struct SparseAttentionConfig {
  bool enabled = false;  // the section is stated
  nn::SparsityConfig sparsity;
  static void parse(io::config::Section& s, SparseAttentionConfig& out);
};

// The keys a mode reads (DeepSpeed's get_sparse_<mode>_config), "mode" aside.
const std::vector<std::string>& sparsity_mode_keys(const std::string& mode);

// The config as JSON (the section's keys; what a model's config.json keeps) and back; errors
// name `what`.
nlohmann::json sparsity_to_json(const nn::SparsityConfig& c);
nn::SparsityConfig sparsity_from_json(const nlohmann::json& j, const std::string& what);

// Layer `layer`'s layout of `heads` heads over max_seq_length (rounded up to the block):
// int64 [heads, n, n], the (layer + 1)-th drawn after seeding Python's random with `seed`.
Tensor sparse_attention_layout(const nn::SparsityConfig& c, int64_t heads, int64_t max_seq_length,
                               int64_t layer, uint64_t seed);

// Attention of q, k, v [B, H, T, D] over `layout` (int64 [H, n, n], n * block >= T: its
// top-left corner is used), T padded to the block inside; key_padding_mask bool [B, T] or
// undefined; causal: no key after its query.
Tensor layout_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& layout,
                        int64_t block, const Tensor& key_padding_mask, bool causal);

// The same layout as a dense mask for a KV cache's step: bool [B, H, Tq, Tk], true where query
// t of row b (real position query_positions[b][t]) may see key j (real position
// key_positions[b][j], -1 for padding): its blocks in the layout, and causal.
Tensor layout_mask(const Tensor& layout, int64_t block,
                   const std::vector<std::vector<int64_t>>& query_positions,
                   const std::vector<std::vector<int64_t>>& key_positions, Device device);

}  // namespace tessera::models
