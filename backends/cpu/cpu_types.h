// C++ element types behind each DType on the CPU, and per-dtype kernel registration.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "tessera/dispatch.h"

namespace tessera::cpu {

using Half = Eigen::half;
using BFloat16 = Eigen::bfloat16;

// Arithmetic happens in float for 16-bit floats (stored natively), else in the type itself.
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <class T>
inline compute_t<T> load(const T& v) {
  return static_cast<compute_t<T>>(v);
}

template <DType D>
struct CppType;
template <>
struct CppType<DType::Bool> {
  using type = bool;
};
template <>
struct CppType<DType::Int32> {
  using type = int32_t;
};
template <>
struct CppType<DType::Int64> {
  using type = int64_t;
};
template <>
struct CppType<DType::Float16> {
  using type = Half;
};
template <>
struct CppType<DType::BFloat16> {
  using type = BFloat16;
};
template <>
struct CppType<DType::Float32> {
  using type = float;
};
template <>
struct CppType<DType::Float64> {
  using type = double;
};

// Calls f.template operator()<T>() with T the C++ type of `dtype`.
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
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

// Registers Fn<T>::run for every floating dtype (and optionally the integer ones).
template <template <class> class Fn>
void register_floating(Kernel k) {
  register_kernel(k, DeviceType::CPU, DType::Float16, &Fn<Half>::run);
  register_kernel(k, DeviceType::CPU, DType::BFloat16, &Fn<BFloat16>::run);
  register_kernel(k, DeviceType::CPU, DType::Float32, &Fn<float>::run);
  register_kernel(k, DeviceType::CPU, DType::Float64, &Fn<double>::run);
}
template <template <class> class Fn>
void register_numeric(Kernel k) {
  register_floating<Fn>(k);
  register_kernel(k, DeviceType::CPU, DType::Int32, &Fn<int32_t>::run);
  register_kernel(k, DeviceType::CPU, DType::Int64, &Fn<int64_t>::run);
}
template <template <class> class Fn>
void register_all(Kernel k) {
  register_numeric<Fn>(k);
  register_kernel(k, DeviceType::CPU, DType::Bool, &Fn<bool>::run);
}

}  // namespace tessera::cpu
