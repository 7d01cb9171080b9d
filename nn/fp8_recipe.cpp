#include "tessera/nn/fp8_recipe.h"

#include <cfloat>
#include <cmath>

#include "tessera/ops.h"

namespace tessera::nn {

float Fp8Recipe::scale_from_history(const std::vector<float>& history, float scale,
                                    Fp8Format f) const {
  TS_CHECK(!history.empty(), "Fp8Recipe: an empty amax history");
  float amax = history.front();
  if (amax_compute_algo == AmaxComputeAlgo::Max)
    for (const float a : history)
      if (a != a || a > amax) amax = a;  // (torch.max: a NaN wins)
  if (!(amax > 0.0f) || !std::isfinite(amax)) return scale;
  // In float32, as torch computes (fp8_max / amax) / 2**margin on a float32 tensor.
  float s = fp8::max_value(f) / amax;
  s = s / std::ldexp(1.0f, static_cast<int>(margin));
  // (A scale that underflows, at a margin near 2^64, becomes float32's smallest normal: a zero
  // scale would have no inverse.)
  return std::isinf(s) ? FLT_MAX : s < FLT_MIN ? FLT_MIN : s;
}

void Fp8Recipe::update(Fp8TensorScaling& t, float amax, Fp8Format f, bool rescale) const {
  t.history.insert(t.history.begin(), amax);
  if (static_cast<int64_t>(t.history.size()) > amax_history_len)
    t.history.resize(static_cast<size_t>(amax_history_len));
  if (rescale) t.scale = scale_from_history(t.history, t.scale, f);
}

std::shared_ptr<Fp8LinearScaling> make_fp8_linear_scaling(const Fp8Recipe& recipe, Device device) {
  auto s = std::make_shared<Fp8LinearScaling>();
  s->forward_format = recipe.forward_format();
  s->backward_format = recipe.backward_format();
  for (Fp8TensorScaling* t : {&s->input, &s->weight, &s->grad_output})
    t->amax = zeros({1}, DType::Float32, device);
  return s;
}

}  // namespace tessera::nn
