#include "tessera/device.h"

#include "tessera/error.h"

namespace tessera {

Device Device::parse(const std::string& spec) {
  if (spec == "cpu") return cpu();
  if (spec == "cuda") return cuda(0);
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string idx = spec.substr(5);
    TS_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
             "invalid device '", spec, "': expected cpu, cuda or cuda:N");
    return cuda(std::stoi(idx));
  }
  fail("invalid device '", spec, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace tessera
