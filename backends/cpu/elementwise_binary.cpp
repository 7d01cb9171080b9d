// Binary elementwise kernels, comparisons and where. Inputs arrive already broadcast to the
// output shape (expanded views, stride 0 on broadcast dims) and share one dtype; the output
// is contiguous. Unit-stride and scalar-operand rows get tight loops the compiler vectorises.
#include <cmath>

#include "cpu_types.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

template <class Op, class T, class Out>
void binary_loop(const KernelCall& c) {
  const T* a = c.inputs[0].data<T>();
  const T* b = c.inputs[1].data<T>();
  Out* y = c.outputs[0].data<Out>();
  for_each_row<2>(c.outputs[0].shape(), {&c.inputs[0].strides(), &c.inputs[1].strides()},
                  [&](auto off, int64_t len, auto st, int64_t row) {
                    const T* pa = a + off[0];
                    const T* pb = b + off[1];
                    Out* o = y + row * len;
                    if (st[0] == 1 && st[1] == 1) {
                      for (int64_t j = 0; j < len; ++j) o[j] = Op::template f<T, Out>(pa[j], pb[j]);
                    } else if (st[0] == 1 && st[1] == 0) {
                      const T vb = *pb;
                      for (int64_t j = 0; j < len; ++j) o[j] = Op::template f<T, Out>(pa[j], vb);
                    } else if (st[0] == 0 && st[1] == 1) {
                      const T va = *pa;
                      for (int64_t j = 0; j < len; ++j) o[j] = Op::template f<T, Out>(va, pb[j]);
                    } else {
                      for (int64_t j = 0; j < len; ++j)
                        o[j] = Op::template f<T, Out>(pa[j * st[0]], pb[j * st[1]]);
                    }
                  });
}

#define TS_BINARY(Name, expr)                       \
  struct Name {                                     \
    template <class T, class Out>                   \
    static inline Out f(const T& ta, const T& tb) { \
      const auto a = load(ta);                      \
      const auto b = load(tb);                      \
      return Out(expr);                             \
    }                                               \
  };

TS_BINARY(Add, a + b)
TS_BINARY(Sub, a - b)
TS_BINARY(Mul, a* b)
TS_BINARY(Div, a / b)
TS_BINARY(Pow, std::pow(a, b))
TS_BINARY(Eq, a == b)
TS_BINARY(Ne, a != b)
TS_BINARY(Lt, a < b)
TS_BINARY(Le, a <= b)
TS_BINARY(Gt, a > b)
TS_BINARY(Ge, a >= b)

template <class Op>
struct Arith {
  template <class T>
  struct K {
    static void run(const KernelCall& c) { binary_loop<Op, T, T>(c); }
  };
};
template <class Op>
struct Compare {
  template <class T>
  struct K {
    static void run(const KernelCall& c) { binary_loop<Op, T, bool>(c); }
  };
};

// inputs: cond (bool), a, b; all broadcast views of the output shape.
template <class T>
struct Where {
  static void run(const KernelCall& c) {
    const bool* m = c.inputs[0].data<bool>();
    const T* a = c.inputs[1].data<T>();
    const T* b = c.inputs[2].data<T>();
    T* y = c.outputs[0].data<T>();
    for_each_row<3>(c.outputs[0].shape(),
                    {&c.inputs[0].strides(), &c.inputs[1].strides(), &c.inputs[2].strides()},
                    [&](auto off, int64_t len, auto st, int64_t row) {
                      T* o = y + row * len;
                      for (int64_t j = 0; j < len; ++j)
                        o[j] =
                            m[off[0] + j * st[0]] ? a[off[1] + j * st[1]] : b[off[2] + j * st[2]];
                    });
  }
};

const bool registered = [] {
  register_numeric<Arith<Add>::K>(Kernel::add);
  register_numeric<Arith<Sub>::K>(Kernel::sub);
  register_numeric<Arith<Mul>::K>(Kernel::mul);
  register_floating<Arith<Div>::K>(Kernel::div);
  register_floating<Arith<Pow>::K>(Kernel::pow);
  register_all<Compare<Eq>::K>(Kernel::eq);
  register_all<Compare<Ne>::K>(Kernel::ne);
  register_numeric<Compare<Lt>::K>(Kernel::lt);
  register_numeric<Compare<Le>::K>(Kernel::le);
  register_numeric<Compare<Gt>::K>(Kernel::gt);
  register_numeric<Compare<Ge>::K>(Kernel::ge);
  register_all<Where>(Kernel::where);
  register_kernel(Kernel::add, DeviceType::CPU, DType::Bool, &Arith<Add>::K<bool>::run);
  register_kernel(Kernel::mul, DeviceType::CPU, DType::Bool, &Arith<Mul>::K<bool>::run);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
