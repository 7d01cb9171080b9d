// Copies between host and device (contiguous, same dtype, or casts done on the host side)
// and fill for every dtype. The full CUDA op set is tracked by the CUDA-backend issue.
#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.h"
#include "tessera/dispatch.h"

namespace tessera::cuda {
namespace {

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = v;
}

// inputs: src; outputs: dst. Needs matching dtypes and contiguous tensors on both sides;
// anything else is staged through a contiguous host copy by the caller.
void copy_kernel(const KernelCall& c) {
  const Tensor& src = c.inputs[0];
  Tensor& dst = c.outputs[0];
  TS_CHECK(src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous(),
           "cuda copy: only contiguous same-dtype copies are implemented so far (got ",
           src.describe(), " -> ", dst.describe(), ")");
  const size_t bytes = src.numel() * itemsize(src.dtype());
  cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
  if (src.device().is_cpu())
    kind = cudaMemcpyHostToDevice;
  else if (dst.device().is_cpu())
    kind = cudaMemcpyDeviceToHost;
  TS_CUDA_CHECK(cudaMemcpy(dst.data_ptr(), src.data_ptr(), bytes, kind));
}

template <class T>
void fill(const KernelCall& c) {
  Tensor& dst = c.outputs[0];
  const int64_t n = dst.numel();
  if (n == 0) return;
  T v;
  if constexpr (sizeof(T) == 2) {
    // 16-bit floats: bit patterns computed on the host.
    v = dst.dtype() == DType::Float16 ? float_to_half_bits(static_cast<float>(c.attrs.scalar))
                                      : float_to_bf16_bits(static_cast<float>(c.attrs.scalar));
  } else {
    v = static_cast<T>(c.attrs.scalar);
  }
  fill_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256>>>(dst.data<T>(), n, v);
  TS_CUDA_CHECK(cudaGetLastError());
}

const bool registered = [] {
  for (int d = 0; d < kNumDTypes; ++d)
    register_kernel(Kernel::copy, DeviceType::CUDA, static_cast<DType>(d), &copy_kernel);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::Bool, &fill<bool>);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::Int32, &fill<int32_t>);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::Int64, &fill<int64_t>);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::Float16, &fill<uint16_t>);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::BFloat16, &fill<uint16_t>);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::Float32, &fill<float>);
  register_kernel(Kernel::fill, DeviceType::CUDA, DType::Float64, &fill<double>);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
