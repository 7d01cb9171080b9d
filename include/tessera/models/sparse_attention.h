// DeepSpeed's `sparse_attention` config section, and the built-in models' self-attention over
// its layouts. In DeepSpeed the section only describes a layout and a user swaps the model's
// attention for SparseSelfAttention by hand; here stating the section makes GPT-2's and BERT's
// attention block-sparse in every layout (one process, ZeRO, tensor and sequence parallel,
// pipelines).
//
// Each layer's layout is drawn as DeepSpeed's modules draw theirs after random.seed(seed):
// layer i's is the (i + 1)-th layout drawn from one Python random stream seeded with
// train.seed, over n_positions (max_position_embeddings) rounded up to the block (a layer cut into
// a pipeline stage or split over tensor-parallel ranks holds the same layout, its heads' rows). A
// sequence that is not a multiple of the block is padded inside the attention (the padding attends
// to nothing and is cut off), as DeepSpeed's pad_to_block_size does around the model.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>  // (not json.hpp: gpt2.h and bert.h include this header)
#include <vector>

#include "tessera/nn/sparsity_config.h"
#include "tessera/parallel/parallel_context.h"
#include "tessera/tensor.h"

namespace tessera::io {
struct TrainConfig;
namespace config {
class Section;
}
}  // namespace tessera::io

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

// What a model's config keeps of the section: the layout's keys and the seed its random blocks
// are drawn from (config.json: "sparse_attention" and "sparse_attention_seed", keys Hugging
// Face ignores).
struct SparseAttention {
  nn::SparsityConfig sparsity;
  uint64_t seed = 0;
  // The training config's section when stated, seeded with train.seed.
  static std::optional<SparseAttention> of(const io::TrainConfig& cfg);
  static std::optional<SparseAttention> read(const nlohmann::json& config_json,
                                             const std::string& what);
  void write(nlohmann::json& config_json) const;
  // A model of `heads` heads over `positions` (named `positions_key` in errors) can take it.
  void validate(int64_t heads, int64_t positions, const std::string& positions_key) const;
};

// A model config with the training config's section when stated (else what it had: a
// model.init_from directory's), validated.
template <class ModelConfig>
ModelConfig with_sparse_attention(ModelConfig c, const io::TrainConfig& cfg) {
  if (auto s = SparseAttention::of(cfg)) c.sparse_attention = std::move(s);
  c.validate();
  return c;
}

// One layer's layout over this rank's heads (a tensor-parallel rank's rows), and attention
// through it. Default: none (dense attention).
struct SparseAttentionLayer {
  SparseAttentionLayer() = default;
  SparseAttentionLayer(const std::optional<SparseAttention>& s, int64_t heads, int64_t positions,
                       int64_t layer, const parallel::ParallelContext& ctx);
  bool enabled() const { return layout.defined(); }
  // Block-sparse attention applies no probability dropout: with a layout, a nonzero
  // `attn_dropout_ratio` (the transformer kernel's) is an error naming `model`.
  void check_probability_dropout(double attn_dropout_ratio, const char* model) const;
  // layout_attention over this layer's layout.
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding_mask,
                bool causal) const;
  // A KV cache's step (causal): bool [B, H, Tq, Tk] for queries at the last Tq of Tk positions,
  // row b's first left_padding[b] keys padding (none when empty).
  Tensor cache_mask(int64_t B, int64_t Tq, int64_t Tk, const std::vector<int64_t>& left_padding,
                    Device device) const;
  Tensor layout;  // int64 [heads, n, n]
  int64_t block = 0;
};

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
