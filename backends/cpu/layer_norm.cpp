// Fused layer_norm over the last dim of a contiguous [N, C] input.
// forward  inputs: x, weight (optional), bias (optional); attrs.scalar = eps
//          outputs: y [N, C], mean [N], rstd [N] (mean/rstd in the compute type's dtype)
// backward inputs: dy, x, mean, rstd, weight (optional)
//          outputs: dx, dweight (optional), dbias (optional)
#include <cmath>
#include <vector>

#include "cpu_types.h"
#include "lane_sum.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

template <class T>
struct LayerNorm {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase& x = c.inputs[0];
    const int64_t C = x.shape()[1], N = x.shape()[0];
    const T* px = x.data<T>();
    const T* w = c.inputs[1].defined() ? c.inputs[1].data<T>() : nullptr;
    const T* b = c.inputs[2].defined() ? c.inputs[2].data<T>() : nullptr;
    T* y = c.outputs[0].data<T>();
    A* mean = c.outputs[1].data<A>();
    A* rstd = c.outputs[2].data<A>();
    const A eps = static_cast<A>(c.attrs.scalar);
    parallel_for(N, std::max<int64_t>(1, 4096 / std::max<int64_t>(C, 1)),
                 [&](int64_t s, int64_t e) {
                   for (int64_t r = s; r < e; ++r) {
                     const T* xr = px + r * C;
                     const A m = lane_sum<A>(C, [&](int64_t j) { return A(load(xr[j])); }) / A(C);
                     const A v = lane_sum<A>(C, [&](int64_t j) {
                       const A d = A(load(xr[j])) - m;
                       return d * d;
                     });
                     const A rs = A(1) / std::sqrt(v / A(C) + eps);
                     mean[r] = m;
                     rstd[r] = rs;
                     T* yr = y + r * C;
                     // Branch-free loops (so they vectorise) for each weight/bias case.
                     if (w && b) {
                       for (int64_t j = 0; j < C; ++j)
                         yr[j] = T((A(load(xr[j])) - m) * rs * A(load(w[j])) + A(load(b[j])));
                     } else if (w) {
                       for (int64_t j = 0; j < C; ++j)
                         yr[j] = T((A(load(xr[j])) - m) * rs * A(load(w[j])));
                     } else {
                       for (int64_t j = 0; j < C; ++j) {
                         A o = (A(load(xr[j])) - m) * rs;
                         if (b) o += A(load(b[j]));
                         yr[j] = T(o);
                       }
                     }
                   }
                 });
  }
};

template <class T>
struct LayerNormBackward {
  static constexpr int64_t kRowsPerBlock = 32;  // fixed, so dweight/dbias sum in a fixed order

  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const T* dy = c.inputs[0].data<T>();
    const T* x = c.inputs[1].data<T>();
    const A* mean = c.inputs[2].data<A>();
    const A* rstd = c.inputs[3].data<A>();
    const T* w = c.inputs[4].defined() ? c.inputs[4].data<T>() : nullptr;
    const int64_t N = c.inputs[1].shape()[0], C = c.inputs[1].shape()[1];
    T* dx = c.outputs[0].data<T>();
    const bool want_dw = c.outputs.size() > 1 && c.outputs[1].defined();
    const bool want_db = c.outputs.size() > 2 && c.outputs[2].defined();
    const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    std::vector<A> part_dw(want_dw ? blocks * C : 0), part_db(want_db ? blocks * C : 0);
    parallel_for(blocks, 1, [&](int64_t s, int64_t e) {
      for (int64_t blk = s; blk < e; ++blk) {
        A* pdw = want_dw ? part_dw.data() + blk * C : nullptr;
        A* pdb = want_db ? part_db.data() + blk * C : nullptr;
        for (int64_t r = blk * kRowsPerBlock; r < std::min(N, (blk + 1) * kRowsPerBlock); ++r) {
          const T* dyr = dy + r * C;
          const T* xr = x + r * C;
          const A m = mean[r], rs = rstd[r];
          // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; one branch-free
          // body per weight case, so the loops vectorise.
          const auto row = [&]<bool kW>() {
            const auto xhat = [&](int64_t j) { return (A(load(xr[j])) - m) * rs; };
            const auto g = [&](int64_t j) {
              if constexpr (kW)
                return A(load(dyr[j])) * A(load(w[j]));
              else
                return A(load(dyr[j]));
            };
            const A mean_g = lane_sum<A>(C, g) / A(C);
            const A mean_gx = lane_sum<A>(C, [&](int64_t j) { return g(j) * xhat(j); }) / A(C);
            if (pdw)
              for (int64_t j = 0; j < C; ++j) pdw[j] += A(load(dyr[j])) * xhat(j);
            if (pdb)
              for (int64_t j = 0; j < C; ++j) pdb[j] += A(load(dyr[j]));
            T* dxr = dx + r * C;
            for (int64_t j = 0; j < C; ++j) dxr[j] = T(rs * (g(j) - mean_g - xhat(j) * mean_gx));
          };
          w ? row.template operator()<true>() : row.template operator()<false>();
        }
      }
    });
    auto finish = [&](std::vector<A>& part, TensorBase& out) {
      T* o = out.data<T>();
      for (int64_t j = 0; j < C; ++j) {
        A s = 0;
        for (int64_t blk = 0; blk < blocks; ++blk) s += part[blk * C + j];
        o[j] = T(s);
      }
    };
    if (want_dw) finish(part_dw, c.outputs[1]);
    if (want_db) finish(part_db, c.outputs[2]);
  }
};

const bool registered = [] {
  register_floating<LayerNorm>(Kernel::layer_norm);
  register_floating<LayerNormBackward>(Kernel::layer_norm_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
