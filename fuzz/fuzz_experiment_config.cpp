// Determined experiment YAML (trial::ExperimentConfig): any bytes give a config or a
// tessera::Error, never a crash, a hang or another exception.
#include <string>

#include "tessera/error.h"
#include "tessera/trial/experiment_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::trial::ExperimentConfig::parse(std::string(reinterpret_cast<const char*>(data), size),
                                            "exp.yaml");
  } catch (const tessera::Error&) {
  }
  return 0;
}
