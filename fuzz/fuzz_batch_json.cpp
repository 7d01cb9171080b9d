// Batch files for `tessera eval` (input_ids, targets, BERT's fields).
#include "fuzz_util.h"
#include "tessera/error.h"
#include "tessera/models/pretrained.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tessera::fuzz::write_file("batch.json", data, size);
  try {
    tessera::models::read_batch_json(path);
  } catch (const tessera::Error&) {
  }
  return 0;
}
