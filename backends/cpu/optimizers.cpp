// Fused optimizer updates: one call updates every parameter of a group in place, each
// element independently (so any work split gives the same bits).
//   adamw_step  outputs: params[n], exp_avg[n], exp_avg_sq[n], [copies[n]]; inputs: grads[n];
//               attrs.optimizer_step: AdamWStepParams
//   sgd_step    outputs: params[n], [momentum_buffers[n]], [copies[n]]; inputs: grads[n];
//               attrs.optimizer_step: SgdStepParams (momentum buffers present when momentum != 0)
//   lamb_step   outputs: params[n], exp_avg[n], exp_avg_sq[n], [copies[n]]; inputs: grads[n];
//               attrs.optimizer_step: LambStepParams
// Mixed precision: grads may be 16-bit (the model's), each multiplied by grad_scale as it is
// read; `copies` (16-bit model tensors) then receive the updated parameters, cast.
//   sum_squares inputs tensors[n] (contiguous, one dtype); outputs [n] float64: each tensor's
//               sum of squares in double (fixed chunks, combined in order)
#include <cmath>
#include <vector>

#include "cpu_types.h"
#include "lane_sum.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

// Visits each of the n tensors' elements in parallel blocks: f(tensor index, begin, end).
template <class F>
void for_each_block(const KernelCall& c, size_t n, F f) {
  constexpr int64_t kBlock = 1 << 14;
  std::vector<std::pair<size_t, int64_t>> blocks;
  for (size_t t = 0; t < n; ++t)
    for (int64_t b = 0; b < c.outputs[t].numel(); b += kBlock) blocks.emplace_back(t, b);
  parallel_for(static_cast<int64_t>(blocks.size()), 1, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      const auto [t, b] = blocks[i];
      f(t, b, std::min(c.outputs[t].numel(), b + kBlock));
    }
  });
}

// The 16-bit model copy of tensor t (null when none).
template <class G>
G* copy_of(const KernelCall& c, size_t first_copy, size_t t) {
  return c.outputs.size() > first_copy ? c.outputs[first_copy + t].template data<G>() : nullptr;
}

// Sum of v*v in double over n values, in lane_sum's fixed order (Eigen's
// cast<double>().square().sum() ran at ~7 GB/s here).
template <class T>
double sum_of_squares(const T* p, int64_t n) {
  return lane_sum<double>(n, [&](int64_t i) {
    const double v = static_cast<double>(p[i]);
    return v * v;
  });
}

// One block of the AdamW/Adam update. The two switches are template parameters so the loop
// has no branches and the compiler vectorises it (with them as runtime tests it did not).
template <bool kDecoupled, bool kCopy, class T, class G>
void adam_block(T* p, T* m, T* v, G* copy, const G* g, int64_t b, int64_t e, T lr, T b1, T b2,
                T eps, T wd, T bc1, T bc2_sqrt, T scale) {
  const T step = lr / bc1;
  for (int64_t i = b; i < e; ++i) {
    T grad = T(load(g[i])) * scale;
    if constexpr (kDecoupled)
      p[i] -= lr * wd * p[i];
    else
      grad += wd * p[i];
    m[i] = b1 * m[i] + (T(1) - b1) * grad;
    v[i] = b2 * v[i] + (T(1) - b2) * grad * grad;
    const T denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] -= step * m[i] / denom;
    if constexpr (kCopy) copy[i] = store<G>(p[i]);
  }
}

template <class T>
struct AdamW {
  static void run(const KernelCall& c) {
    Types::visit_grad<T>(c, [&]<class G>() {
      const size_t n = c.inputs.size();
      const auto& s = optimizer_step_params<AdamWStepParams>(c.attrs.optimizer_step, "adamw_step");
      const T lr = T(s.lr), b1 = T(s.beta1), b2 = T(s.beta2), eps = T(s.eps);
      const T wd = T(s.weight_decay), bc1 = T(s.bias_correction1);
      const T bc2_sqrt = T(std::sqrt(s.bias_correction2));
      const bool decoupled = s.decoupled;
      const T scale = T(s.grad_scale);
      for_each_block(c, n, [&](size_t t, int64_t b, int64_t e) {
        T* p = c.outputs[t].data<T>();
        T* m = c.outputs[n + t].data<T>();
        T* v = c.outputs[2 * n + t].data<T>();
        G* copy = copy_of<G>(c, 3 * n, t);
        const G* g = c.inputs[t].data<G>();
        const auto run = [&]<bool kDecoupled, bool kCopy>() {
          adam_block<kDecoupled, kCopy>(p, m, v, copy, g, b, e, lr, b1, b2, eps, wd, bc1, bc2_sqrt,
                                        scale);
        };
        if (decoupled)
          copy ? run.template operator()<true, true>() : run.template operator()<true, false>();
        else
          copy ? run.template operator()<false, true>() : run.template operator()<false, false>();
      });
    });
  }
};

template <class T>
struct Sgd {
  static void run(const KernelCall& c) {
    Types::visit_grad<T>(c, [&]<class G>() {
      const size_t n = c.inputs.size();
      const auto& s = optimizer_step_params<SgdStepParams>(c.attrs.optimizer_step, "sgd_step");
      const T lr = T(s.lr), mom = T(s.momentum), damp = T(s.dampening), wd = T(s.weight_decay);
      const bool nesterov = s.nesterov, first = s.first_step;
      const T scale = T(s.grad_scale);
      const size_t first_copy = mom != T(0) ? 2 * n : n;
      for_each_block(c, n, [&](size_t t, int64_t b, int64_t e) {
        T* p = c.outputs[t].data<T>();
        T* buf = mom != T(0) ? c.outputs[n + t].data<T>() : nullptr;
        G* copy = copy_of<G>(c, first_copy, t);
        const G* g = c.inputs[t].data<G>();
        for (int64_t i = b; i < e; ++i) {
          T d = T(load(g[i])) * scale + wd * p[i];
          if (buf) {
            buf[i] = first ? d : mom * buf[i] + (T(1) - damp) * d;
            d = nesterov ? d + mom * buf[i] : buf[i];
          }
          p[i] -= lr * d;
          if (copy) copy[i] = store<G>(p[i]);
        }
      });
    });
  }
};

// LAMB (You et al. 2019): the Adam direction plus weight decay, scaled per tensor by the
// trust ratio ||p|| / ||update|| clamped to [min_coeff, max_coeff].
template <class T>
struct Lamb {
  static void run(const KernelCall& c) {
    Types::visit_grad<T>(c, [&]<class G>() {
      const size_t n = c.inputs.size();
      const auto& s = optimizer_step_params<LambStepParams>(c.attrs.optimizer_step, "lamb_step");
      const T lr = T(s.lr), b1 = T(s.beta1), b2 = T(s.beta2), eps = T(s.eps);
      const T wd = T(s.weight_decay), bc1 = T(s.bias_correction1), bc2 = T(s.bias_correction2);
      const T max_c = T(s.max_coeff), min_c = T(s.min_coeff), scale = T(s.grad_scale);
      parallel_for(static_cast<int64_t>(n), 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          T* p = c.outputs[t].data<T>();
          T* m = c.outputs[n + t].data<T>();
          T* v = c.outputs[2 * n + t].data<T>();
          G* copy = copy_of<G>(c, 3 * n, t);
          const G* g = c.inputs[t].data<G>();
          const int64_t len = c.outputs[t].numel();
          std::vector<T> update(static_cast<size_t>(len));
          for (int64_t i = 0; i < len; ++i) {
            const T gi = T(load(g[i])) * scale;
            m[i] = b1 * m[i] + (T(1) - b1) * gi;
            v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
            update[i] = (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps) + wd * p[i];
          }
          const double p_norm = std::sqrt(sum_of_squares(p, len));
          const double u_norm = std::sqrt(sum_of_squares(update.data(), len));
          T ratio = (p_norm > 0 && u_norm > 0) ? T(p_norm / u_norm) : T(1);
          ratio = std::min(max_c, std::max(min_c, ratio));
          for (int64_t i = 0; i < len; ++i) p[i] -= lr * ratio * update[i];
          if (copy)
            for (int64_t i = 0; i < len; ++i) copy[i] = store<G>(p[i]);
        }
      });
    });
  }
};

// Each tensor is cut into fixed chunks summed in parallel (double), then each tensor's chunks
// are added in order: the same bits at any thread count.
template <class T>
struct SumSquares {
  static void run(const KernelCall& c) {
    constexpr int64_t kChunk = 1 << 15;
    std::vector<std::pair<size_t, int64_t>> chunks;
    std::vector<size_t> first(c.inputs.size() + 1, 0);
    for (size_t t = 0; t < c.inputs.size(); ++t) {
      first[t] = chunks.size();
      for (int64_t b = 0; b < c.inputs[t].numel(); b += kChunk) chunks.emplace_back(t, b);
    }
    first[c.inputs.size()] = chunks.size();
    std::vector<double> partial(chunks.size(), 0.0);
    parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const auto [t, b] = chunks[k];
        const T* p = c.inputs[t].data<T>();
        const int64_t e = std::min(c.inputs[t].numel(), b + kChunk);
        if constexpr (std::is_floating_point_v<T>) {
          partial[k] = sum_of_squares(p + b, e - b);
        } else {
          double s = 0;
          for (int64_t i = b; i < e; ++i) {
            const double v = static_cast<double>(load(p[i]));
            s += v * v;
          }
          partial[k] = s;
        }
      }
    });
    double* out = c.outputs[0].data<double>();
    for (size_t t = 0; t < c.inputs.size(); ++t) {
      double s = 0;
      for (size_t k = first[t]; k < first[t + 1]; ++k) s += partial[k];
      out[t] = s;
    }
  }
};

const bool registered = [] {
  for (DType d : {DType::Float32, DType::Float64}) {
    const bool f = d == DType::Float32;
    register_kernel(Kernel::adamw_step, DeviceType::CPU, d,
                    f ? &AdamW<float>::run : &AdamW<double>::run);
    register_kernel(Kernel::sgd_step, DeviceType::CPU, d, f ? &Sgd<float>::run : &Sgd<double>::run);
    register_kernel(Kernel::lamb_step, DeviceType::CPU, d,
                    f ? &Lamb<float>::run : &Lamb<double>::run);
  }
  register_floating<SumSquares>(Kernel::sum_squares);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
