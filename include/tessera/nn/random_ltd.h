// Random layer-wise token dropping (random-LTD; Yao et al. 2022, DeepSpeed's
// data_efficiency.data_routing.random_ltd): chosen layers process a random subset of each
// sample's tokens during training, the rest bypass them unchanged; the subset grows on a
// schedule until every token is kept.
//
// The kept count follows DeepSpeed's RandomLTDScheduler: each training forward of global step
// s calls update_seq(s), which moves the value (only while it is below max_value) to
// floor(s / require_steps * (max - min) + min) rounded down to a multiple of seq_per_step, at
// most max_value. Each random-LTD layer draws its own subset per sample, uniformly without
// replacement and kept in sequence order (DeepSpeed's multinomial then token_sort); a decoder
// attends causally among the kept tokens (DeepSpeed's first k x k block of the causal mask), an
// encoder to the kept tokens its padding mask allows.
//
// The draws are Philox numbers of (seed, step, micro-batch, layer, the sample's index in the
// global micro-batch, position), so data and tensor parallel ranks reproduce one process, and
// a step whose kept count reaches the sequence runs every layer whole, bit for bit the run
// without the feature.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tessera/nn/capped_schedule.h"
#include "tessera/tensor.h"

namespace tessera::nn {

struct RandomLtdOptions {
  std::vector<int64_t> layer_ids;  // random_ltd_layer_id: the layers that drop tokens
  int64_t min_value = 0, max_value = 0;
  int64_t require_steps = 1, seq_per_step = 1;  // schedule_config (fixed_linear)
};

// One layer's token subset for this rank's B samples of T tokens.
struct TokenSubset {
  int64_t batch = 0, tokens = 0, kept = 0;
  std::vector<int64_t> positions;  // [B * kept]: each sample's kept positions, ascending
  Tensor gather_index;             // int64 [B, kept]: b * T + position
  Tensor route;                    // int64 [B, T]: each output token's row in cat(x, y)
  // x [B, T, C] -> the kept tokens [B, kept, C] (gradients flow back to x).
  Tensor gather(const Tensor& x) const;
  // x [B, T, C] with y [B, kept, C] in the kept positions: the layer's output for them, x's
  // tokens elsewhere (gradients flow to both).
  Tensor scatter(const Tensor& x, const Tensor& y) const;
};

class RandomLayerTokenDrop {
 public:
  RandomLayerTokenDrop(RandomLtdOptions options, uint64_t seed);

  // DeepSpeed's get_value(global_steps) (fixed_linear), before the max rule.
  int64_t scheduled(int64_t global_steps) const;
  // The kept count the training forwards of `global_step` use (update_seq replayed from 0).
  int64_t reserved_length_for_step(int64_t global_step);
  // The training forward about to run: micro-batch `micro_batch` of `global_step`.
  void begin_forward(int64_t global_step, int64_t micro_batch);
  int64_t reserved_length() const { return reserved_; }
  bool drops_tokens_of(int64_t layer) const;
  // The subset `layer` keeps of this rank's B samples of T tokens in the current forward (its
  // samples are the data-parallel shard's rows of the global micro-batch); none when the layer
  // keeps every token.
  std::optional<TokenSubset> subset(int64_t layer, int64_t batch, int64_t tokens,
                                    Device device) const;
  const RandomLtdOptions& options() const { return options_; }

 private:
  RandomLtdOptions options_;
  uint64_t seed_;
  int64_t step_ = 0, micro_batch_ = 0, reserved_ = 0;
  CappedScheduleReplay replay_;  // DeepSpeed's update_seq(0), (1), ...
};

// Runs a layer of hidden states [B, T, C] on `x`: in training, when `drop` drops tokens of layer
// `index`, on its subset (the other tokens pass it unchanged), else on all of `x`. `layer` gets
// the subset (null: every token), for what it must cut alike (a padding mask).
Tensor run_on_kept_tokens(const RandomLayerTokenDrop* drop, bool training, int64_t index,
                          const Tensor& x,
                          const std::function<Tensor(const Tensor&, const TokenSubset*)>& layer);

}  // namespace tessera::nn
