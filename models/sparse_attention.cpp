#include "tessera/models/sparse_attention.h"

#include <algorithm>
#include <map>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/ops.h"

namespace tessera::models {

namespace {

constexpr int64_t kMaxLayoutCells = int64_t{1} << 26;  // per layer: 512 MB of int64

// A list of integers at `k` (DeepSpeed's local_window_blocks, global_block_indices, ...).
void get_list(io::config::Section& s, const std::string& k, std::vector<int64_t>& out) {
  const nlohmann::json& v = s.raw(k, "list of integers", nlohmann::json(out).dump());
  if (v.is_null()) return;
  TS_CHECK(v.is_array() && v.size() <= 4096, s.source(), ": '", s.key(k),
           "' must be a list of at most 4096 integers, found ", v.dump());
  out.clear();
  for (const auto& e : v) {
    TS_CHECK(e.is_number_integer(), s.source(), ": '", s.key(k), "' must hold integers, found ",
             v.dump());
    out.push_back(e.get<int64_t>());
  }
}

bool draws_random_blocks(const nn::SparsityConfig& c) {
  return (c.mode == "variable" || c.mode == "bigbird") && c.num_random_blocks > 0;
}

}  // namespace

const std::vector<std::string>& sparsity_mode_keys(const std::string& mode) {
  static const std::map<std::string, std::vector<std::string>> keys{
      {"dense", {"block"}},
      {"fixed",
       {"block", "different_layout_per_head", "num_local_blocks", "num_global_blocks", "attention",
        "horizontal_global_attention", "num_different_global_patterns"}},
      {"variable",
       {"block", "different_layout_per_head", "num_random_blocks", "local_window_blocks",
        "global_block_indices", "global_block_end_indices", "attention",
        "horizontal_global_attention"}},
      {"bigbird",
       {"block", "different_layout_per_head", "num_random_blocks", "num_sliding_window_blocks",
        "num_global_blocks"}},
      {"bslongformer",
       {"block", "different_layout_per_head", "num_sliding_window_blocks", "global_block_indices",
        "global_block_end_indices"}},
      {"local", {"block", "num_sliding_window_blocks", "attention"}}};
  static const std::vector<std::string> none;
  const auto it = keys.find(mode);
  return it == keys.end() ? none : it->second;
}

void SparseAttentionConfig::parse(io::config::Section& s, SparseAttentionConfig& out) {
  out.enabled = true;
  nn::SparsityConfig& c = out.sparsity;
  s.notes(
      {{"",
        "DeepSpeed's block-sparse attention: stated, the built-in models' self-attention "
        "computes only the blocks of its layout (docs/models.md)"},
       {"mode",
        "dense, fixed, variable, bigbird, bslongformer (DeepSpeed's), or local (Tessera's: "
        "a sliding window alone)"},
       {"block", "tokens per block side"},
       {"different_layout_per_head", "each head draws its own layout (else head 0's)"},
       {"num_local_blocks", "fixed: blocks per local window"},
       {"num_global_blocks", "fixed: global blocks per window; bigbird: leading global blocks"},
       {"attention",
        "fixed, variable, local: bidirectional or unidirectional (GPT-2 is causal "
        "either way)"},
       {"horizontal_global_attention", "fixed, variable: global blocks also attend to all"},
       {"num_different_global_patterns", "fixed: heads cycle through this many"},
       {"num_random_blocks", "variable, bigbird: random blocks per row (drawn from train.seed)"},
       {"local_window_blocks", "variable: window sizes in blocks, the last repeated"},
       {"global_block_indices", "variable, bslongformer: global blocks"},
       {"global_block_end_indices", "variable, bslongformer: with it, global ranges [index, end)"},
       {"num_sliding_window_blocks", "bigbird, bslongformer, local: window width in blocks"}});
  s.get("mode", c.mode);
  s.get_min<int64_t>("block", c.block, 1, "a positive integer");
  s.get("different_layout_per_head", c.different_layout_per_head);
  s.get_min<int64_t>("num_local_blocks", c.num_local_blocks, 1, "a positive integer");
  s.get_min<int64_t>("num_global_blocks", c.num_global_blocks, 0, "a non-negative integer");
  s.get("attention", c.attention);
  s.get("horizontal_global_attention", c.horizontal_global_attention);
  s.get_min<int64_t>("num_different_global_patterns", c.num_different_global_patterns, 1,
                     "a positive integer");
  s.get_min<int64_t>("num_random_blocks", c.num_random_blocks, 0, "a non-negative integer");
  get_list(s, "local_window_blocks", c.local_window_blocks);
  get_list(s, "global_block_indices", c.global_block_indices);
  if (s.has("global_block_end_indices")) {
    std::vector<int64_t> end;
    get_list(s, "global_block_end_indices", end);
    c.global_block_end_indices = end;
  } else {
    s.raw("global_block_end_indices", "list of integers", "null");
  }
  s.get_min<int64_t>("num_sliding_window_blocks", c.num_sliding_window_blocks, 1,
                     "a positive integer");
  const auto& modes = nn::sparsity_modes();
  std::string list;
  for (const std::string& m : modes) list += (list.empty() ? "" : ", ") + m;
  s.expect("mode", std::find(modes.begin(), modes.end(), c.mode) != modes.end(), c.mode,
           "one of " + list);
  // DeepSpeed reads only its mode's keys: another mode's key has no effect there either.
  const auto& used = sparsity_mode_keys(c.mode);
  auto known = [&](const std::string& k) {
    for (const char* m : {"fixed", "variable", "bigbird", "bslongformer", "local"}) {
      const auto& keys = sparsity_mode_keys(m);
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) return true;
    }
    return false;
  };
  for (const std::string& k : s.stated_keys())
    if (k != "mode" && known(k) && std::find(used.begin(), used.end(), k) == used.end())
      s.warnings().push_back(s.source() + ": '" + s.key(k) + "' has no effect in mode \"" + c.mode +
                             "\" (ignored, as DeepSpeed ignores it)");
  if (std::find(used.begin(), used.end(), "attention") == used.end())
    c.attention = "bidirectional";  // DeepSpeed passes it to fixed and variable only
}

nlohmann::json sparsity_to_json(const nn::SparsityConfig& c) {
  nlohmann::json j{{"mode", c.mode},
                   {"block", c.block},
                   {"different_layout_per_head", c.different_layout_per_head},
                   {"num_local_blocks", c.num_local_blocks},
                   {"num_global_blocks", c.num_global_blocks},
                   {"attention", c.attention},
                   {"horizontal_global_attention", c.horizontal_global_attention},
                   {"num_different_global_patterns", c.num_different_global_patterns},
                   {"num_random_blocks", c.num_random_blocks},
                   {"local_window_blocks", c.local_window_blocks},
                   {"global_block_indices", c.global_block_indices},
                   {"num_sliding_window_blocks", c.num_sliding_window_blocks}};
  j["global_block_end_indices"] = c.global_block_end_indices
                                      ? nlohmann::json(*c.global_block_end_indices)
                                      : nlohmann::json(nullptr);
  // Only the mode's keys: a reader warns about the others.
  const auto& used = sparsity_mode_keys(c.mode);
  nlohmann::json out{{"mode", c.mode}};
  for (const std::string& k : used) out[k] = j[k];
  return out;
}

nn::SparsityConfig sparsity_from_json(const nlohmann::json& j, const std::string& what) {
  std::vector<std::string> warnings, unknown;
  io::config::Section s(j, "sparse_attention", what, warnings, unknown);
  SparseAttentionConfig out;
  SparseAttentionConfig::parse(s, out);
  s.warn_unknown();
  TS_CHECK(unknown.empty() && warnings.empty(), what, ": ", warnings.front());
  return out.sparsity;
}

Tensor sparse_attention_layout(const nn::SparsityConfig& c, int64_t heads, int64_t max_seq_length,
                               int64_t layer, uint64_t seed) {
  nn::check_sparsity_config(c, heads);
  TS_CHECK(c.block <= max_seq_length, "sparse_attention.block ", c.block,
           " is longer than the model's positions (", max_seq_length, ")");
  const int64_t n = (max_seq_length + c.block - 1) / c.block;
  TS_CHECK(heads <= kMaxLayoutCells / (n * n), "sparse_attention: a layout of ", heads, " heads x ",
           n, " x ", n, " blocks (block ", c.block, " over ", max_seq_length,
           " positions) is too large; use a larger sparse_attention.block");
  nn::PythonRandom random(seed);
  // Layers before this one drew from the same stream; without random blocks none draws.
  const int64_t earlier = draws_random_blocks(c) ? layer : 0;
  for (int64_t i = 0; i < earlier; ++i) nn::make_sparsity_layout(c, heads, n * c.block, random);
  return nn::make_sparsity_layout(c, heads, n * c.block, random);
}

Tensor layout_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& layout,
                        int64_t block, const Tensor& key_padding_mask, bool causal) {
  const int64_t B = q.size(0), T = q.size(2), n = (T + block - 1) / block, padded = n * block;
  TS_CHECK(n <= layout.size(1), "sparse attention: a sequence of ", T,
           " tokens is longer than the layout's ", layout.size(1) * block);
  const Tensor corner = layout.narrow(1, 0, n).narrow(2, 0, n);
  if (padded == T) return block_sparse_attention(q, k, v, corner, key_padding_mask, causal);
  auto pad = [&](const Tensor& x) {
    Shape s = x.shape();
    s[2] = padded - T;
    return cat({x, zeros(s, x.dtype(), x.device())}, 2);
  };
  // The padding's keys are hidden (causal hides them from every real query anyway).
  Tensor mask = key_padding_mask.defined()
                    ? key_padding_mask
                    : ones({B, T}, DType::Float32, q.device()).to(DType::Bool);
  mask = cat({mask, zeros({B, padded - T}, DType::Bool, q.device())}, 1);
  return block_sparse_attention(pad(q), pad(k), pad(v), corner, mask, causal).narrow(2, 0, T);
}

Tensor layout_mask(const Tensor& layout, int64_t block,
                   const std::vector<std::vector<int64_t>>& query_positions,
                   const std::vector<std::vector<int64_t>>& key_positions, Device device) {
  const int64_t B = static_cast<int64_t>(query_positions.size()), H = layout.size(0);
  const int64_t n = layout.size(1);
  const int64_t Tq = B ? static_cast<int64_t>(query_positions[0].size()) : 0;
  const int64_t Tk = B ? static_cast<int64_t>(key_positions[0].size()) : 0;
  const Tensor lay = layout.to(Device::cpu()).contiguous();
  const int64_t* cells = lay.data<int64_t>();
  Tensor mask = Tensor::empty({B, H, Tq, Tk}, DType::Bool, Device::cpu());
  bool* m = mask.data<bool>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < Tq; ++t) {
        const int64_t p = query_positions[b][t];
        TS_CHECK(p / block < n, "sparse attention: position ", p, " is past the layout's ",
                 n * block);
        const int64_t* row = cells + (h * n + p / block) * n;
        bool* out = m + ((b * H + h) * Tq + t) * Tk;
        for (int64_t j = 0; j < Tk; ++j) {
          const int64_t kp = key_positions[b][j];
          out[j] = kp >= 0 && kp <= p && row[kp / block] != 0;
        }
      }
  return mask.to(device);
}

std::optional<SparseAttention> SparseAttention::of(const io::TrainConfig& cfg) {
  const SparseAttentionConfig& s = cfg.section<SparseAttentionConfig>();
  if (!s.enabled) return std::nullopt;
  return SparseAttention{s.sparsity, cfg.train.seed};
}

std::optional<SparseAttention> SparseAttention::read(const nlohmann::json& j,
                                                     const std::string& what) {
  if (!j.contains("sparse_attention") || j["sparse_attention"].is_null()) return std::nullopt;
  SparseAttention s{sparsity_from_json(j["sparse_attention"], what), 0};
  if (j.contains("sparse_attention_seed")) {
    const nlohmann::json& seed = j["sparse_attention_seed"];
    TS_CHECK(seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<int64_t>() >= 0),
             what, ": 'sparse_attention_seed' must be a non-negative integer, found ", seed.dump());
    s.seed = seed.get<uint64_t>();
  }
  return s;
}

void SparseAttention::write(nlohmann::json& j) const {
  j["sparse_attention"] = sparsity_to_json(sparsity);
  j["sparse_attention_seed"] = seed;
}

void SparseAttention::validate(int64_t heads, int64_t positions,
                               const std::string& positions_key) const {
  nn::check_sparsity_config(sparsity, heads);
  TS_CHECK(sparsity.block <= positions, "sparse_attention.block ", sparsity.block,
           " is longer than the model's ", positions_key, " ", positions);
}

SparseAttentionLayer::SparseAttentionLayer(const std::optional<SparseAttention>& s, int64_t heads,
                                           int64_t positions, int64_t layer,
                                           const parallel::ParallelContext& ctx) {
  if (!s) return;
  const int64_t local = heads / ctx.tensor_parallel_size();
  block = s->sparsity.block;
  layout = sparse_attention_layout(s->sparsity, heads, positions, layer, s->seed)
               .narrow(0, ctx.tensor_parallel_rank() * local, local)
               .contiguous();
}

void SparseAttentionLayer::check_probability_dropout(double attn_dropout_ratio,
                                                     const char* model) const {
  TS_CHECK(attn_dropout_ratio == 0 || !enabled(), model,
           ": transformer_kernel.attn_dropout_ratio needs dense attention (block-sparse "
           "attention applies no probability dropout)");
}

Tensor SparseAttentionLayer::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_padding_mask, bool causal) const {
  return layout_attention(q, k, v, layout, block, key_padding_mask, causal);
}

Tensor SparseAttentionLayer::cache_mask(int64_t B, int64_t Tq, int64_t Tk,
                                        const std::vector<int64_t>& left_padding,
                                        Device device) const {
  std::vector<std::vector<int64_t>> qpos(static_cast<size_t>(B)), kpos(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = left_padding.empty() ? 0 : left_padding[static_cast<size_t>(b)];
    for (int64_t t = 0; t < Tq; ++t) qpos[b].push_back(Tk - Tq + t - pad);
    for (int64_t j = 0; j < Tk; ++j) kpos[b].push_back(j < pad ? -1 : j - pad);
  }
  return layout_mask(layout, block, qpos, kpos, device);
}

namespace {
const io::RegisterConfigSection<SparseAttentionConfig> kSparseAttentionSection{"sparse_attention"};
}  // namespace

}  // namespace tessera::models
