// What the CPU and CUDA backends share about element types: they store every DType as the
// same C++ type except the two 16-bit floats (Eigen's on the CPU, CUDA's on the GPU). Given
// those, this visits a dtype as its element type and registers a kernel template for every
// dtype of a class.
#pragma once
#include <cstdint>
#include <utility>

#include "tessera/dispatch.h"

namespace tessera::backend {

template <DeviceType kDevice, class Half, class BFloat16>
struct ElementTypes {
  // Calls f.template operator()<T>() with T the element type of `dtype`.
  template <class F>
  static decltype(auto) visit(DType dtype, F&& f) {
    switch (dtype) {
      case DType::Bool:
        return f.template operator()<bool>();
      case DType::Int32:
        return f.template operator()<int32_t>();
      case DType::Int64:
        return f.template operator()<int64_t>();
      case DType::Float16:
        return f.template operator()<Half>();
      case DType::BFloat16:
        return f.template operator()<BFloat16>();
      case DType::Float32:
        return f.template operator()<float>();
      case DType::Float64:
        return f.template operator()<double>();
    }
    return f.template operator()<float>();
  }

  // Optimizer kernels registered for parameter type T: calls f.template operator()<G>() with
  // G the gradients' element type, T itself or a 16-bit float (mixed precision).
  template <class T, class F>
  static void visit_grad(const KernelCall& c, F&& f) {
    const DType d = c.inputs[0].dtype();
    if (d == DType::Float16) return f.template operator()<Half>();
    if (d == DType::BFloat16) return f.template operator()<BFloat16>();
    TS_CHECK(d == c.outputs[0].dtype(), "optimizer step: gradients of dtype ", dtype_name(d),
             " for parameters of dtype ", dtype_name(c.outputs[0].dtype()));
    return f.template operator()<T>();
  }

  // Registers Fn<T>::run for every floating dtype (numeric: and the integers; all: and bool).
  template <template <class> class Fn>
  static void register_floating(Kernel k) {
    register_kernel(k, kDevice, DType::Float16, &Fn<Half>::run);
    register_kernel(k, kDevice, DType::BFloat16, &Fn<BFloat16>::run);
    register_kernel(k, kDevice, DType::Float32, &Fn<float>::run);
    register_kernel(k, kDevice, DType::Float64, &Fn<double>::run);
  }
  template <template <class> class Fn>
  static void register_numeric(Kernel k) {
    register_floating<Fn>(k);
    register_kernel(k, kDevice, DType::Int32, &Fn<int32_t>::run);
    register_kernel(k, kDevice, DType::Int64, &Fn<int64_t>::run);
  }
  template <template <class> class Fn>
  static void register_all(Kernel k) {
    register_numeric<Fn>(k);
    register_kernel(k, kDevice, DType::Bool, &Fn<bool>::run);
  }
};

}  // namespace tessera::backend
