// dropout: y = x * keep / (1 - p) with keep = philox_packed_uniform(seed, offset + i) >= p
// (four elements per Philox draw). Backward is the same kernel applied to the gradient with
// the same (seed, offset), so no mask is stored. inputs: x (contiguous); attrs: scalar = p,
// seed, offset. bias_dropout_add fuses the bias add before it and the residual add after.
#include "cpu_types.h"
#include "parallel.h"
#include "tessera/philox.h"

namespace tessera::cpu {
namespace {

// 1 / (1 - p) from the double p, rounded once to the compute type (as PyTorch); 0 at p = 1.
template <class A>
A dropout_scale(double p) {
  return p < 1.0 ? A(1.0 / (1.0 - p)) : A(0);
}

// Runs body(b, e, keep) over the thread chunks of the output; keep(i), called for i = b .. e-1
// in order, says whether element i survives: its packed Philox uniform is >= p.
template <class F>
void walk_dropout_mask(const KernelCall& c, F body) {
  const float p = static_cast<float>(c.attrs.scalar);
  const uint64_t seed = c.attrs.seed, offset = c.attrs.offset;
  parallel_for(c.outputs[0].numel(), 1 << 14, [&](int64_t b, int64_t e) {
    philox::Words r{};
    const auto keep = [&r, b, p, seed, offset](int64_t i) {
      const uint64_t q = offset + static_cast<uint64_t>(i);
      if (i == b || (q & 3) == 0) r = philox::draw_packed(seed, q);
      return philox::packed_uniform(r, q) >= p;
    };
    body(b, e, keep);
  });
}

template <class T>
struct Dropout {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const T* x = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    const A scale = dropout_scale<A>(c.attrs.scalar);
    walk_dropout_mask(c, [&](int64_t b, int64_t e, auto keep) {
      for (int64_t i = b; i < e; ++i) y[i] = T(keep(i) ? A(load(x[i])) * scale : A(0));
    });
  }
};

// v as computed: not merged into an FMA with the add that follows (the unfused ops store the
// dropout's product before the residual add reads it, rounding it on its own).
template <class A>
inline A rounded_alone(A v) {
  asm volatile("" : "+x"(v));
  return v;
}

// bias_dropout_add: inputs x [rows * C], residual (x's shape) and, when there are three, bias
// [C]; y = residual + dropout(x + bias), each step rounded to T as add, dropout and add give
// it: one pass for the three ops. Backward is the dropout kernel on the gradient (the same
// seed and offset).
template <class T>
struct BiasDropoutAdd {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const T* x = c.inputs[0].data<T>();
    const T* residual = c.inputs[1].data<T>();
    const bool with_bias = c.inputs.size() > 2;
    const T* bias = with_bias ? c.inputs[2].data<T>() : nullptr;
    const int64_t width = with_bias ? c.inputs[2].numel() : 1;
    T* y = c.outputs[0].data<T>();
    const A scale = dropout_scale<A>(c.attrs.scalar);
    walk_dropout_mask(c, [&](int64_t b, int64_t e, auto keep) {
      int64_t col = b % width;  // (the bias's column, walked)
      for (int64_t i = b; i < e; ++i, col = col + 1 == width ? 0 : col + 1) {
        const T z = with_bias ? store<T>(A(load(x[i])) + A(load(bias[col]))) : x[i];
        const T dropped = T(keep(i) ? rounded_alone(A(load(z)) * scale) : A(0));
        y[i] = store<T>(A(load(residual[i])) + A(load(dropped)));
      }
    });
  }
};

const bool registered = [] {
  register_floating<Dropout>(Kernel::dropout);
  register_floating<BiasDropoutAdd>(Kernel::bias_dropout_add);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
