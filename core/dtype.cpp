#include "tessera/dtype.h"

#include <Eigen/Core>

#include "tessera/error.h"

namespace tessera {

size_t itemsize(DType t) {
  switch (t) {
    case DType::Bool:
      return 1;
    case DType::Int32:
      return 4;
    case DType::Int64:
      return 8;
    case DType::Float16:
      return 2;
    case DType::BFloat16:
      return 2;
    case DType::Float32:
      return 4;
    case DType::Float64:
      return 8;
  }
  fail("itemsize: invalid dtype ", static_cast<int>(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "invalid";
}

DType dtype_from_name(const std::string& n) {
  if (n == "bool") return DType::Bool;
  if (n == "int32" || n == "i32") return DType::Int32;
  if (n == "int64" || n == "i64" || n == "long") return DType::Int64;
  if (n == "float16" || n == "f16" || n == "fp16" || n == "half") return DType::Float16;
  if (n == "bfloat16" || n == "bf16") return DType::BFloat16;
  if (n == "float32" || n == "f32" || n == "fp32" || n == "float") return DType::Float32;
  if (n == "float64" || n == "f64" || n == "fp64" || n == "double") return DType::Float64;
  fail("unknown dtype '", n,
       "': expected one of bool, int32, int64, float16, bfloat16, float32, float64");
}

bool is_floating(DType t) {
  return t >= DType::Float16;
}
bool is_reduced_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // float16 and bfloat16 share no common narrow type.
  if (is_reduced_float(a) && is_reduced_float(b)) return DType::Float32;
  return a > b ? a : b;
}

uint16_t float_to_half_bits(float f) {
  return Eigen::numext::bit_cast<uint16_t>(Eigen::half(f));
}
float half_bits_to_float(uint16_t h) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(h));
}
uint16_t float_to_bf16_bits(float f) {
  return Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(f));
}
float bf16_bits_to_float(uint16_t h) {
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(h));
}

}  // namespace tessera
