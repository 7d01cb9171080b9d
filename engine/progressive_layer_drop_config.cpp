#include "tessera/engine/progressive_layer_drop_config.h"

#include <cmath>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/pipeline_config.h"

namespace tessera::engine {

void ProgressiveLayerDropConfig::parse(io::config::Section& s, ProgressiveLayerDropConfig& out) {
  s.notes({{"",
            "DeepSpeed's progressive layer drop: transformer layers skipped at random, "
            "deeper ones and later in training more often (docs/training.md)"},
           {"enabled", "skip layers during training"},
           {"theta", "the keep probability training tends to"},
           {"gamma", "how fast: theta-bar(t) = (1 - theta) exp(-gamma t) + theta"}});
  s.get("enabled", out.enabled);
  nn::ProgressiveLayerDropOptions& o = out.options;
  s.get("theta", o.theta);
  s.expect("theta", o.theta >= 0 && o.theta <= 1, o.theta, "in [0, 1]");
  s.get("gamma", o.gamma);
  s.expect("gamma", o.gamma >= 0 && std::isfinite(o.gamma), o.gamma, "a number >= 0");
}

const ProgressiveLayerDropConfig& progressive_layer_drop_config(const io::TrainConfig& cfg) {
  return cfg.section<ProgressiveLayerDropConfig>();
}

namespace {

// A pipeline learns each stage's dropout offsets on its first batch and assumes them fixed;
// skipped layers would move them (and DeepSpeed's pipeline modules take no PLD arguments).
void check_progressive_layer_drop(io::TrainConfig& cfg) {
  if (!progressive_layer_drop_config(cfg).enabled) return;
  parallel::refuse_pipeline_stages(cfg, "progressive_layer_drop",
                                   "a pipeline's stages draw their dropout masks at offsets "
                                   "fixed on the first batch, which skipped layers would move");
}

const io::RegisterConfigSection<ProgressiveLayerDropConfig> kProgressiveLayerDropSection{
    "progressive_layer_drop", check_progressive_layer_drop};

}  // namespace

}  // namespace tessera::engine
