// Device queries, the TF32 switch and library versions.
#include <cuda_runtime.h>

#include <cstdlib>
#include "cuda_check.h"
#include "tessera/cuda.h"
#include "tessera/dispatch.h"

#include "tessera/cuda_stream.h"

namespace tessera {

bool cuda_compiled() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t s = cudaGetDeviceCount(&n);
  if (s != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(s);
  }
  return n > 0 ? "" : "no CUDA device visible";
}

void cuda_synchronize() {
  int device = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  cuda::synchronize_stream(device);
  TS_CUDA_CHECK(cudaDeviceSynchronize());
}

void cuda_set_current_device(int index) {
  int now = -1;
  TS_CUDA_CHECK(cudaGetDevice(&now));
  if (now != index) TS_CUDA_CHECK(cudaSetDevice(index));
}

namespace {
const bool runtime_registered = [] {
  register_device_runtime(DeviceType::CUDA, {.set_current_device = cuda_set_current_device,
                                             .synchronize = cuda_synchronize});
  return true;
}();
}  // namespace

namespace {
bool& allow_tf32_flag() {
  static bool flag = [] {
    const char* e = std::getenv("TESSERA_ALLOW_TF32");
    return e && std::string(e) == "1";
  }();
  return flag;
}
}  // namespace

void cuda_set_allow_tf32(bool allow) {
  allow_tf32_flag() = allow;
}
bool cuda_allow_tf32() {
  return allow_tf32_flag();
}

std::string cuda_library_versions() {
  auto dotted = [](size_t v, size_t major_div, size_t minor_div) {
    return std::to_string(v / major_div) + "." + std::to_string(v % major_div / minor_div) + "." +
           std::to_string(v % minor_div);
  };
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string cublaslt;
  try {
    cublaslt = dotted(cuda::cublaslt().GetVersion(), 10000, 100);
  } catch (const Error& e) {  // (a report says what is missing rather than failing)
    cublaslt = std::string("unavailable: ") + e.what();
  }
  return "CUDA runtime " + std::to_string(runtime / 1000) + "." +
         std::to_string(runtime % 1000 / 10) + ", cuBLASLt " + cublaslt;
}

CudaDeviceInfo cuda_device_info(int index) {
  cudaDeviceProp prop{};
  TS_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return {prop.name, static_cast<int64_t>(prop.totalGlobalMem), prop.major, prop.minor,
          prop.multiProcessorCount};
}

std::string cuda_device_name(int index) {
  cudaDeviceProp prop{};
  TS_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

}  // namespace tessera
