#include "tessera/parallel/fp8_layers.h"

#include "tessera/ops.h"

namespace tessera::parallel {

Tensor Fp8GemmLayer::gemm(const Tensor& x, const Tensor& weight, const Tensor& bias) const {
  return linear_or_fp8(x, weight, bias, fp8);
}

namespace {

void collect(nn::Module& m, const std::string& path, const nn::Fp8Recipe& recipe, Device device,
             Fp8Layers& out) {
  if (auto* layer = dynamic_cast<Fp8GemmLayer*>(&m)) {
    layer->fp8 = nn::make_fp8_linear_scaling(recipe, device);
    out.emplace_back(path, layer->fp8);
  }
  for (auto& [name, child] : m.named_children())
    collect(*child, path.empty() ? name : path + "." + name, recipe, device, out);
}

}  // namespace

Fp8Layers enable_fp8(nn::Module& model, const nn::Fp8Recipe& recipe, Device device) {
  Fp8Layers out;
  collect(model, "", recipe, device, out);
  return out;
}

}  // namespace tessera::parallel
