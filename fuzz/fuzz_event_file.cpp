// TensorBoard event files (tessera plot reads them): record lengths, checksums and Event
// records, on the raw bytes.
#include "fuzz_util.h"
#include "tessera/error.h"
#include "tessera/io/event_file_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tessera::fuzz::write_file("events.out.tfevents.0.fuzz", data, size);
  try {
    tessera::io::read_event_scalars(path);
  } catch (const tessera::Error&) {
  }
  return 0;
}
