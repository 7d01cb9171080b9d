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

// bfloat16 <-> float in integer arithmetic that the compiler vectorises (Eigen's conversion
// from float branches on NaN, which kept loops over bf16 scalar), with Eigen's results: the
// upper half of the float; round to nearest even, a NaN kept as the quiet NaN of its sign.
inline float bf16_to_float(BFloat16 v) {
  return Eigen::numext::bit_cast<float>(uint32_t{Eigen::numext::bit_cast<uint16_t>(v)} << 16);
}
inline BFloat16 float_to_bf16(float f) {
  const uint32_t bits = Eigen::numext::bit_cast<uint32_t>(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = ((bits >> 16) & 0x8000u) | 0x7fc0u;
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return Eigen::numext::bit_cast<BFloat16>(static_cast<uint16_t>(nan ? quiet_nan : rounded));
}

template <class T>
inline compute_t<T> load(const T& v) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_float(v);
  else
    return static_cast<compute_t<T>>(v);
}

// A computed value stored as element type T (rounded to nearest even for 16-bit floats).
template <class T>
inline T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, BFloat16>)
    return float_to_bf16(v);
  else
    return static_cast<T>(v);
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
