// The hyper-parameters of one fused optimizer update (adamw_step, sgd_step, lamb_step), named,
// so that the optimizer and the CPU and CUDA kernels cannot disagree on an order.
#pragma once
#include <variant>

#include "tessera/error.h"

namespace tessera {

struct AdamWStepParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  double bias_correction1 = 1, bias_correction2 = 1;  // 1 - beta^t, or 1 when disabled
  bool decoupled = true;                              // AdamW; false: Adam with L2 in the gradient
  double grad_scale = 1;                              // multiplies each gradient as it is read
};

struct SgdStepParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer starts as the first gradient
  double grad_scale = 1;
};

struct LambStepParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  double bias_correction1 = 1, bias_correction2 = 1;
  double max_coeff = 10, min_coeff = 0.01;  // the trust ratio's clamp
  double grad_scale = 1;
};

using OptimizerStepParams =
    std::variant<std::monostate, AdamWStepParams, SgdStepParams, LambStepParams>;

// The parameters of kind P in `params`; a kernel called with another kind is a caller bug.
template <class P>
const P& optimizer_step_params(const OptimizerStepParams& params, const char* kernel) {
  const P* p = std::get_if<P>(&params);
  TS_CHECK(p != nullptr, kernel, ": called without its optimizer step parameters");
  return *p;
}

}  // namespace tessera
