#include "tessera/io/corpus_encoding.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "tessera/error.h"

namespace tessera::io {

namespace {

bool solid(char c) {
  return c > ' ' && c < 0x7f;
}  // printable ASCII, not a space

}  // namespace

std::vector<size_t> corpus_cuts(const std::string& text, size_t chunk_bytes) {
  std::vector<size_t> cuts{0};
  size_t at = chunk_bytes;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string::npos || nl + 1 >= text.size()) break;
    if (nl >= 1 && solid(text[nl - 1]) && solid(text[nl + 1])) {
      cuts.push_back(nl + 1);
      at = nl + 1 + chunk_bytes;
    } else {
      at = nl + 1;
    }
  }
  cuts.push_back(text.size());
  return cuts;
}

std::vector<int64_t> encode_corpus(const Tokenizer& tokenizer, const std::string& text,
                                   const EncodeProgress& progress, int threads,
                                   size_t chunk_bytes) {
  const std::vector<size_t> cuts = corpus_cuts(text, std::max<size_t>(chunk_bytes, 1));
  const size_t chunks = cuts.size() - 1;
  const size_t workers = threads > 0 ? static_cast<size_t>(threads)
                                     : std::max<size_t>(1, std::thread::hardware_concurrency());
  std::vector<std::vector<int64_t>> parts(chunks);
  // Rounds of one chunk per worker: progress (and a stop) between rounds.
  for (size_t first = 0; first < chunks; first += workers) {
    const size_t last = std::min(chunks, first + workers);
    std::vector<std::exception_ptr> errors(last - first);
    std::vector<std::thread> pool;
    for (size_t c = first; c < last; ++c)
      pool.emplace_back([&, c] {
        try {
          parts[c] = tokenizer.encode(text.substr(cuts[c], cuts[c + 1] - cuts[c]));
        } catch (...) {
          errors[c - first] = std::current_exception();
        }
      });
    for (auto& t : pool) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
    if (progress && !progress(cuts[last], text.size()))
      fail("data: tokenising stopped at byte ", cuts[last], " of ", text.size(),
           " (nothing was cached)");
  }
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<int64_t> ids;
  ids.reserve(total);
  for (auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

}  // namespace tessera::io
