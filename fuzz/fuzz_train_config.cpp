// Training configs (DeepSpeed's schema plus Tessera's sections) at world sizes 1-4.
#include <string>

#include "tessera/error.h"
#include "tessera/io/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int64_t world = 1 + data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const auto c = tessera::io::TrainConfig::parse(text, world, "fuzz.json");
    (void)c.distributed.timeout();
  } catch (const tessera::Error&) {
  }
  return 0;
}
