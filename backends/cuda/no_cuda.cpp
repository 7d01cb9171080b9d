// Built instead of the CUDA backend when it is disabled or nvcc is absent.
#include "tessera/cuda.h"
#include "tessera/error.h"

namespace tessera {

bool cuda_compiled() {
  return false;
}
int cuda_device_count() {
  return 0;
}
std::string cuda_device_name(int) {
  fail("cuda: this build of Tessera has no CUDA backend");
}
CudaDeviceInfo cuda_device_info(int) {
  fail("cuda: this build of Tessera has no CUDA backend");
}
void cuda_synchronize() {}
void cuda_set_current_device(int) {}
std::string cuda_unavailable_reason() {
  return "this build of Tessera has no CUDA backend (configure with -Dcuda=enabled and nvcc)";
}
CudaMemoryStats cuda_memory_stats(int) {
  return {};
}
void cuda_reset_peak_memory_stats(int) {}
void cuda_empty_cache() {}
CudaPinnedMemoryStats cuda_pinned_memory_stats() {
  return {};
}
void cuda_set_allow_tf32(bool) {}
bool cuda_allow_tf32() {
  return false;
}
std::string cuda_library_versions() {
  return "";
}

}  // namespace tessera
