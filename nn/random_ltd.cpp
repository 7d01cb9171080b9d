#include "tessera/nn/random_ltd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/error.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

namespace tessera::nn {

namespace {

constexpr uint32_t kTokenDropKey = 0x4c54443fu;  // "LTD?": a stream of its own

// The sort key of `position` in one sample's draw: uniform 32-bit Philox numbers; the k
// smallest keys are the kept tokens (every subset of k equally likely, as a multinomial
// without replacement over equal weights).
uint64_t token_key(uint64_t seed, int64_t step, int64_t micro, int64_t layer, int64_t sample,
                   int64_t position) {
  const auto s = static_cast<uint64_t>(step);
  const std::array<uint32_t, 4> r = philox4x32_10(
      {static_cast<uint32_t>(position), static_cast<uint32_t>(sample), static_cast<uint32_t>(micro),
       static_cast<uint32_t>(s)},
      {static_cast<uint32_t>(seed) ^ kTokenDropKey,
       static_cast<uint32_t>(seed >> 32) ^ (static_cast<uint32_t>(layer) * 0x9e3779b9u) ^
           static_cast<uint32_t>(s >> 32)});
  // (ties broken by position, so the order is total)
  return (static_cast<uint64_t>(r[0]) << 32) | static_cast<uint32_t>(position);
}

}  // namespace

Tensor TokenSubset::gather(const Tensor& x) const {
  TS_CHECK(x.dim() == 3 && x.size(0) == batch && x.size(1) == tokens, "random_ltd: hidden states ",
           x.describe(), " are not the [", batch, ", ", tokens, ", C] the subset was drawn for");
  return embedding(x.reshape({batch * tokens, x.size(2)}), gather_index);
}

Tensor TokenSubset::scatter(const Tensor& x, const Tensor& y) const {
  TS_CHECK(y.dim() == 3 && y.size(0) == batch && y.size(1) == kept && y.size(2) == x.size(2),
           "random_ltd: the layer's output ", y.describe(), " is not [", batch, ", ", kept, ", ",
           x.size(2), "]");
  const int64_t C = x.size(2);
  return embedding(cat({x.reshape({batch * tokens, C}), y.reshape({batch * kept, C})}, 0), route);
}

RandomLayerTokenDrop::RandomLayerTokenDrop(RandomLtdOptions options, uint64_t seed)
    : options_(std::move(options)),
      seed_(seed),
      replay_(options_.min_value, options_.max_value, /*first=*/0) {
  TS_CHECK(options_.require_steps >= 1 && options_.seq_per_step >= 1 && options_.min_value >= 1 &&
               options_.max_value >= options_.min_value,
           "random_ltd: the schedule needs 1 <= min_value <= max_value, require_steps >= 1 and "
           "seq_per_step >= 1");
  std::sort(options_.layer_ids.begin(), options_.layer_ids.end());
}

int64_t RandomLayerTokenDrop::scheduled(int64_t global_steps) const {
  const RandomLtdOptions& o = options_;  // (fixed_linear)
  return fixed_root_schedule(global_steps, o.require_steps, 1.0, o.min_value, o.max_value,
                             o.seq_per_step);
}

int64_t RandomLayerTokenDrop::reserved_length_for_step(int64_t global_step) {
  TS_CHECK(global_step >= 0, "random_ltd: global step ", global_step, " is negative");
  // engine.forward's update_seq(global_steps)
  return replay_.value_after(global_step, [this](int64_t t) { return scheduled(t); });
}

void RandomLayerTokenDrop::begin_forward(int64_t global_step, int64_t micro_batch) {
  step_ = global_step;
  micro_batch_ = micro_batch;
  reserved_ = reserved_length_for_step(global_step);
}

bool RandomLayerTokenDrop::drops_tokens_of(int64_t layer) const {
  return std::binary_search(options_.layer_ids.begin(), options_.layer_ids.end(), layer);
}

std::optional<TokenSubset> RandomLayerTokenDrop::subset(int64_t layer, int64_t batch,
                                                        int64_t tokens, Device device) const {
  if (!drops_tokens_of(layer) || reserved_ >= tokens) return std::nullopt;
  TS_CHECK(reserved_ >= 1, "random_ltd: step ", step_, " keeps ", reserved_,
           " tokens: the schedule's value rounds down to 0 (raise min_value)");
  TokenSubset s;
  s.batch = batch, s.tokens = tokens, s.kept = reserved_;
  // This rank's rows are its shard of the global micro-batch.
  const DataParallelShard shard = data_parallel_shard();
  std::vector<int64_t> index(static_cast<size_t>(batch * reserved_));
  std::vector<int64_t> route(static_cast<size_t>(batch * tokens));
  std::vector<uint64_t> keys(static_cast<size_t>(tokens));
  std::vector<int64_t> order(static_cast<size_t>(tokens));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t sample = static_cast<int64_t>(shard.rank) * batch + b;
    for (int64_t t = 0; t < tokens; ++t)
      keys[static_cast<size_t>(t)] = token_key(seed_, step_, micro_batch_, layer, sample, t);
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + reserved_ - 1, order.end(),
                     [&](int64_t a, int64_t c) {
                       return keys[static_cast<size_t>(a)] < keys[static_cast<size_t>(c)];
                     });
    std::sort(order.begin(), order.begin() + reserved_);
    for (int64_t t = 0; t < tokens; ++t)
      route[static_cast<size_t>(b * tokens + t)] = b * tokens + t;
    for (int64_t j = 0; j < reserved_; ++j) {
      const int64_t p = order[static_cast<size_t>(j)];
      s.positions.push_back(p);
      index[static_cast<size_t>(b * reserved_ + j)] = b * tokens + p;
      // (the layer's output rows follow x's B * T rows in cat(x, y))
      route[static_cast<size_t>(b * tokens + p)] = batch * tokens + b * reserved_ + j;
    }
  }
  s.gather_index = from_vector(index, {batch, reserved_}).to(device);
  s.route = from_vector(route, {batch, tokens}).to(device);
  return s;
}

Tensor run_on_kept_tokens(const RandomLayerTokenDrop* drop, bool training, int64_t index,
                          const Tensor& x,
                          const std::function<Tensor(const Tensor&, const TokenSubset*)>& layer) {
  if (drop && training)
    if (auto s = drop->subset(index, x.size(0), x.size(1), x.device()))
      return s->scatter(x, layer(s->gather(x), &*s));
  return layer(x, nullptr);
}

}  // namespace tessera::nn
