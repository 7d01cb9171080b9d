// Internal: ZeRO-3's parameter gathering. A partitioned parameter's storage is released
// between uses; the dispatcher asks this fetcher for it before an op reads it.
//
// The trace: the order in which one training step uses the parameters (consecutive uses of
// one parameter count once) is recorded; later steps follow it. A step that leaves the trace
// (a different model path) stops prefetching for that step, waits for what was started, and
// becomes the new trace. Evaluation passes (the model in eval mode) gather on use and leave
// the trace alone. Every rank runs the same ops in the same order, so the collectives match
// across ranks either way.
//
// On the trace, as DeepSpeed's parameter coordinator:
//  - prefetch (stage3_prefetch_bucket_size): each use starts asynchronous all-gathers for
//    the parameters the trace says come next, up to the bucket size in elements and while
//    the gathered parameters stay under stage3_max_live_parameters elements, into separate
//    buffers that the parameter adopts when it is reached;
//  - reuse (stage3_max_reuse_distance): a parameter whose next use comes within that many
//    elements of parameters (counted along the trace) stays gathered until then.
// Off the trace (the first step) a parameter is released as soon as another one is used.
//
// Quantized gathers (zero_quantized_weights, ZeRO++'s qwZ): every rank quantizes its shard
// to int8 blocks with a float32 scale each, the packed shards are gathered, and each rank
// reads them back into the parameter: a quarter of float32's bytes, half of bf16's. The
// shards themselves (and the masters) stay exact; materialize_all gathers exactly.
//
// Secondary partitions (zero_hpz_partition_size, ZeRO++'s hpZ): see Zero3FetchOptions.
//
// Shards elsewhere (offload_param): a shard on the host is copied to the parameter's device
// for its gather; a shard in a swap file (device "nvme") is read ahead along the trace,
// within the swapper's buffers, and dropped again once gathered.
#pragma once
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/parallel/process_group.h"
#include "tessera/parallel/tensor_swapper.h"
#include "tessera/parallel/zero_optimizer.h"
#include "tessera/quantized_blocks.h"
#include "tessera/storage.h"

namespace tessera::parallel {

struct Zero3FetchOptions {
  int64_t prefetch_numel = 0;      // stage3_prefetch_bucket_size
  int64_t max_live_numel = 0;      // stage3_max_live_parameters
  int64_t max_reuse_distance = 0;  // stage3_max_reuse_distance
  // zero_quantized_weights (qwZ): each rank's shard travels as int8 blocks of this many
  // elements with their scales, and is read back into the gathered parameter.
  bool quantized = false;
  int64_t quantize_block = quantized_blocks::kDefaultBlock;
  // zero_hpz_partition_size > 1 (hpZ): this rank's group of that many consecutive ranks. A
  // parameter's first gather of a step (from the primary shards, over the whole group) keeps
  // this rank's 1/hpz of it, its secondary shard; later gathers in the step (backward's,
  // after a release) gather the secondary shards inside the hpZ group.
  std::shared_ptr<ProcessGroup> hpz_group;
};

class Zero3Fetcher : public StorageFetcher {
 public:
  Zero3Fetcher(std::shared_ptr<ProcessGroup> group, Zero3FetchOptions options);
  // `full`: the parameter's padded [world * shard] tensor over its own storage;
  // `shard`: this rank's part of it (anywhere: a view, host memory, its own storage);
  // `swap_key`: non-empty when the shard's storage is swapped by shard_swapper().
  void add(Tensor full, Tensor shard, std::string swap_key = {});
  // offload_param "nvme": the swapper of the shards added with a key.
  void set_shard_swapper(std::shared_ptr<TensorSwapper> swapper) { swapper_ = std::move(swapper); }

  void fetch(Storage& s) override;
  void hit(Storage& s) override;
  void used(Storage& s) override;

  // Ends a training step: waits for prefetches still in flight, releases every parameter
  // and makes the uses since the last call the trace if none is valid.
  void end_step();
  // Waits for prefetches in flight (before this rank's shards are overwritten).
  void drain();
  // Evaluation passes gather on use outside the trace; leaving one releases what it gathered
  // so the next training step fetches as the trace expects.
  void set_evaluating(bool on);
  // The shards changed (the optimizer's step, a checkpoint loaded): the secondary shards
  // (hpZ) are stale and dropped; the next gathers come from the primary shards.
  void invalidate_secondary();
  // Gathers every parameter for good and detaches from their storages.
  void materialize_all();
  // Waits for the gathers in flight and detaches from the parameters' storages, which stay
  // released (the model is about to go: nothing reads it again).
  void detach_released();

  const PrefetchStats& stats() const { return stats_; }

 private:
  // One gather in flight: `send` must stay alive until `work` is done; qwZ receives into
  // `packed`; hpZ's gathers of secondary shards run inside its group.
  struct Gather {
    Tensor send, packed;
    Work work;
    bool secondary = false;
  };
  struct Ahead {
    size_t position, param;
    Tensor buffer;
    Gather gather;
  };
  // Starts gathering parameter i into `out` (from its secondary shard where hpZ has one).
  Gather start_gather(size_t i, Tensor& out);
  // Once the work is done: the values into `out` (qwZ: dequantized), the primary shard's
  // swapped copy dropped, hpZ's secondary shard kept.
  void finish_gather(size_t i, Tensor& out, Gather& g);
  void record_use(size_t i);
  void gather_now(size_t i);
  // The shard of `i` ready to be gathered (read in, on the parameter's device).
  Tensor shard_for_gather(size_t i);
  void gathered(size_t i);  // its gather finished: a swapped shard leaves memory
  void start_prefetches();
  void read_ahead(size_t from);
  void leave_trace();
  void release(size_t i);
  void release_all();
  // Whether `param` is used again within max_reuse_distance elements from the cursor.
  bool reused_soon(size_t param) const;
  // Indexes a new trace: the elements used before each position, each parameter's positions.
  void index_trace();
  void note_live();

  std::shared_ptr<ProcessGroup> group_;
  Zero3FetchOptions options_;
  std::unordered_map<const Storage*, size_t> index_;
  std::vector<Tensor> full_, shards_;
  std::vector<Tensor> secondary_;  // hpZ: this rank's part of each parameter, while valid
  std::vector<std::string> swap_keys_;
  std::shared_ptr<TensorSwapper> swapper_;
  bool enabled_ = true;
  bool in_gather_ = false;  // hit() and used() from a gather's own ops are ignored
  struct InGather {
    explicit InGather(bool& flag) : flag_(flag), was_(flag) { flag_ = true; }
    ~InGather() { flag_ = was_; }
    InGather(const InGather&) = delete;
    InGather& operator=(const InGather&) = delete;
    bool& flag_;
    bool was_;
  };
  // The most recently used parameter stays gathered until another one is used, so an op
  // that reuses it at once (the tied GPT-2 embedding: the head's forward, then its
  // backward) costs no second gather.
  size_t last_used_ = SIZE_MAX;
  std::set<size_t> live_;  // gathered (resident) parameters
  int64_t live_numel_ = 0;

  std::vector<size_t> trace_, current_;    // parameter indices in order of use
  std::vector<int64_t> elements_before_;   // [position]: elements of the trace's uses before it
  std::vector<std::vector<size_t>> uses_;  // [parameter]: its positions in the trace
  bool trace_valid_ = false, on_trace_ = false, evaluating_ = false;
  size_t cursor_ = 0;      // next trace position expected
  size_t next_ahead_ = 0;  // next trace position to prefetch
  size_t next_read_ = 0;   // next trace position to read ahead from the swap file
  int64_t ahead_numel_ = 0;
  std::deque<Ahead> ahead_;
  PrefetchStats stats_;
};

}  // namespace tessera::parallel
