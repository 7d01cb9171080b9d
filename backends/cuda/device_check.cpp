#include "tessera/cuda.h"
#include "tessera/error.h"

namespace tessera {

void require_usable_device(const Device& device, const std::string& what) {
  if (!device.is_cuda() || device.index < cuda_device_count()) return;
  const std::string why = cuda_unavailable_reason();
  fail(what, " ", device.str(), ": ",
       why.empty() ? std::to_string(cuda_device_count()) + " CUDA devices visible" : why);
}

}  // namespace tessera
