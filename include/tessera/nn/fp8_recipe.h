// Transformer Engine's DelayedScaling recipe: each FP8 tensor's scale comes from the amaxes
// of earlier steps (recipe.DelayedScaling: margin, fp8_format, amax_history_len,
// amax_compute_algo, reduce_amax; and the interval of its earlier releases).
//
// After each optimizer step, per tensor: the step's amax (the largest |x| its casts saw, over
// the step's micro-batches and, with reduce_amax, over the data- and tensor-parallel ranks)
// joins the history of the last amax_history_len amaxes; every `interval` steps the scale
// becomes
//   s = (fp8_max / a) / 2^margin,   a = max of the history ("max") or this step's ("most_recent")
// kept unchanged where a is 0 or not finite, and float32's largest value where s overflows.
// Transformer Engine moves the history at every fp8_autocast exit (each micro-batch's forward)
// and every backward; here once per optimizer step, so a step's micro-batches share their
// scales and any layout of the same global batch gives one process's scales.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/autograd/fp8_linear.h"

namespace tessera::nn {

enum class AmaxComputeAlgo { Max, MostRecent };

struct Fp8Recipe {
  bool hybrid = true;  // fp8_format "HYBRID" (E4M3 forward, E5M2 backward); false: "E4M3"
  int64_t margin = 0;
  int64_t interval = 1;
  int64_t amax_history_len = 1024;
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::Max;
  bool reduce_amax = true;

  Fp8Format forward_format() const { return Fp8Format::E4M3; }
  Fp8Format backward_format() const { return hybrid ? Fp8Format::E5M2 : Fp8Format::E4M3; }

  // The new scale of a tensor whose history (newest first) already holds this step's amax.
  float scale_from_history(const std::vector<float>& history, float scale, Fp8Format f) const;
  // Adds `amax` to t's history and, when `rescale`, sets t.scale from it.
  void update(Fp8TensorScaling& t, float amax, Fp8Format f, bool rescale) const;
};

// A fresh layer state for `recipe` (scales 1, empty histories, amaxes 0 on `device`).
std::shared_ptr<Fp8LinearScaling> make_fp8_linear_scaling(const Fp8Recipe& recipe, Device device);

}  // namespace tessera::nn
