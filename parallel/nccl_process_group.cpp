// The NCCL process group (CUDA tensors). NCCL's unique id travels from rank 0 over the
// bootstrap (MPI) group; collectives are queued on a communication stream that first waits
// for the device's compute stream, and Work::wait() makes the compute stream wait for them.
// A watchdog thread polls each collective's completion event: it keeps the tensors alive
// until the device is done with them, logs the time, and ends the job on a timeout or an
// asynchronous NCCL error rather than letting the ranks hang.
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <thread>

#include "tessera/cuda.h"
#include "tessera/cuda_stream.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"
#include "work_state.h"

namespace tessera::parallel {

namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  fail(call, " failed: ", ncclGetErrorString(r), " (", ncclGetLastError(nullptr), ")");
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Bool:
      return ncclUint8;
  }
  fail("NCCL: unsupported dtype ", dtype_name(d));
}

ncclRedOp_t nccl_op(ReduceOp op, DType d) {
  TS_CHECK(d != DType::Bool, "NCCL: reductions of bool tensors are not supported");
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

// One queued collective, until the device has finished it.
struct Pending {
  std::shared_ptr<Work::State> state;
  std::unique_ptr<cuda::Event> start;
  std::shared_ptr<cuda::Event> done;  // also held by the Work's device_wait
  std::vector<Tensor> keep_alive;
  const char* op;
  int64_t msg_bytes;
  double bus_bytes;
  std::chrono::steady_clock::time_point deadline;
};

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(std::shared_ptr<ProcessGroup> bootstrap, Device device, ncclComm_t comm)
      : bootstrap_(std::move(bootstrap)), device_(device), comm_(comm) {
    rank_ = bootstrap_->rank();
    size_ = bootstrap_->size();
    timeout_ = bootstrap_->timeout();
    cuda::DeviceGuard guard(device_.index);
    if (!comm_) {
      // Rank 0 makes the id; everyone joins with it (ncclCommInitRank waits for all ranks).
      ncclUniqueId id;
      std::memset(&id, 0, sizeof id);
      if (rank_ == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      static_assert(sizeof id % 4 == 0);
      Tensor words = zeros({static_cast<int64_t>(sizeof id / 4)}, DType::Int32);
      std::memcpy(words.data_ptr(), &id, sizeof id);
      bootstrap_->broadcast(words, 0);
      std::memcpy(&id, words.data_ptr(), sizeof id);
      nccl_check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
    }
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess)
      fail("NCCL group: cudaStreamCreateWithFlags failed on ", device_.str());
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclProcessGroup() override {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      drained_.wait(lock, [&] { return pending_.empty(); });
      stop_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }

  Work all_reduce_async(Tensor t, ReduceOp op) override {
    if (t.device().is_cpu()) return bootstrap_->all_reduce_async(t, op);
    const size_t n = checked(t, "all_reduce");
    const double bus = 2.0 * (size_ - 1) / size_ * static_cast<double>(t.nbytes());
    return submit("all_reduce", {t}, t.nbytes(), bus, [=, this] {
      nccl_check(ncclAllReduce(t.data_ptr(), t.data_ptr(), n, nccl_type(t.dtype()),
                               nccl_op(op, t.dtype()), comm_, stream_),
                 "ncclAllReduce");
    });
  }

  Work reduce_scatter_async(Tensor out, Tensor in, ReduceOp op) override {
    if (out.device().is_cpu() && in.device().is_cpu())
      return bootstrap_->reduce_scatter_async(out, in, op);
    const size_t n = checked(out, "reduce_scatter");
    checked(in, "reduce_scatter");
    TS_CHECK(in.numel() == out.numel() * size_ && in.dtype() == out.dtype(),
             "reduce_scatter: input ", in.describe(), " must hold ", size_, " chunks of output ",
             out.describe());
    const double bus = static_cast<double>(size_ - 1) / size_ * static_cast<double>(in.nbytes());
    return submit("reduce_scatter", {out, in}, in.nbytes(), bus, [=, this] {
      nccl_check(ncclReduceScatter(in.data_ptr(), out.data_ptr(), n, nccl_type(in.dtype()),
                                   nccl_op(op, in.dtype()), comm_, stream_),
                 "ncclReduceScatter");
    });
  }

  Work all_gather_async(Tensor out, Tensor in) override {
    if (out.device().is_cpu() && in.device().is_cpu()) return bootstrap_->all_gather_async(out, in);
    const size_t n = checked(in, "all_gather");
    checked(out, "all_gather");
    TS_CHECK(out.numel() == in.numel() * size_ && in.dtype() == out.dtype(), "all_gather: output ",
             out.describe(), " must hold ", size_, " chunks of input ", in.describe());
    const double bus = static_cast<double>(size_ - 1) / size_ * static_cast<double>(out.nbytes());
    return submit("all_gather", {out, in}, out.nbytes(), bus, [=, this] {
      // In place when `in` is this rank's chunk of `out` (NCCL allows exactly that overlap).
      nccl_check(
          ncclAllGather(in.data_ptr(), out.data_ptr(), n, nccl_type(in.dtype()), comm_, stream_),
          "ncclAllGather");
    });
  }

  Work all_to_all_async(Tensor out, Tensor in) override {
    if (out.device().is_cpu() && in.device().is_cpu()) return bootstrap_->all_to_all_async(out, in);
    checked(in, "all_to_all");
    checked(out, "all_to_all");
    TS_CHECK(in.numel() == out.numel() && in.dtype() == out.dtype() && in.numel() % size_ == 0,
             "all_to_all: input ", in.describe(), " and output ", out.describe(), " must be ",
             size_, " equal chunks of one dtype");
    const size_t n = static_cast<size_t>(in.numel() / size_);
    const int64_t chunk_bytes = in.nbytes() / size_;
    const double bus = static_cast<double>(size_ - 1) / size_ * static_cast<double>(in.nbytes());
    return submit("all_to_all", {out, in}, in.nbytes(), bus, [=, this] {
      // NCCL has no all-to-all: one group of a send and a receive per peer.
      const ncclDataType_t type = nccl_type(in.dtype());
      nccl_check(ncclGroupStart(), "ncclGroupStart");
      for (int peer = 0; peer < size_; ++peer) {
        nccl_check(ncclSend(static_cast<const char*>(in.data_ptr()) + peer * chunk_bytes, n, type,
                            peer, comm_, stream_),
                   "ncclSend");
        nccl_check(ncclRecv(static_cast<char*>(out.data_ptr()) + peer * chunk_bytes, n, type, peer,
                            comm_, stream_),
                   "ncclRecv");
      }
      nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    });
  }

  Work broadcast_async(Tensor t, int root) override {
    if (t.device().is_cpu()) return bootstrap_->broadcast_async(t, root);
    const size_t n = checked(t, "broadcast");
    check_rank(root, "broadcast");
    return submit("broadcast", {t}, t.nbytes(), static_cast<double>(t.nbytes()), [=, this] {
      nccl_check(
          ncclBroadcast(t.data_ptr(), t.data_ptr(), n, nccl_type(t.dtype()), root, comm_, stream_),
          "ncclBroadcast");
    });
  }

  Work send_async(Tensor t, int dst, int tag) override {
    if (t.device().is_cpu()) return bootstrap_->send_async(t, dst, tag);
    const size_t n = checked(t, "send");
    check_rank(dst, "send");
    TS_CHECK(tag == 0, "send: NCCL has no message tags (got tag ", tag,
             "); messages between two ranks arrive in the order they were sent");
    return submit("send", {t}, t.nbytes(), static_cast<double>(t.nbytes()), [=, this] {
      nccl_check(ncclSend(t.data_ptr(), n, nccl_type(t.dtype()), dst, comm_, stream_), "ncclSend");
    });
  }

  Work recv_async(Tensor t, int src, int tag) override {
    if (t.device().is_cpu()) return bootstrap_->recv_async(t, src, tag);
    const size_t n = checked(t, "recv");
    check_rank(src, "recv");
    TS_CHECK(tag == 0, "recv: NCCL has no message tags (got tag ", tag, ")");
    return submit("recv", {t}, t.nbytes(), 0.0, [=, this] {
      nccl_check(ncclRecv(t.data_ptr(), n, nccl_type(t.dtype()), src, comm_, stream_), "ncclRecv");
    });
  }

  std::vector<Work> batch_send_recv(const std::vector<P2POp>& ops) override {
    if (ops.empty()) return {};
    if (ops.front().tensor.device().is_cpu()) return bootstrap_->batch_send_recv(ops);
    std::vector<Tensor> tensors;
    int64_t bytes = 0;
    for (const P2POp& op : ops) {
      checked(op.tensor, op.kind == P2POp::Kind::Send ? "send" : "recv");
      check_rank(op.peer, "batch_send_recv");
      TS_CHECK(op.tag == 0, "batch_send_recv: NCCL has no message tags (got tag ", op.tag, ")");
      tensors.push_back(op.tensor);
      if (op.kind == P2POp::Kind::Send) bytes += op.tensor.nbytes();
    }
    Work w = submit("send_recv", tensors, bytes, static_cast<double>(bytes), [&, this] {
      // One NCCL group: every send and receive of the batch progresses together.
      nccl_check(ncclGroupStart(), "ncclGroupStart");
      for (const P2POp& op : ops) {
        const auto n = static_cast<size_t>(op.tensor.numel());
        const ncclDataType_t type = nccl_type(op.tensor.dtype());
        if (op.kind == P2POp::Kind::Send)
          nccl_check(ncclSend(op.tensor.data_ptr(), n, type, op.peer, comm_, stream_), "ncclSend");
        else
          nccl_check(ncclRecv(op.tensor.data_ptr(), n, type, op.peer, comm_, stream_), "ncclRecv");
      }
      nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    });
    return std::vector<Work>(ops.size(), w);
  }

  // A device barrier: a one-element all-reduce the host waits for, so every rank's queued
  // GPU work before it has been reached.
  Work barrier_async() override {
    Tensor one = zeros({1}, DType::Float32, device_);
    return submit(
        "barrier", {one}, 0, 0.0,
        [=, this] {
          nccl_check(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_,
                                   stream_),
                     "ncclAllReduce (barrier)");
        },
        /*host_wait=*/true);
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    bool member = false;
    int key = 0;
    for (size_t i = 0; i < ranks.size(); ++i) {
      check_rank(ranks[i], "new_group");
      if (ranks[i] == rank_) {
        member = true;
        key = static_cast<int>(i);
      }
    }
    // Every rank takes part in the split; those not listed get no communicator.
    std::shared_ptr<ProcessGroup> sub_bootstrap = bootstrap_->new_group(ranks);
    ncclComm_t sub = nullptr;
    {
      cuda::DeviceGuard guard(device_.index);
      nccl_check(ncclCommSplit(comm_, member ? 0 : NCCL_SPLIT_NOCOLOR, key, &sub, nullptr),
                 "ncclCommSplit");
    }
    if (!member) return nullptr;
    auto g = std::make_shared<NcclProcessGroup>(sub_bootstrap, device_, sub);
    g->set_timeout(timeout_);
    return g;
  }

 private:
  size_t checked(const Tensor& t, const char* op) const {
    TS_CHECK(t.is_contiguous(), op, ": tensor must be contiguous, got ", t.describe());
    TS_CHECK(t.device() == device_, op, ": this NCCL group works on ", device_.str(), ", got ",
             t.describe());
    return static_cast<size_t>(t.numel());
  }
  void check_rank(int r, const char* op) const {
    TS_CHECK(r >= 0 && r < size_, op, ": rank ", r, " is outside this group of ", size_);
  }

  // host_wait: Work::wait() blocks the host until the device has finished (barrier);
  // otherwise it only orders the compute stream after the collective.
  Work submit(const char* op, std::vector<Tensor> tensors, int64_t msg_bytes, double bus_bytes,
              const std::function<void()>& call, bool host_wait = false) {
    cuda::DeviceGuard guard(device_.index);
    auto p = std::make_unique<Pending>();
    p->state = std::make_shared<Work::State>();
    p->state->what = std::string(op) + (tensors.empty() ? "" : " of " + tensors[0].describe());
    p->state->rank = rank_;
    p->state->timeout = timeout_;
    p->start = std::make_unique<cuda::Event>();
    p->done = std::make_shared<cuda::Event>();
    // The inputs were produced on the compute stream: the collective starts after them.
    cuda::Event inputs_ready;
    const cudaStream_t compute = cuda::compute_stream(device_.index);
    inputs_ready.record(compute);
    inputs_ready.block(stream_);
    p->start->record(stream_);
    call();
    p->done->record(stream_);
    if (!host_wait) {
      p->state->device_wait = [dev = device_, done = p->done] {
        cuda::DeviceGuard g(dev.index);
        done->block(cuda::compute_stream(dev.index));
      };
    }
    p->keep_alive = std::move(tensors);
    p->op = op;
    p->msg_bytes = msg_bytes;
    p->bus_bytes = bus_bytes;
    p->deadline = std::chrono::steady_clock::now() + timeout_;
    Work w(p->state);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(std::move(p));
    }
    wake_.notify_all();
    return w;
  }

  // Retires finished collectives in order; ends the job on a timeout or an NCCL error.
  void watch() {
    cudaSetDevice(device_.index);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (pending_.empty()) {
        wake_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      } else {  // poll the oldest collective's event
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        lock.lock();
      }
      if (stop_ && pending_.empty()) return;
      while (!pending_.empty()) {
        Pending& p = *pending_.front();
        bool finished = false;
        try {
          finished = p.done->done();
        } catch (const Error& e) {
          die(p, std::string("failed: ") + e.what());
        }
        if (!finished) {
          ncclResult_t async = ncclSuccess;
          ncclCommGetAsyncError(comm_, &async);
          if (async != ncclSuccess && async != ncclInProgress)
            die(p, std::string("failed: NCCL reported ") + ncclGetErrorString(async));
          if (std::chrono::steady_clock::now() > p.deadline) {
            char why[96];
            std::snprintf(why, sizeof why,
                          "did not finish within %.0f s: another rank is stuck or has died",
                          std::chrono::duration<double>(p.state->timeout).count());
            die(p, why);
          }
          break;
        }
        logger_.record(p.op, p.msg_bytes, p.bus_bytes,
                       cuda::Event::elapsed_ms(*p.start, *p.done) / 1000.0);
        pending_.front()->state->finish();
        pending_.pop_front();
      }
      if (pending_.empty()) drained_.notify_all();
    }
  }

  [[noreturn]] void die(const Pending& p, const std::string& why) {
    std::fprintf(stderr, "tessera: rank %d: %s (NCCL, %s) %s; ending the job\n", rank_,
                 p.state->what.c_str(), device_.str().c_str(), why.c_str());
    std::fflush(stderr);
    ncclCommAbort(comm_);
    abort_job(1);
  }

  std::shared_ptr<ProcessGroup> bootstrap_;
  Device device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::list<std::unique_ptr<Pending>> pending_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup> bootstrap,
                                              Device device) {
  TS_CHECK(bootstrap, "make_nccl_group: no bootstrap group");
  TS_CHECK(device.is_cuda(), "make_nccl_group: NCCL needs a CUDA device, got ", device.str());
  require_usable_device(device, "make_nccl_group:");
  return std::make_shared<NcclProcessGroup>(std::move(bootstrap), device, nullptr);
}

bool nccl_compiled() {
  return true;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace tessera::parallel
