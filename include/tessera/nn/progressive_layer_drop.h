// Progressive layer drop (Zhang and He, "Accelerating Training of Transformer-Based Language
// Models with Progressive Layer Dropping", 2020; DeepSpeed's "progressive_layer_drop"):
// during training each transformer layer is skipped at random, more often as training goes on
// and more often the deeper it is.
//
// The global keep probability follows DeepSpeed's ProgressiveLayerDrop: theta-bar(t) =
// (1 - theta) exp(-gamma t) + theta, where t is the step DeepSpeed's engine last passed to
// update_state (the forwards of global step s see t = s - 1; step 0 sees 1). Layer l of L
// (1-based) is kept with p_l = 1 - (l / L)(1 - theta-bar), the paper's rule; a kept layer's
// residual branches are scaled by 1 / p_l so each layer's expected output is unchanged, and a
// skipped layer passes its input through. (DeepSpeedExamples' bing_bert draws layer l with
// p_{l-1} and scales it by 1 / p_l; Tessera keeps the paper's one probability per layer.)
//
// Every rank draws the same choices: they are Philox numbers of (seed, global step,
// micro-batch, layer), not of any generator the model's dropout uses, so data, tensor and
// sequence parallel ranks reproduce one process and a run whose layers are all kept is bit for
// bit the run without the feature.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::nn {

struct ProgressiveLayerDropOptions {
  double theta = 0.5;    // the keep probability training tends to (DeepSpeed's default)
  double gamma = 0.001;  // how fast it gets there
};

class ProgressiveLayerDrop {
 public:
  ProgressiveLayerDrop(ProgressiveLayerDropOptions options, uint64_t seed);

  // DeepSpeed's ProgressiveLayerDrop._prob(t): (1 - theta) exp(-gamma t) + theta.
  double theta_after(int64_t t) const;
  // What the training forwards of `global_step` see (DeepSpeed's pld_theta): 1 at step 0,
  // else theta_after(global_step - 1).
  double theta_at(int64_t global_step) const;
  // Layer `layer` (0-based) of `layers`: 1 - ((layer + 1) / layers)(1 - theta).
  static double keep_probability(double theta, int64_t layer, int64_t layers);

  // The training forward about to run: micro-batch `micro_batch` of `global_step`.
  void begin_forward(int64_t global_step, int64_t micro_batch);
  int64_t global_step() const { return step_; }
  double theta() const { return theta_at(step_); }

  // One layer's part in the current forward: run it with its residual branches scaled by
  // `scale` (1 / keep probability), or skip it.
  struct LayerChoice {
    bool keep = true;
    double scale = 1.0;
  };
  // The current forward's choice for each of `layers` layers.
  std::vector<LayerChoice> choices(int64_t layers) const;
  const ProgressiveLayerDropOptions& options() const { return options_; }

 private:
  ProgressiveLayerDropOptions options_;
  uint64_t seed_;
  int64_t step_ = 0, micro_batch_ = 0;
};

// The layers a forward runs, in order: each kept layer's index and branch scale. Every layer,
// unscaled, without `layer_drop` or outside training.
struct KeptLayer {
  int64_t index;
  double scale;
};
std::vector<KeptLayer> kept_layers(const ProgressiveLayerDrop* layer_drop, bool training,
                                   int64_t layers);
// A kept layer's residual branch times its scale (the branch itself at scale 1: bit for bit the
// run without the feature).
Tensor scale_branch(const Tensor& branch, double scale);

}  // namespace tessera::nn
