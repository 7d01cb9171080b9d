// C++ element types behind each DType on the CPU, and per-dtype kernel registration.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <type_traits>

#include "../element_types.h"

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

// Dtype visiting and registration (shared with the CUDA backend: backends/element_types.h).
using Types = backend::ElementTypes<DeviceType::CPU, Half, BFloat16>;
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  return Types::visit(dtype, std::forward<F>(f));
}
template <template <class> class Fn>
void register_floating(Kernel k) {
  Types::register_floating<Fn>(k);
}
template <template <class> class Fn>
void register_numeric(Kernel k) {
  Types::register_numeric<Fn>(k);
}
template <template <class> class Fn>
void register_all(Kernel k) {
  Types::register_all<Fn>(k);
}

}  // namespace tessera::cpu
