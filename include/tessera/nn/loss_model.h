// The small interface through which the engine runs any model (engine.forward(batch)): a
// module that maps a batch of its own type to a scalar loss.
//
//   struct Pairs { Tensor x, y; Pairs to(Device d) const { return {x.to(d), y.to(d)}; } };
//   struct Regressor : nn::LossModel<Pairs> {
//     nn::Linear fc{this, "fc", 4, 1};
//     Tensor loss(const Pairs& b) override { return mean(square(fc(b.x) - b.y)); }
//   };
//   Tensor loss = engine->forward(Pairs{x, y});
//
// The Batch type is the user's own; the engine uses these parts of it when present:
//   Batch to(Device) const       moves the batch to the model's device before the loss;
//   int64_t loss_terms() const   the number of terms the loss averages (e.g. targets that are
//                                not ignored). Under data parallelism ranks holding different
//                                numbers are weighted by their share, so the ranks' averaged
//                                gradients are those of the mean over the global batch;
//   double target_weight         (with loss_terms) set by the engine to N / (all ranks' terms),
//                                or 0 when every rank holds the same number: the model then
//                                sums its terms times the weight instead of averaging, which
//                                also gives 0 (not NaN) on a rank with no terms. Without this
//                                member the engine scales the model's mean by the share.
#pragma once
#include <concepts>
#include <cstdint>

#include "tessera/nn/module.h"

namespace tessera::nn {

template <class Batch>
class LossModel : public Module {
 public:
  using Module::Module;
  using batch_type = Batch;
  // The scalar loss of the batch (a mean over its loss terms).
  virtual Tensor loss(const Batch& batch) = 0;
};

template <class B>
concept DeviceMovableBatch = requires(const B& b, Device d) {
  { b.to(d) } -> std::convertible_to<B>;
};

template <class B>
concept CountedBatch = requires(const B& b) {
  { b.loss_terms() } -> std::convertible_to<int64_t>;
};

template <class B>
concept WeightedBatch = CountedBatch<B> && requires(B& b) {
  b.target_weight = 1.0;
};

}  // namespace tessera::nn
