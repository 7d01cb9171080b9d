// Token caches: meta.json (the input up to its first NUL byte) and the token files (the rest,
// split in two) checked for a vocabulary of 100; and the corpus reader on the raw bytes.
#include <algorithm>
#include <string>

#include "fuzz_util.h"
#include "tessera/error.h"
#include "tessera/io/token_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* end = data + size;
  const uint8_t* split = std::find(data, end, uint8_t{0});
  tessera::fuzz::write_file("meta.json", data, static_cast<size_t>(split - data));
  const uint8_t* rest = split == end ? end : split + 1;
  const size_t n = static_cast<size_t>(end - rest), half = n / 2;
  tessera::fuzz::write_file("train.bin", rest, half);
  tessera::fuzz::write_file("val.bin", rest + half, n - half);
  try {
    tessera::io::token_cache_problem(tessera::fuzz::scratch_dir(), 100);
  } catch (const tessera::Error&) {
  }
  const std::string corpus = tessera::fuzz::write_file("corpus.txt", data, size);
  try {
    tessera::io::read_corpus(corpus);
  } catch (const tessera::Error&) {
  }
  return 0;
}
