#include "tessera/io/async_file_io.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <thread>

#include "tessera/error.h"
#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"

namespace tessera::io {

void AioConfig::parse(config::Section& s, AioConfig& c) {
  s.notes({{"", "asynchronous file I/O of the NVMe swappers (offload_optimizer.device \"nvme\")"},
           {"block_size", "bytes per submitted piece, a multiple of 4096"},
           {"queue_depth", "pieces in flight per thread"},
           {"thread_count", "threads (each with its own io_uring) a transfer is spread over"},
           {"single_submit", "submit each piece on its own"},
           {"overlap_events", "reap completions while still submitting"}});
  s.get_min<int64_t>("block_size", c.block_size, AsyncFileIO::kAlignment, ">= 4096");
  s.expect("block_size", c.block_size % AsyncFileIO::kAlignment == 0, c.block_size,
           "a multiple of 4096 (O_DIRECT transfers are whole pages)");
  s.expect("block_size", c.block_size <= (int64_t{1} << 30), c.block_size, "at most 1 GiB");
  s.get_min<int64_t>("queue_depth", c.queue_depth, 1, ">= 1");
  s.expect("queue_depth", c.queue_depth <= 4096, c.queue_depth, "at most 4096");
  s.get_min<int64_t>("thread_count", c.thread_count, 1, ">= 1");
  s.expect("thread_count", c.thread_count <= 64, c.thread_count, "at most 64");
  s.get("single_submit", c.single_submit);
  s.get("overlap_events", c.overlap_events);
}

const AioConfig& aio_config(const TrainConfig& cfg) {
  return cfg.section<AioConfig>();
}

namespace {
const RegisterConfigSection<AioConfig> kAioSection{"aio"};

std::string error_text(int error) {
  return std::strerror(error);
}

struct InjectedFault {
  std::mutex mutex;
  std::optional<std::pair<AsyncFileIO::Op, int64_t>> where;
  int error = 0;
};
InjectedFault& injected() {
  static InjectedFault f;
  return f;
}

std::atomic<bool>& blocking_flag() {
  static std::atomic<bool> on{false};
  return on;
}
bool blocking_for_testing() {
  return blocking_flag().load();
}
}  // namespace

void AlignedBuffer::Unmap::operator()(void* p) const {
  munmap(p, bytes);
}

AlignedBuffer::AlignedBuffer(int64_t bytes) {
  TS_CHECK(bytes >= 0, "AlignedBuffer: negative size ", bytes);
  size_ = AsyncFileIO::aligned(bytes);
  if (size_ == 0) return;
  void* p = mmap(nullptr, static_cast<size_t>(size_), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // (page-aligned, zero-filled)
  TS_CHECK(p != MAP_FAILED, "cannot allocate ", size_,
           " bytes of aligned I/O buffer: ", std::strerror(errno));
  data_ = std::unique_ptr<void, Unmap>(p, Unmap{static_cast<size_t>(size_)});
}

// One transfer, cut into pieces; complete when every piece is.
struct AsyncFileIO::Request {
  std::string path;  // the file's (a copy: finish_piece runs on the rings' threads)
  std::string what;  // "read of N bytes at offset O of swap file 'F'"
  int64_t pieces_left = 0;
  std::string error;  // the first failure
};

struct AsyncFileIO::Piece {
  std::shared_ptr<Request> request;
  Op op;
  int fd;
  int file;
  int64_t offset;
  char* data;
  int64_t bytes;
};

// A thread driving one io_uring over its queue of pieces.
class AsyncFileIO::Ring {
 public:
  Ring(AsyncFileIO& owner, const AioConfig& config) : owner_(owner), config_(config) {
    const int rc = blocking_for_testing()
                       ? -ENOSYS
                       : io_uring_queue_init(static_cast<unsigned>(config.queue_depth), &ring_, 0);
    // Where io_uring is unavailable (a kernel before 5.1, or a container whose seccomp profile
    // forbids it, as recent Docker default profiles do) the ring's thread moves its pieces with
    // pread/pwrite: still off the caller's thread, one piece at a time.
    blocking_ = rc == -ENOSYS || rc == -EPERM;
    TS_CHECK(rc == 0 || blocking_, "aio: cannot set up an io_uring of queue_depth ",
             config.queue_depth, ": ", error_text(-rc));
    if (blocking_) warn_blocking_once(-rc);
    thread_ = std::thread([this] { blocking_ ? run_blocking() : run(); });
  }
  ~Ring() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
    if (!blocking_) io_uring_queue_exit(&ring_);
  }
  void push(Piece piece) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(piece));
    }
    wake_.notify_one();
  }

 private:
  static void warn_blocking_once(int error) {
    static std::once_flag once;
    std::call_once(once, [&] {
      std::cerr << "aio: warning: io_uring is unavailable here (" << error_text(error)
                << "): swap transfers use blocking reads and writes on the aio threads\n";
    });
  }
  void run_blocking() {
    for (;;) {
      Piece p;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // (stopping)
        p = std::move(queue_.front());
        queue_.pop_front();
      }
      int64_t result = 0;
      while (result < p.bytes) {
        const ssize_t n = p.op == Op::read
                              ? ::pread(p.fd, p.data + result,
                                        static_cast<size_t>(p.bytes - result), p.offset + result)
                              : ::pwrite(p.fd, p.data + result,
                                         static_cast<size_t>(p.bytes - result), p.offset + result);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          result = n < 0 ? -errno : result;
          break;
        }
        result += n;
      }
      // (A short transfer that moved something reports the offset where it stopped.)
      if (result > 0 && result < p.bytes) {
        p.offset += result;
        p.bytes -= result;
        result = 0;
      }
      owner_.finish_piece(p, result);
    }
  }
  void run() {
    for (;;) {
      std::vector<std::unique_ptr<Piece>> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty() || in_flight_ > 0; });
        if (stop_ && queue_.empty() && in_flight_ == 0) return;
        while (!queue_.empty() &&
               in_flight_ + static_cast<int64_t>(batch.size()) < config_.queue_depth) {
          batch.push_back(std::make_unique<Piece>(std::move(queue_.front())));
          queue_.pop_front();
        }
      }
      for (auto& p : batch) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (p->op == Op::read)
          io_uring_prep_read(sqe, p->fd, p->data, static_cast<unsigned>(p->bytes),
                             static_cast<uint64_t>(p->offset));
        else
          io_uring_prep_write(sqe, p->fd, p->data, static_cast<unsigned>(p->bytes),
                              static_cast<uint64_t>(p->offset));
        io_uring_sqe_set_data(sqe, p.release());
        ++in_flight_;
        if (config_.single_submit) io_uring_submit(&ring_);
      }
      if (!config_.single_submit && !batch.empty()) io_uring_submit(&ring_);
      if (in_flight_ == 0) continue;
      // overlap_events: take what has completed and go back for more pieces; else drain the
      // whole batch before submitting again.
      reap(config_.overlap_events ? 1 : in_flight_);
    }
  }
  void reap(int64_t at_least) {
    for (int64_t got = 0; in_flight_ > 0;) {
      io_uring_cqe* cqe = nullptr;
      const int rc =
          got < at_least ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      if (rc != 0) return;  // nothing more completed now
      std::unique_ptr<Piece> p(static_cast<Piece*>(io_uring_cqe_get_data(cqe)));
      const int64_t result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
      ++got;
      // A partial transfer (buffered files) continues from where it stopped.
      if (result > 0 && result < p->bytes) {
        p->offset += result;
        p->data += result;
        p->bytes -= result;
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_front(std::move(*p));
        return;
      }
      owner_.finish_piece(*p, result);
    }
  }

  AsyncFileIO& owner_;
  AioConfig config_;
  io_uring ring_{};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Piece> queue_;
  int64_t in_flight_ = 0;  // (the ring's thread only)
  bool stop_ = false;
  bool blocking_ = false;  // no io_uring: pread/pwrite
  std::thread thread_;
};

AsyncFileIO::AsyncFileIO(AioConfig config, std::chrono::milliseconds timeout)
    : config_(config), timeout_(timeout) {
  TS_CHECK(config.block_size >= kAlignment && config.block_size % kAlignment == 0,
           "aio.block_size must be a positive multiple of ", kAlignment, ", got ",
           config.block_size);
  TS_CHECK(config.queue_depth >= 1 && config.thread_count >= 1,
           "aio.queue_depth and aio.thread_count must be >= 1");
  for (int64_t i = 0; i < config.thread_count; ++i)
    rings_.push_back(std::make_unique<Ring>(*this, config));
}

AsyncFileIO::~AsyncFileIO() {
  rings_.clear();  // each ring's thread finishes what it holds
  for (File& f : files_)
    if (f.fd >= 0) ::close(f.fd);
}

int AsyncFileIO::open_scratch(const std::filesystem::path& path) {
  File f;
  f.path = path.string();
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  f.fd = ::open(f.path.c_str(), flags | O_DIRECT, 0600);
  f.direct = f.fd >= 0;
  if (f.fd < 0 && errno == EINVAL)
    f.fd = ::open(f.path.c_str(), flags, 0600);  // tmpfs: no O_DIRECT
  TS_CHECK(f.fd >= 0, "cannot create swap file '", f.path, "': ", error_text(errno));
  ::unlink(f.path.c_str());
  files_.push_back(std::move(f));
  return static_cast<int>(files_.size()) - 1;
}

void AsyncFileIO::reserve(int file, int64_t bytes) {
  const File& f = files_.at(static_cast<size_t>(file));
  if (bytes <= 0) return;
  const int rc = ::posix_fallocate(f.fd, 0, bytes);
  TS_CHECK(rc == 0, "cannot reserve ", bytes, " bytes for swap file '", f.path,
           "': ", error_text(rc));
}

bool AsyncFileIO::direct(int file) const {
  return files_.at(static_cast<size_t>(file)).direct;
}
const std::string& AsyncFileIO::path(int file) const {
  return files_.at(static_cast<size_t>(file)).path;
}

AsyncFileIO::Ticket AsyncFileIO::submit(Op op, int file, int64_t offset, void* buffer,
                                        int64_t bytes) {
  const File& f = files_.at(static_cast<size_t>(file));
  TS_CHECK(offset >= 0 && bytes >= 0, "aio: bad transfer of ", bytes, " bytes at offset ", offset,
           " of '", f.path, "'");
  if (f.direct)
    TS_CHECK(offset % kAlignment == 0 && bytes % kAlignment == 0 &&
                 reinterpret_cast<uintptr_t>(buffer) % kAlignment == 0,
             "aio: O_DIRECT transfer of ", bytes, " bytes at offset ", offset, " of '", f.path,
             "' is not aligned to ", kAlignment, " bytes");
  auto request = std::make_shared<Request>();
  request->path = f.path;
  request->what = std::string(op == Op::read ? "read" : "write") + " of " + std::to_string(bytes) +
                  " bytes at offset " + std::to_string(offset) + " of swap file '" + f.path + "'";
  request->pieces_left = (bytes + config_.block_size - 1) / config_.block_size;
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = next_ticket_++;
    requests_[ticket] = request;
  }
  char* data = static_cast<char*>(buffer);
  for (int64_t at = 0; at < bytes; at += config_.block_size) {
    Piece p{
        request, op, f.fd, file, offset + at, data + at, std::min(config_.block_size, bytes - at)};
    rings_[next_ring_++ % rings_.size()]->push(std::move(p));
  }
  return ticket;
}

void AsyncFileIO::finish_piece(Piece& piece, int64_t result) {
  {
    InjectedFault& fault = injected();
    std::lock_guard<std::mutex> lock(fault.mutex);
    if (fault.where && fault.where->first == piece.op && fault.where->second >= piece.offset &&
        fault.where->second < piece.offset + piece.bytes) {
      result = -fault.error;
      fault.where.reset();
    }
  }
  std::string error;
  const char* what = piece.op == Op::read ? "read" : "write";
  if (result < 0)
    error = std::string(what) + " of " + std::to_string(piece.bytes) + " bytes at offset " +
            std::to_string(piece.offset) + " of swap file '" + piece.request->path +
            "' failed: " + error_text(static_cast<int>(-result));
  else if (result == 0 && piece.bytes > 0)
    error = std::string("short ") + what + " at offset " + std::to_string(piece.offset) +
            " of swap file '" + piece.request->path + "': " +
            (piece.op == Op::read ? "the file ends there (truncated under the swapper?)"
                                  : "no byte was written");
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error.empty() && piece.request->error.empty()) piece.request->error = error;
  if (--piece.request->pieces_left == 0) completed_.notify_all();
}

bool AsyncFileIO::done(Ticket ticket) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = requests_.find(ticket);
  return it == requests_.end() || it->second->pieces_left == 0;
}

void AsyncFileIO::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto it = requests_.find(ticket);
  if (it == requests_.end()) return;
  const std::shared_ptr<Request> r = it->second;
  const bool finished = completed_.wait_for(lock, timeout_, [&] { return r->pieces_left == 0; });
  TS_CHECK(finished, "aio: the ", r->what, " did not complete within ",
           std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(), " s (",
           r->pieces_left, " pieces of ", config_.block_size, " bytes outstanding)");
  requests_.erase(ticket);
  TS_CHECK(r->error.empty(), "aio: ", r->error);
}

void AsyncFileIO::use_blocking_io_for_testing(bool on) {
  blocking_flag() = on;
}

void AsyncFileIO::inject_fault_for_testing(Op op, int64_t offset, int error) {
  InjectedFault& fault = injected();
  std::lock_guard<std::mutex> lock(fault.mutex);
  fault.where = std::make_pair(op, offset);
  fault.error = error;
}

}  // namespace tessera::io
