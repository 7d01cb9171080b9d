// Built instead of the NCCL group when the CUDA backend or NCCL is absent.
#include "tessera/error.h"
#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup>, Device device) {
  fail("NCCL process group for ", device.str(),
       ": this build of Tessera has no NCCL (it needs the CUDA backend and nccl.h/libnccl at "
       "build time)");
}

bool nccl_compiled() {
  return false;
}

std::string nccl_version() {
  return "";
}

}  // namespace tessera::parallel
