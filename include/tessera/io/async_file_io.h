// Asynchronous file reads and writes over io_uring (liburing), for the swappers of ZeRO-Infinity
// (parallel/tensor_swapper.h). DeepSpeed's "aio" section sets the transfer shape:
// each request is cut into block_size pieces, spread over thread_count rings (one thread
// each) that keep up to queue_depth pieces in flight; single_submit submits each piece on its
// own, overlap_events reaps completions while pieces are still being submitted.
//
//   io::AsyncFileIO io(io::AioConfig{});
//   const int f = io.open_scratch("/nvme/tessera/rank0.swap");
//   io::AlignedBuffer buf(1 << 20);
//   io.wait(io.submit(io::AsyncFileIO::Op::write, f, 0, buf.data(), buf.size()));
//
// Files are opened with O_DIRECT where the filesystem allows it (then offsets, sizes and
// buffers are multiples of kAlignment); errors name the file, the offset and the cause.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tessera/io/config_section.h"

namespace tessera::io {

struct TrainConfig;

// DeepSpeed's "aio" section (its defaults).
struct AioConfig {
  int64_t block_size = 1048576;  // bytes per submitted piece (a multiple of kAlignment)
  int64_t queue_depth = 8;       // pieces in flight per thread
  int64_t thread_count = 1;      // DeepSpeed's intra_op_parallelism: rings, one thread each
  bool single_submit = false;    // one submission per piece instead of one per batch
  bool overlap_events = true;    // reap completions while submitting (else submit, then reap)

  static void parse(config::Section& s, AioConfig& out);
};
const AioConfig& aio_config(const TrainConfig& cfg);

// Host memory aligned for O_DIRECT, a multiple of the alignment in size, zero-filled; mapped
// from the kernel, so freeing it gives the memory back (malloc's heap would keep it).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(int64_t bytes);
  void* data() const { return data_.get(); }
  int64_t size() const { return size_; }

 private:
  struct Unmap {
    size_t bytes;  // (no initializer: it would keep the nested type from being default-made here)
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Unmap> data_;
  int64_t size_ = 0;
};

class AsyncFileIO {
 public:
  static constexpr int64_t kAlignment = 4096;
  // `bytes` rounded up to whole kAlignment pages (O_DIRECT transfer sizes).
  static constexpr int64_t aligned(int64_t bytes) {
    return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  enum class Op { read, write };
  using Ticket = uint64_t;

  explicit AsyncFileIO(AioConfig config,
                       std::chrono::milliseconds timeout = std::chrono::minutes(10));
  ~AsyncFileIO();  // waits for what is in flight
  AsyncFileIO(const AsyncFileIO&) = delete;
  AsyncFileIO& operator=(const AsyncFileIO&) = delete;

  // A new file at `path` (its directory must exist; an existing file is an error), unlinked at
  // once: its blocks are the process's until it exits, however it exits. Returns its handle.
  int open_scratch(const std::filesystem::path& path);
  // Reserves `bytes` of disk for the file now (a full disk is an error here, not mid-run).
  void reserve(int file, int64_t bytes);
  bool direct(int file) const;
  const std::string& path(int file) const;

  // Starts moving `bytes` between `buffer` and the file at `offset`; the buffer must live, and
  // not be touched, until wait() returns.
  Ticket submit(Op op, int file, int64_t offset, void* buffer, int64_t bytes);
  // Blocks until the transfer is complete; a failure (an I/O error, a short read, no
  // completion within the timeout) is an error naming the file, the offset and the cause.
  void wait(Ticket ticket);
  bool done(Ticket ticket);

  // Tests: the next piece of `op` that covers byte `offset` of any file completes with
  // -error (EIO, ENOSPC, ...), once.
  static void inject_fault_for_testing(Op op, int64_t offset, int error);
  // Tests: rings made while on move pieces with pread/pwrite, as where io_uring is unavailable.
  static void use_blocking_io_for_testing(bool on);

  struct Piece;
  struct Request;
  class Ring;

 private:
  struct File {
    std::string path;
    int fd = -1;
    bool direct = false;
  };
  void finish_piece(Piece& piece, int64_t result);

  AioConfig config_;
  std::chrono::milliseconds timeout_;
  std::vector<File> files_;
  std::vector<std::unique_ptr<Ring>> rings_;
  std::mutex mutex_;  // requests_ and their completion
  std::condition_variable completed_;
  std::map<Ticket, std::shared_ptr<Request>> requests_;
  Ticket next_ticket_ = 1;
  size_t next_ring_ = 0;
};

}  // namespace tessera::io
