// Internal: ZeRO-3's parameter gathering. A partitioned parameter's storage is released
// between uses; the dispatcher asks this fetcher for it before an op reads it.
//
// Prefetch (DeepSpeed's stage3_prefetch_bucket_size): the order in which one training step
// fetches parameters is recorded (the trace); in later steps, each fetch starts
// asynchronous all-gathers for the parameters the trace says come next, up to the bucket
// size in elements, into separate buffers that the parameter adopts when it is reached. A
// step that leaves the trace (a different model path) stops prefetching for that step,
// waits for what was started, and becomes the new trace. Evaluation passes (the model in
// eval mode) gather on use and leave the trace alone. Every rank runs the same ops in the
// same order, so the collectives match across ranks either way.
#pragma once
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tessera/parallel/process_group.h"
#include "tessera/parallel/zero_optimizer.h"
#include "tessera/storage.h"

namespace tessera::parallel {

class Zero3Fetcher : public StorageFetcher {
 public:
  Zero3Fetcher(std::shared_ptr<ProcessGroup> group, int64_t prefetch_numel);
  // `full`: the parameter's padded [world * shard] tensor over its own storage;
  // `shard`: this rank's part of it.
  void add(Tensor full, Tensor shard);

  void fetch(Storage& s) override;
  void used(Storage& s) override;

  // Ends a training step: waits for prefetches still in flight, releases every parameter
  // and makes the fetches since the last call the trace if none is valid.
  void end_step();
  // Waits for prefetches in flight (before this rank's shards are overwritten).
  void drain();
  // Evaluation passes gather on use outside the trace; leaving one releases what it gathered
  // so the next training step fetches as the trace expects.
  void set_evaluating(bool on);
  // Gathers every parameter for good and detaches from their storages.
  void materialize_all();

  const PrefetchStats& stats() const { return stats_; }

 private:
  struct Ahead {
    size_t position, param;
    Tensor buffer;
    Work work;
  };
  void start_prefetches();
  void leave_trace();

  std::shared_ptr<ProcessGroup> group_;
  int64_t prefetch_numel_;
  std::unordered_map<const Storage*, size_t> index_;
  std::vector<Tensor> full_, shards_;
  bool enabled_ = true;
  // The most recently used parameter stays gathered until another one is used, so an op
  // that reuses it at once (the tied GPT-2 embedding: the head's forward, then its
  // backward) costs no second gather.
  Storage* last_used_ = nullptr;

  std::vector<size_t> trace_, current_;  // parameter indices in fetch order
  bool trace_valid_ = false, on_trace_ = false, evaluating_ = false;
  size_t cursor_ = 0;      // next trace position expected
  size_t next_ahead_ = 0;  // next trace position to prefetch
  int64_t ahead_numel_ = 0;
  std::deque<Ahead> ahead_;
  PrefetchStats stats_;
};

}  // namespace tessera::parallel
