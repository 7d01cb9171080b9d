// A whole corpus through a tokenizer: cut into chunks at places where the pieces (GPT-2's
// pre-tokenisation) cannot straddle the cut, so the ids equal one pass over the text; the
// chunks encoded on every thread OpenMP is given, each worker taking the next chunk as it finishes
// one, with one Tokenizer::encoder per worker (its word cache warm across chunks); progress
// reported as chunks end, which may stop the work.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/io/tokenizer.h"

namespace tessera::io {

// Where a corpus may be cut: after a '\n' with printable, non-space ASCII on both sides ("x\nW"):
// every pre-tokenisation rule ends a piece there and starts the next one alike; never inside
// an occurrence of one of `whole` (the tokenizer's added tokens, which may hold a '\n'). Cuts
// about `chunk_bytes` apart (a stretch without such a place stays whole).
std::vector<size_t> corpus_cuts(const std::string& text, size_t chunk_bytes,
                                const std::vector<std::string>& whole = {});

// Called (on the calling thread) as chunks end, with the bytes done and in all, and once at the
// end; false stops the work: the workers finish the chunk in hand and encode_corpus throws an
// Error saying so.
using EncodeProgress = std::function<bool(size_t done, size_t total)>;

// The ids of `text`, equal to tokenizer.encode(text), on `threads` threads (0: OpenMP's
// omp_get_max_threads(): OMP_NUM_THREADS, or the run's share of the cores), in
// chunks of about `chunk_bytes` (0: an eighth of a worker's share, from 64 KB to 1 MB).
std::vector<int64_t> encode_corpus(const Tokenizer& tokenizer, const std::string& text,
                                   const EncodeProgress& progress = nullptr, int threads = 0,
                                   size_t chunk_bytes = 0);

}  // namespace tessera::io
