// CUDA runtime queries. Always available: in a build without the CUDA backend, or on a
// machine without a GPU, cuda_device_count() is 0 and cuda_unavailable_reason() says why.
#pragma once
#include <string>

namespace tessera {

bool cuda_compiled();
int cuda_device_count();
std::string cuda_device_name(int index);
std::string cuda_unavailable_reason();  // empty when a device is usable
void cuda_synchronize();                // waits for all work on the current device

}  // namespace tessera
