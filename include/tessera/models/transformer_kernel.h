// Tessera's "transformer_kernel" config section: with `"model": {"transformer_kernel": true}`
// the built-in models' layers run as DeepSpeed's transformer kernel (BERT: q, k and v as one
// GEMM; both models: the section's memory options and attention-probability dropout). The
// parameters, their names and the math stay the model's (Hugging Face's), so weights load and
// export as without it, and each option changes results only by rounding.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tessera/nn/transformer_kernel.h"

namespace tessera::io {
struct TrainConfig;
namespace config {
class Section;
}
}  // namespace tessera::io

namespace tessera::models {

struct TransformerKernelConfig {
  bool stated = false;                   // the section is in the file
  std::vector<std::string> stated_keys;  // its keys (the first names an error)
  nn::TransformerKernelOptions options;
  static void parse(io::config::Section& s, TransformerKernelConfig& out);
};

// The section's options when model.transformer_kernel is true; none otherwise.
std::optional<nn::TransformerKernelOptions> transformer_kernel_of(const io::TrainConfig& cfg);

// A model config with the training config's kernel options (when model.transformer_kernel).
template <class ModelConfig>
ModelConfig with_transformer_kernel(ModelConfig c, const io::TrainConfig& cfg) {
  c.transformer_kernel = transformer_kernel_of(cfg);
  return c;
}

}  // namespace tessera::models
