#include "tessera/io/corpus_encoding.h"

#include <omp.h>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "tessera/error.h"

namespace tessera::io {

namespace {

bool solid(char c) {
  return c > ' ' && c < 0x7f;
}  // printable ASCII, not a space

// Chunks small enough that every worker gets several (the last ones then end together) and a
// stop is answered within one chunk, large enough that handing them out costs nothing.
size_t automatic_chunk_bytes(size_t total, size_t workers) {
  return std::clamp<size_t>(total / (8 * workers), size_t{64} << 10, size_t{1} << 20);
}

// Whether an occurrence of a text in `whole` holds text[nl] and text[nl + 1] (one of its '\n'
// aligned with the one at nl, and more of it after).
bool inside_whole(const std::string& text, size_t nl, const std::vector<std::string>& whole) {
  for (const std::string& w : whole)
    for (size_t j = w.find('\n'); j != std::string::npos && j + 1 < w.size();
         j = w.find('\n', j + 1))
      if (nl >= j && text.compare(nl - j, w.size(), w) == 0) return true;
  return false;
}

}  // namespace

std::vector<size_t> corpus_cuts(const std::string& text, size_t chunk_bytes,
                                const std::vector<std::string>& whole) {
  std::vector<size_t> cuts{0};
  size_t at = chunk_bytes;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string::npos || nl + 1 >= text.size()) break;
    if (nl >= 1 && solid(text[nl - 1]) && solid(text[nl + 1]) && !inside_whole(text, nl, whole)) {
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
  // OpenMP's count by default: OMP_NUM_THREADS, or this run's share of the machine's cores
  // (parallel::join_host_share), as the training step will use.
  const size_t workers =
      static_cast<size_t>(threads > 0 ? threads : std::max(1, omp_get_max_threads()));
  if (chunk_bytes == 0) chunk_bytes = automatic_chunk_bytes(text.size(), workers);
  const std::vector<size_t> cuts = corpus_cuts(text, chunk_bytes, tokenizer.added_token_texts());
  const size_t chunks = cuts.size() - 1;
  std::vector<std::vector<int64_t>> parts(chunks);
  // Workers take the next chunk as they finish one; this thread reports progress as chunks
  // end and tells the workers to stop (they finish the chunk in hand).
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable finished;
  size_t done_bytes = 0, done_chunks = 0;
  std::exception_ptr error;
  auto work = [&] {
    const Tokenizer::Encoder encode = tokenizer.encoder();
    for (size_t c; !stop && (c = next++) < chunks;) {
      try {
        parts[c] = encode(std::string_view(text).substr(cuts[c], cuts[c + 1] - cuts[c]));
      } catch (...) {
        std::lock_guard lock(mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
      std::lock_guard lock(mutex);
      done_bytes += cuts[c + 1] - cuts[c];
      ++done_chunks;
      finished.notify_one();
    }
  };
  std::vector<std::jthread> pool;
  for (size_t w = 0; w < std::min(workers, chunks); ++w) pool.emplace_back(work);
  bool stopped = false;
  {
    std::unique_lock lock(mutex);
    size_t reported = 0;
    while (done_chunks < chunks && !error) {
      finished.wait(lock, [&] { return done_chunks > reported || error; });
      reported = done_chunks;
      if (error || !progress || done_chunks == chunks) continue;
      const size_t bytes = done_bytes;
      lock.unlock();
      const bool keep_going = progress(bytes, text.size());
      lock.lock();
      if (!keep_going) {
        stopped = true;
        stop = true;
        break;
      }
    }
  }
  pool.clear();  // joins
  if (error) std::rethrow_exception(error);
  if (stopped)
    fail("data: tokenising stopped after ", done_bytes, " of ", text.size(),
         " bytes (nothing was cached)");
  if (progress && !progress(text.size(), text.size()))
    fail("data: tokenising stopped at the end (nothing was cached)");
  size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<int64_t> ids;
  ids.reserve(total);
  for (auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

}  // namespace tessera::io
