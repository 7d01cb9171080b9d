// Safetensors files: any bytes must load or fail with tessera::Error, never read or write
// outside the file or the tensors (ASan), never abort.
#include "fuzz_util.h"
#include "tessera/error.h"
#include "tessera/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tessera::fuzz::write_file("model.safetensors", data, size);
  try {
    const tessera::io::SafetensorsFile f(path);
    for (const std::string& name : f.names()) {
      const tessera::Tensor t = f.get(name);
      if (t.numel() > 0) f.get_range(name, 0, 1);
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
