// Tessera's "fp8" section: FP8 training in Transformer Engine's style (nn/fp8_recipe.h has
// the recipe, parallel/fp8_layers.h the layers it applies to):
//
//   "fp8": {"enabled": true, "fp8_format": "HYBRID", "margin": 0, "interval": 1,
//           "amax_history_len": 1024, "amax_compute_algo": "max", "reduce_amax": true}
//
// The engine gives the model's linear layers their scaling state, updates the scales after
// each optimizer step and keeps them in its checkpoints. On CPU (and, until cuBLASLt's FP8
// GEMMs are wired, on CUDA) the FP8 GEMM is emulated: the same FP8 numbers, a float32 GEMM.
#pragma once
#include "tessera/io/config_section.h"
#include "tessera/nn/fp8_recipe.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::engine {

struct Fp8Config {
  bool enabled = false;
  nn::Fp8Recipe recipe;

  static void parse(io::config::Section& s, Fp8Config& out);
};

// The config's fp8 section (its defaults when the file has none).
const Fp8Config& fp8_config(const io::TrainConfig& cfg);

}  // namespace tessera::engine
