// DeepSpeed's block-sparse attention layouts (deepspeed.ops.sparse_attention.sparsity_config):
// which blocks of a head's (seq_len / block) x (seq_len / block) attention matrix are computed.
// One struct holds the mode and every key of DeepSpeed's `sparse_attention` config section
// (the field names are the keys); make_sparsity_layout draws the layout DeepSpeed's class of
// that mode draws: equal to it, random blocks included, when Python's `random` was seeded as
// `random` is here (tests/nn/test_sparse_attention.cpp against DeepSpeed's own classes).
//
//   nn::SparsityConfig c;          // "fixed": 4-block local windows, their last block global
//   c.mode = "bigbird";
//   c.num_random_blocks = 1;
//   nn::PythonRandom random(seed);
//   Tensor layout = nn::make_sparsity_layout(c, heads, seq_len, random);  // int64 [H, n, n]
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/nn/python_random.h"
#include "tessera/tensor.h"

namespace tessera::nn {

struct SparsityConfig {
  // "dense" (every block), "fixed" (Sparse Transformers' local windows and their global
  // blocks), "variable" (windows of given sizes, global blocks at given indices, random
  // blocks), "bigbird" (random, sliding window, global), "bslongformer" (sliding window and
  // global blocks at given indices), "local" (a sliding window alone: DeepSpeed's
  // LocalSlidingWindowSparsityConfig, which its config section does not offer).
  std::string mode = "fixed";
  int64_t block = 16;                      // tokens per block side
  bool different_layout_per_head = false;  // else every head takes head 0's layout
  int64_t num_local_blocks = 4;            // fixed: blocks per local window
  int64_t num_global_blocks = 1;           // fixed: global blocks per window; bigbird: leading
  // "bidirectional" or "unidirectional" (causal: nothing above the diagonal). DeepSpeed's
  // config section passes it to fixed and variable only (bigbird and bslongformer stay
  // bidirectional there); here every mode takes it.
  std::string attention = "bidirectional";
  bool horizontal_global_attention = false;      // fixed, variable: global blocks attend to all
  int64_t num_different_global_patterns = 1;     // fixed: heads cycle through this many
  int64_t num_random_blocks = 0;                 // variable, bigbird: per row
  std::vector<int64_t> local_window_blocks{4};   // variable: window sizes, the last repeated
  std::vector<int64_t> global_block_indices{0};  // variable, bslongformer
  // variable, bslongformer: with it, global_block_indices[i] .. end[i] (exclusive) are global.
  std::optional<std::vector<int64_t>> global_block_end_indices;
  int64_t num_sliding_window_blocks = 3;  // bigbird, bslongformer, local
};

// The modes above, for errors and listings.
const std::vector<std::string>& sparsity_modes();

// Checks the keys the mode reads, alone and together (DeepSpeed's constructor checks and
// the ones its code would fail on later); errors name the key as
// "sparse_attention.<key>".
void check_sparsity_config(const SparsityConfig& config, int64_t num_heads);

// The layout of `num_heads` heads over seq_len tokens: int64 [num_heads, seq_len / block,
// seq_len / block], 1 where a block is computed. Draws its random blocks from `random` as
// DeepSpeed's draws them from Python's (row by row, head by head). Errors name the key a
// sequence of this length cannot satisfy (seq_len not a multiple of block, more random or
// window blocks than a row has).
Tensor make_sparsity_layout(const SparsityConfig& config, int64_t num_heads, int64_t seq_len,
                            PythonRandom& random);

}  // namespace tessera::nn
