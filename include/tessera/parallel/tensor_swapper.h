// ZeRO-Infinity's swap files: tensors, each under a key, live in a file under nvme_path and are
// in memory only around their use.
// offload_optimizer {"device": "nvme"}: the optimizer state of a rank's partition (Adam's
// moments, SGD's momentum) is in memory only around its update. The optimizer steps sub-group by
// sub-group (sub_group_size elements, optim::StateStager); each sub-group's state is read in
// before its update and written out after it, through aligned staging buffers of at most
// buffer_count x buffer_numel elements in all (DeepSpeed's buffer_count buffers of the largest
// sub-group's size).
// pipeline_read reads the next sub-group while this one updates, and after a step the next
// step's first sub-groups (as far as the buffers allow) while the forward and backward run;
// pipeline_write lets writes finish while the next sub-groups update and, after the last,
// while the next forward and backward run (else each write completes before the next
// sub-group, and a step ends with none in flight). State touched outside a step (a checkpoint reads
// or loads it) is read in on use and written out again by swap_out().
//
// offload_param {"device": "nvme"} (ZeRO-3): each parameter's shard is read ahead of its
// gather (prefetch, then acquire), dropped once gathered (discard: it is unchanged) and written
// after the optimizer changed it (release).
//
// The swap file is unlinked as soon as it is created: its disk space goes with the process,
// however the process ends, and a checkpoint never depends on it.
#pragma once
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/io/async_file_io.h"
#include "tessera/optim/optimizer.h"
#include "tessera/storage.h"

namespace tessera::parallel {

struct NvmeOffloadOptions {
  std::string nvme_path;                // an existing, writable directory
  int64_t buffer_count = 4;             // staging buffers of buffer_numel elements (float32)
  int64_t buffer_numel = 1 << 20;       // the largest sub-group (the engine sets it)
  int64_t element_bytes = 4;            // of buffer_numel's elements
  bool pipeline_read = false;           // read the next sub-group during this one's update
  bool pipeline_write = false;          // let writes complete during the next sub-groups' updates
  int64_t sub_group_size = 1000000000;  // elements updated per sub-group
  // false: every state tensor is made (zeros) and written out when the optimizer is built, so
  // the swap file's disk is claimed (and a full disk found) before training; true: the first
  // step makes and writes each sub-group's state as it updates it.
  bool fast_init = false;
  io::AioConfig aio;
  // The config keys errors name.
  std::string path_key = "zero_optimization.offload_optimizer.nvme_path";
  std::string buffer_count_key = "zero_optimization.offload_optimizer.buffer_count";
};

// What the swapper moved and holds.
struct SwapStats {
  int64_t disk_bytes = 0;  // the swap file's extent
  int64_t bytes_read = 0, bytes_written = 0;
  // Read ahead from the buffer of the same tensor's write (pipelining), not from the file.
  int64_t bytes_from_buffers = 0;
  int64_t peak_resident_bytes = 0;  // swapped state in memory at once during steps, at most
};

class TensorSwapper : public optim::StateStager,
                      public StorageFetcher,
                      public std::enable_shared_from_this<TensorSwapper> {
 public:
  // `name` tells this file apart ("optimizer-rank3": tessera-optimizer-rank3-<pid>.swap).
  TensorSwapper(NvmeOffloadOptions options, const std::string& name);
  ~TensorSwapper() override;

  int64_t sub_group_size() const override { return options_.sub_group_size; }
  bool prefetch(const std::vector<optim::StateTensor>& state) override;
  // Starts reading one tensor (pipeline_read); false when the buffers have no room for it.
  bool prefetch_one(const optim::StateTensor& s);
  void acquire(const std::vector<optim::StateTensor>& state) override;
  void release(const std::vector<optim::StateTensor>& state) override;
  void finish() override;

  // StorageFetcher: swapped state read outside a step comes back into memory (and stays until
  // swap_out).
  void fetch(Storage& storage) override;
  void used(Storage&) override {}

  // Drops the memory of every resident tensor of `state` that equals its copy on disk
  // (read in and not changed since); nothing is written.
  void discard(const std::vector<optim::StateTensor>& state);
  // Writes every resident tensor of `state` out and releases its memory (after a checkpoint
  // read or loaded the state).
  void swap_out(const std::map<std::string, Tensor>& state);
  SwapStats stats() const { return stats_; }
  const std::string& path() const;

 private:
  struct Region {
    int64_t offset = 0, bytes = 0;
  };
  struct Transfer {
    std::shared_ptr<Storage> storage;
    std::string key;
    io::AlignedBuffer buffer;
    int64_t bytes = 0;  // moved (the buffer may be larger)
    io::AsyncFileIO::Ticket ticket = 0;
    bool let_go = false;  // a write whose tensor's memory went before it completed
    // A write whose buffer becomes a read ahead of the same tensor once it completes, and
    // that read (its buffer comes from the write).
    bool keep_for_read = false, from_write = false;
  };
  const Region& region_for(const std::string& key, int64_t bytes);
  io::AlignedBuffer take_buffer(int64_t bytes);
  void give_buffer(io::AlignedBuffer buffer);
  void complete_oldest_write();
  // A written tensor's memory goes (its bytes are in the file, or in the write's buffer).
  void let_go(Transfer& t);
  // Writes of one key's region in flight (at most one: a new write waits for the last).
  bool writing(const std::string& key) const;
  void settle_writes_of(const std::string& key);
  void drop_read_of(const Storage* storage);
  void forget_read(Transfer& read);  // a read ahead not taken: its buffer goes back
  bool take_read(Storage& storage);  // a read ahead of this storage, if any, completed into it
  void read_now(Storage& storage, const std::string& key);
  void note_resident(int64_t delta);

  NvmeOffloadOptions options_;
  io::AsyncFileIO io_;
  int file_ = -1;
  int64_t end_ = 0;  // the file's extent
  std::map<std::string, Region> regions_;
  std::unordered_map<const Storage*, std::string> key_of_;  // released storages: their state
  std::deque<Transfer> writes_;                             // in flight, oldest first
  std::map<const Storage*, Transfer> reads_;                // prefetched, not yet acquired
  std::vector<io::AlignedBuffer> free_buffers_;             // kept for reuse
  int64_t budget_ = 0;                // bytes of staging buffers, in use or kept, at most
  int64_t bytes_out_ = 0;             // bytes of the buffers transfers hold
  int64_t bytes_kept_ = 0;            // bytes of free_buffers_
  int64_t resident_ = 0;              // bytes of swapped state resident during a step, and buffers
  std::set<const Storage*> counted_;  // state in resident_ (until its write completes)
  SwapStats stats_;
};

}  // namespace tessera::parallel
