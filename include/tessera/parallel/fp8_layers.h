// FP8 training of a model's linear layers (Transformer Engine's te.Linear under
// fp8_autocast): the column- and row-parallel linears (every transformer layer's GEMMs in the
// reference models, and in users' models built from them) run their GEMM through fp8_linear
// once enable_fp8 has given them a scaling state; embeddings, heads and other nn::Linear
// layers stay in the model's dtype, as Transformer Engine leaves them.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/autograd/fp8_linear.h"
#include "tessera/nn/fp8_recipe.h"
#include "tessera/nn/module.h"

namespace tessera::parallel {

// A layer whose GEMM may run through FP8.
class Fp8GemmLayer {
 public:
  virtual ~Fp8GemmLayer() = default;
  std::shared_ptr<Fp8LinearScaling> fp8;  // null: the GEMM in the operands' dtype

 protected:
  Tensor gemm(const Tensor& x, const Tensor& weight, const Tensor& bias) const;
};

using Fp8Layers = std::vector<std::pair<std::string, std::shared_ptr<Fp8LinearScaling>>>;

// Gives every Fp8GemmLayer of `model` a fresh scaling state for `recipe` on `device`; returns
// them by module path, in module order (the same order on every rank of a layout).
Fp8Layers enable_fp8(nn::Module& model, const nn::Fp8Recipe& recipe, Device device);

}  // namespace tessera::parallel
