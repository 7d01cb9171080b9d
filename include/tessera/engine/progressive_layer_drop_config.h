// DeepSpeed's "progressive_layer_drop" section (nn/progressive_layer_drop.h has the rule):
//
//   "progressive_layer_drop": {"enabled": true, "theta": 0.5, "gamma": 0.001}
//
// The engine builds the layer-drop state from it (Engine::progressive_layer_drop()) and
// advances it every training forward; launch gives it to the built-in models (GPT-2, BERT).
#pragma once
#include "tessera/io/config_section.h"
#include "tessera/nn/progressive_layer_drop.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::engine {

struct ProgressiveLayerDropConfig {
  bool enabled = false;
  nn::ProgressiveLayerDropOptions options;

  static void parse(io::config::Section& s, ProgressiveLayerDropConfig& out);
};

// The config's progressive_layer_drop section (its defaults when the file has none).
const ProgressiveLayerDropConfig& progressive_layer_drop_config(const io::TrainConfig& cfg);

}  // namespace tessera::engine
