#include <cmath>
#include <sstream>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/testing.h"

namespace tessera::testing {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  GradcheckResult r;
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) {
      TS_CHECK(t.dtype() == DType::Float64 && t.device().is_cpu(),
               "gradcheck: differentiable inputs must be float64 on cpu, got ", t.describe());
      xs.push_back(t.detach().clone().requires_grad_(true));
    } else {
      xs.push_back(t);
    }
  }
  Tensor v;
  {
    Generator gen(opt.seed);
    NoGradGuard no_grad;
    const Tensor probe = fn(xs);
    v = randn(probe.shape(), DType::Float64, Device::cpu(), &gen);
  }
  sum(fn(xs) * v).backward();

  auto objective = [&]() {
    NoGradGuard no_grad;
    return sum(fn(xs) * v).item();
  };
  std::ostringstream os;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].defined() || !xs[i].requires_grad()) continue;
    const Tensor analytic = xs[i].grad().defined() ? xs[i].grad() : zeros_like(xs[i]);
    const std::vector<double> ga = analytic.to_vector();
    double* p = xs[i].data<double>();
    TS_CHECK(xs[i].is_contiguous(), "gradcheck: internal copy is not contiguous");
    for (int64_t j = 0; j < xs[i].numel(); ++j) {
      const double orig = p[j];
      p[j] = orig + opt.eps;
      const double up = objective();
      p[j] = orig - opt.eps;
      const double down = objective();
      p[j] = orig;
      const double numeric = (up - down) / (2 * opt.eps);
      const double err = std::fabs(numeric - ga[j]);
      r.max_abs_error = std::max(r.max_abs_error, err);
      if (!(err <= opt.atol + opt.rtol * std::fabs(numeric))) {
        if (r.ok) {
          os.precision(10);
          os << "gradient of input " << i << " (" << xs[i].describe() << ") at flat index " << j
             << ": analytic " << ga[j] << ", finite difference " << numeric;
        }
        r.ok = false;
      }
    }
  }
  r.message = r.ok ? "ok" : os.str();
  return r;
}

}  // namespace tessera::testing
