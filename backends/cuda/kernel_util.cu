#include <limits>

#include "kernel_util.cuh"

namespace tessera::cuda {

TensorBase scratch(int64_t nbytes, Device device) {
  return TensorBase::empty({std::max<int64_t>((nbytes + 3) / 4, 1)}, DType::Int32, device);
}

IndexCheck::IndexCheck(Device device)
    : buffer_(TensorBase::empty({1}, DType::Int64, device)),
      flag_(static_cast<unsigned long long*>(buffer_.data_ptr())),
      device_(device) {
  const unsigned long long none = std::numeric_limits<unsigned long long>::max();
  TS_CUDA_CHECK(
      cudaMemcpyAsync(flag_, &none, sizeof(none), cudaMemcpyHostToDevice, stream_for(device)));
}

int64_t IndexCheck::first_bad() const {
  unsigned long long v = 0;
  TS_CUDA_CHECK(cudaMemcpyAsync(&v, flag_, sizeof(v), cudaMemcpyDeviceToHost, stream_for(device_)));
  TS_CUDA_CHECK(cudaStreamSynchronize(stream_for(device_)));
  return v == std::numeric_limits<unsigned long long>::max() ? -1 : static_cast<int64_t>(v);
}

}  // namespace tessera::cuda
