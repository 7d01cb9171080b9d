// The sparsity layouts of DeepSpeed's sparsity_config module, one function per mode; each
// follows its class's make_layout: the random blocks, then the local or sliding window, then
// the global blocks, for each head that has its own layout, then head 0's copied to the rest.
#include "tessera/nn/sparsity_config.h"

#include <algorithm>

#include "tessera/error.h"
#include "tessera/ops.h"

namespace tessera::nn {

namespace {

const char* const kKey = "sparse_attention.";

bool bidirectional(const SparsityConfig& c) {
  return c.attention == "bidirectional";
}

// One layout of H heads x n x n blocks; set() clips its ranges to the matrix as Python's
// slices do.
struct Layout {
  int64_t heads, n;
  std::vector<int64_t> cells;
  Layout(int64_t heads_, int64_t n_)
      : heads(heads_), n(n_), cells(static_cast<size_t>(heads_ * n_ * n_), 0) {}
  int64_t& at(int64_t h, int64_t r, int64_t c) {
    return cells[static_cast<size_t>((h * n + r) * n + c)];
  }
  void set(int64_t h, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    for (int64_t r = std::max<int64_t>(r0, 0); r < std::min(r1, n); ++r)
      for (int64_t c = std::max<int64_t>(c0, 0); c < std::min(c1, n); ++c) at(h, r, c) = 1;
  }
  void lower_triangle(int64_t h) {  // torch.tril
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = r + 1; c < n; ++c) at(h, r, c) = 0;
  }
};

// Windows of consecutive blocks attending within themselves (causal: up to the diagonal).
void window(Layout& l, int64_t h, int64_t from, int64_t to, bool causal) {
  for (int64_t row = from; row < std::min(to, l.n); ++row)
    l.set(h, row, row + 1, from, causal ? row + 1 : to);
}

void random_blocks(const SparsityConfig& c, Layout& l, int64_t h, PythonRandom& random) {
  TS_CHECK(l.n >= c.num_random_blocks, kKey, "num_random_blocks ", c.num_random_blocks,
           " is more than the ", l.n, " blocks of a row (sequence of ", l.n, " blocks of ", c.block,
           ")");
  const bool causal_rows = c.mode == "bigbird" && !bidirectional(c);
  for (int64_t row = 0; row < l.n; ++row) {
    const int64_t population = causal_rows ? row + 1 : l.n;
    TS_CHECK(c.num_random_blocks <= population, kKey, "num_random_blocks ", c.num_random_blocks,
             " is more than the ", population, " blocks row ", row,
             " may attend to (unidirectional bigbird)");
    for (int64_t col : random.sample(population, c.num_random_blocks)) l.at(h, row, col) = 1;
  }
}

void sliding_window(const SparsityConfig& c, Layout& l, int64_t h) {
  TS_CHECK(l.n >= c.num_sliding_window_blocks, kKey, "num_sliding_window_blocks ",
           c.num_sliding_window_blocks, " is more than the ", l.n, " blocks of a row");
  const int64_t w = c.num_sliding_window_blocks / 2;
  const bool causal_end = c.mode == "local" && !bidirectional(c);
  for (int64_t row = 0; row < l.n; ++row)
    l.set(h, row, row + 1, row - w, causal_end ? row + 1 : row + w + 1);
}

void fixed(const SparsityConfig& c, Layout& l, int64_t h) {
  const int64_t n = l.n, L = c.num_local_blocks, G = c.num_global_blocks;
  for (int64_t i = 0; i < n; i += L) window(l, h, i, std::min(i + L, n), !bidirectional(c));
  const int64_t first = L - (1 + h % c.num_different_global_patterns) * G;
  auto global = [&](int64_t from, int64_t to) {
    l.set(h, bidirectional(c) ? 0 : from, n, from, to);
    if (c.horizontal_global_attention) l.set(h, from, to, 0, n);
  };
  const int64_t end = n - n % L;
  for (int64_t i = first; i < end; i += L) global(i, i + G);
  if (end < n) {  // a short last window
    TS_CHECK(n >= G, kKey, "num_global_blocks ", G, " is more than the ", n, " blocks of a row");
    const int64_t start = std::min(end + first, n - G);
    global(start, start + G);
  }
}

// variable's and bslongformer's global blocks: single indices, or [start, end) ranges.
void indexed_global(const SparsityConfig& c, Layout& l, int64_t h, bool horizontal,
                    bool from_diagonal) {
  const auto& starts = c.global_block_indices;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t from = starts[i];
    if (from >= l.n) continue;  // past this sequence's blocks
    const int64_t to =
        c.global_block_end_indices ? std::min((*c.global_block_end_indices)[i], l.n) : from + 1;
    if (horizontal) l.set(h, from, to, 0, l.n);
    l.set(h, from_diagonal ? from : 0, l.n, from, to);
  }
}

void variable(const SparsityConfig& c, Layout& l, int64_t h, PythonRandom& random) {
  random_blocks(c, l, h, random);
  const bool causal = !bidirectional(c);
  int64_t start = 0, end = 0;
  for (int64_t size : c.local_window_blocks) {
    end = std::min(end + size, l.n);
    window(l, h, start, end, causal);
    start += size;
  }
  const int64_t last = c.local_window_blocks.back();  // repeated over the rest of the row
  for (int64_t i = start; i < l.n; i += last) window(l, h, i, std::min(i + last, l.n), causal);
  indexed_global(c, l, h, c.horizontal_global_attention, causal);
}

void bigbird(const SparsityConfig& c, Layout& l, int64_t h, PythonRandom& random) {
  random_blocks(c, l, h, random);
  sliding_window(c, l, h);
  TS_CHECK(l.n >= c.num_global_blocks, kKey, "num_global_blocks ", c.num_global_blocks,
           " is more than the ", l.n, " blocks of a row");
  l.set(h, 0, c.num_global_blocks, 0, l.n);
  l.set(h, 0, l.n, 0, c.num_global_blocks);
  if (!bidirectional(c)) l.lower_triangle(h);
}

void bslongformer(const SparsityConfig& c, Layout& l, int64_t h) {
  sliding_window(c, l, h);
  indexed_global(c, l, h, true, false);
  if (!bidirectional(c)) l.lower_triangle(h);
}

}  // namespace

const std::vector<std::string>& sparsity_modes() {
  static const std::vector<std::string> modes{"dense",   "fixed",        "variable",
                                              "bigbird", "bslongformer", "local"};
  return modes;
}

Tensor make_sparsity_layout(const SparsityConfig& c, int64_t num_heads, int64_t seq_len,
                            PythonRandom& random) {
  check_sparsity_config(c, num_heads);
  TS_CHECK(seq_len >= 1 && seq_len % c.block == 0, kKey, "block ", c.block,
           " does not divide the sequence length ", seq_len,
           " (pad the sequence to a multiple of the block)");
  const int64_t n = seq_len / c.block;
  TS_CHECK(num_heads <= (int64_t{1} << 40) / std::max<int64_t>(n * n, 1),
           "sparse attention: ", num_heads, " heads x ", n, " x ", n,
           " blocks is too large a layout");
  Layout l(num_heads, n);
  const bool own = c.different_layout_per_head && c.mode != "local" && c.mode != "dense";
  for (int64_t h = 0; h < (own ? num_heads : 1); ++h) {
    if (c.mode == "dense")
      l.set(h, 0, n, 0, n);
    else if (c.mode == "fixed")
      fixed(c, l, h);
    else if (c.mode == "variable")
      variable(c, l, h, random);
    else if (c.mode == "bigbird")
      bigbird(c, l, h, random);
    else if (c.mode == "bslongformer")
      bslongformer(c, l, h);
    else
      sliding_window(c, l, h);
  }
  if (!own)
    for (int64_t h = 1; h < num_heads; ++h)
      std::copy_n(l.cells.begin(), n * n, l.cells.begin() + h * n * n);
  return from_vector(l.cells, {num_heads, n, n});
}

namespace {

void check_global_ranges(const SparsityConfig& c) {
  for (size_t i = 0; i < c.global_block_indices.size(); ++i)
    TS_CHECK(c.global_block_indices[i] >= 0, kKey, "global_block_indices[", i, "] is ",
             c.global_block_indices[i], ", expected a block index >= 0");
  if (!c.global_block_end_indices) return;
  const auto& ends = *c.global_block_end_indices;
  TS_CHECK(ends.size() == c.global_block_indices.size(), kKey, "global_block_end_indices has ",
           ends.size(), " entries but global_block_indices ", c.global_block_indices.size(),
           ": one end per start");
  for (size_t i = 0; i < ends.size(); ++i)
    TS_CHECK(c.global_block_indices[i] < ends[i], kKey, "global_block_end_indices[", i, "] is ",
             ends[i], ", not after its start global_block_indices[", i,
             "] = ", c.global_block_indices[i]);
}

}  // namespace

void check_sparsity_config(const SparsityConfig& c, int64_t num_heads) {
  const auto& modes = sparsity_modes();
  if (std::find(modes.begin(), modes.end(), c.mode) == modes.end()) {
    std::string list;
    for (const std::string& m : modes) list += (list.empty() ? "" : ", ") + m;
    fail(kKey, "mode is \"", c.mode, "\", expected one of ", list);
  }
  TS_CHECK(num_heads >= 1, "sparse attention: ", num_heads, " heads, expected >= 1");
  TS_CHECK(c.block >= 1, kKey, "block is ", c.block, ", expected >= 1");
  if (c.mode == "dense") return;
  TS_CHECK(c.attention == "bidirectional" || c.attention == "unidirectional", kKey,
           "attention is \"", c.attention, "\", expected \"bidirectional\" or \"unidirectional\"");
  if (c.mode == "fixed" || c.mode == "variable")
    TS_CHECK(!c.horizontal_global_attention || bidirectional(c), kKey,
             "horizontal_global_attention needs attention \"bidirectional\"");
  if (c.mode == "variable" || c.mode == "bigbird")
    TS_CHECK(c.num_random_blocks >= 0, kKey, "num_random_blocks is ", c.num_random_blocks,
             ", expected >= 0");
  if (c.mode == "bigbird" || c.mode == "bslongformer" || c.mode == "local")
    TS_CHECK(c.num_sliding_window_blocks >= 0, kKey, "num_sliding_window_blocks is ",
             c.num_sliding_window_blocks, ", expected >= 0");
  if (c.mode == "fixed" || c.mode == "bigbird")
    TS_CHECK(c.num_global_blocks >= 1, kKey, "num_global_blocks is ", c.num_global_blocks,
             ", expected >= 1");
  if (c.mode == "fixed") {
    const int64_t L = c.num_local_blocks, G = c.num_global_blocks;
    TS_CHECK(L >= 1 && L % G == 0, kKey, "num_local_blocks ", L,
             " must be a positive multiple of num_global_blocks ", G);
    const int64_t P = c.num_different_global_patterns;
    TS_CHECK(P >= 1 && P <= L / G, kKey, "num_different_global_patterns is ", P,
             ", expected 1 to num_local_blocks / num_global_blocks = ", L / G);
    TS_CHECK(P == 1 || c.different_layout_per_head, kKey, "num_different_global_patterns ", P,
             " needs different_layout_per_head true (one layout serves every head otherwise)");
  }
  if (c.mode == "variable") {
    TS_CHECK(!c.local_window_blocks.empty(), kKey, "local_window_blocks is empty");
    for (size_t i = 0; i < c.local_window_blocks.size(); ++i)
      TS_CHECK(c.local_window_blocks[i] >= 1, kKey, "local_window_blocks[", i, "] is ",
               c.local_window_blocks[i], ", expected >= 1");
  }
  if (c.mode == "variable" || c.mode == "bslongformer") check_global_ranges(c);
}

}  // namespace tessera::nn
