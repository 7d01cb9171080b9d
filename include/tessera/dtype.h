// Element types a Tensor can hold, and the rules that combine them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera {

// Ordered so that a larger value wins type promotion within a category.
enum class DType : uint8_t { Bool, Int32, Int64, Float16, BFloat16, Float32, Float64 };

inline constexpr int kNumDTypes = 7;

size_t itemsize(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "float32", "f32", "bf16", ...
bool is_floating(DType t);
bool is_reduced_float(DType t);  // float16 / bfloat16: stored narrow, computed in float32

// NumPy/PyTorch-style promotion: bool < ints < floats; float16 with bfloat16 gives float32.
DType promote_types(DType a, DType b);

// 16-bit float conversions (round-to-nearest-even), implemented with Eigen's half types.
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);
float bf16_bits_to_float(uint16_t h);

}  // namespace tessera
