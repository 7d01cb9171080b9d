// Tokenizer files: GPT-2's vocab.json + merges.txt (the input split at its first NUL byte) and
// BERT's vocab.txt and a Hugging Face tokenizer.json (the whole input), each then used to encode
// and decode a fixed text. The input as text is also pre-tokenised by GPT-2's ASCII fast path
// and by PCRE2 alone, which must give the same pieces.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "tessera/error.h"
#include "tessera/io/tokenizer.h"

namespace {
const std::string kText = "Tessera trains GPT-2 and BERT: naïve café, 東京, don't 123!\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessera::io::GPT2Tokenizer pieces({{"a", 0}}, {});
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    if (pieces.pretokenize(text) != pieces.pretokenize(text, true)) std::abort();
  } catch (const tessera::Error&) {  // not UTF-8
  }
  const uint8_t* end = data + size;
  const uint8_t* split = std::find(data, end, uint8_t{0});
  const std::string vocab =
      tessera::fuzz::write_file("vocab.json", data, static_cast<size_t>(split - data));
  const std::string merges =
      tessera::fuzz::write_file("merges.txt", split == end ? split : split + 1,
                                static_cast<size_t>(end - std::min(end, split + 1)));
  try {
    const auto tok = tessera::io::GPT2Tokenizer::from_files(vocab, merges);
    tok.decode(tok.encode(kText));
  } catch (const tessera::Error&) {
  }
  const std::string vocab_txt = tessera::fuzz::write_file("vocab.txt", data, size);
  try {
    const auto tok = tessera::io::WordPieceTokenizer::from_file(vocab_txt);
    tok.decode(tok.encode(kText));
  } catch (const tessera::Error&) {
  }
  const std::string tokenizer_json = tessera::fuzz::write_file("tokenizer.json", data, size);
  try {
    const auto tok = tessera::io::GPT2Tokenizer::from_tokenizer_json(tokenizer_json);
    tok.decode(tok.encode(kText));
  } catch (const tessera::Error&) {
  }
  return 0;
}
