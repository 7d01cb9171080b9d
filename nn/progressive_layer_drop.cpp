#include "tessera/nn/progressive_layer_drop.h"

#include <cmath>

#include "tessera/error.h"
#include "tessera/rng.h"

namespace tessera::nn {

namespace {

// A key of its own, so the draws are not the model's dropout stream for the same seed.
constexpr uint32_t kLayerDropKey = 0x504c4421u;  // "PLD!"

// Uniform in [0, 1) from Philox's first two words of counter (layer, micro, step).
double layer_uniform(uint64_t seed, int64_t step, int64_t micro_batch, int64_t layer) {
  const uint64_t s = static_cast<uint64_t>(step);
  const std::array<uint32_t, 4> r = philox4x32_10(
      {static_cast<uint32_t>(layer), static_cast<uint32_t>(micro_batch), static_cast<uint32_t>(s),
       static_cast<uint32_t>(s >> 32)},
      {static_cast<uint32_t>(seed) ^ kLayerDropKey, static_cast<uint32_t>(seed >> 32)});
  // 53 random bits, as a double in [0, 1).
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);
  return static_cast<double>(bits) * 0x1.0p-53;
}

}  // namespace

ProgressiveLayerDrop::ProgressiveLayerDrop(ProgressiveLayerDropOptions options, uint64_t seed)
    : options_(options), seed_(seed) {
  TS_CHECK(options_.theta >= 0 && options_.theta <= 1,
           "progressive_layer_drop: theta must be in [0, 1], got ", options_.theta);
  TS_CHECK(options_.gamma >= 0 && std::isfinite(options_.gamma),
           "progressive_layer_drop: gamma must be a non-negative number, got ", options_.gamma);
}

double ProgressiveLayerDrop::theta_after(int64_t t) const {
  const double theta = options_.theta;
  return (1.0 - theta) * std::exp(-options_.gamma * static_cast<double>(t)) + theta;
}

double ProgressiveLayerDrop::theta_at(int64_t global_step) const {
  return global_step <= 0 ? 1.0 : theta_after(global_step - 1);
}

double ProgressiveLayerDrop::keep_probability(double theta, int64_t layer, int64_t layers) {
  return 1.0 - static_cast<double>(layer + 1) / static_cast<double>(layers) * (1.0 - theta);
}

void ProgressiveLayerDrop::begin_forward(int64_t global_step, int64_t micro_batch) {
  TS_CHECK(global_step >= 0 && micro_batch >= 0, "progressive_layer_drop: step ", global_step,
           ", micro-batch ", micro_batch, " must not be negative");
  step_ = global_step;
  micro_batch_ = micro_batch;
}

std::vector<ProgressiveLayerDrop::LayerChoice> ProgressiveLayerDrop::choices(int64_t layers) const {
  std::vector<LayerChoice> out(static_cast<size_t>(std::max<int64_t>(layers, 0)));
  const double theta = theta_at(step_);
  for (int64_t l = 0; l < layers; ++l) {
    const double p = keep_probability(theta, l, layers);
    LayerChoice& c = out[static_cast<size_t>(l)];
    if (p >= 1.0) continue;  // kept, unscaled: the run without the feature, bit for bit
    c.keep = layer_uniform(seed_, step_, micro_batch_, l) < p;
    c.scale = c.keep ? 1.0 / p : 0.0;
  }
  return out;
}

Tensor scale_branch(const Tensor& branch, double scale) {
  return scale == 1.0 ? branch : branch * scale;
}

std::vector<KeptLayer> kept_layers(const ProgressiveLayerDrop* layer_drop, bool training,
                                   int64_t layers) {
  std::vector<KeptLayer> out;
  if (!layer_drop || !training) {
    for (int64_t l = 0; l < layers; ++l) out.push_back({l, 1.0});
    return out;
  }
  const auto choices = layer_drop->choices(layers);
  for (int64_t l = 0; l < layers; ++l)
    if (choices[static_cast<size_t>(l)].keep)
      out.push_back({l, choices[static_cast<size_t>(l)].scale});
  return out;
}

}  // namespace tessera::nn
