// Process groups: collectives between the ranks of one job.
//
//   auto world = tessera::parallel::world();      // MPI under mpirun/srun, else a group of 1
//   world->all_reduce(grads, ReduceOp::Avg);       // blocking
//   Work w = world->all_reduce_async(bucket);      // overlapped with compute; w.wait() later
//
// Every collective on a group runs on that group's communication thread, in the order the
// calls were made, so it overlaps the caller's compute. A collective that does not finish
// within the timeout ends the whole job with a message naming the rank and the op (a stuck
// or dead peer must not hang the job). Tensors must be contiguous and stay untouched until
// the Work completes.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/parallel/comms_logger.h"
#include "tessera/tensor.h"

namespace tessera::parallel {

enum class ReduceOp { Sum, Avg, Max };

// One point-to-point transfer of a batch (ProcessGroup::batch_send_recv).
struct P2POp {
  enum class Kind { Send, Recv } kind;
  Tensor tensor;
  int peer;
  int tag = 0;
};

// Completion of an asynchronous collective.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  // Blocks until done; past the group's timeout, aborts the job naming the rank and the op.
  // For a collective on CUDA tensors (NCCL) the host does not block: the caller's GPU work
  // is ordered after the collective, as torch.distributed's Work.wait() does.
  void wait();
  bool done() const;

 private:
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "local", "mpi", "nccl"

  // In place: every rank ends with the reduction of all ranks' `t`.
  virtual Work all_reduce_async(Tensor t, ReduceOp op = ReduceOp::Sum) = 0;
  // `in` holds size() equal chunks; rank r receives the reduction of every rank's chunk r.
  virtual Work reduce_scatter_async(Tensor out, Tensor in, ReduceOp op = ReduceOp::Sum) = 0;
  // `out` receives size() chunks, chunk r being rank r's `in`.
  virtual Work all_gather_async(Tensor out, Tensor in) = 0;
  // `in` and `out` hold size() equal chunks: chunk r of `in` goes to rank r, and chunk r of
  // `out` comes from rank r (torch's all_to_all_single with equal splits; MoE's dispatch).
  virtual Work all_to_all_async(Tensor out, Tensor in) = 0;
  virtual Work broadcast_async(Tensor t, int root) = 0;
  virtual Work send_async(Tensor t, int dst, int tag = 0) = 0;
  virtual Work recv_async(Tensor t, int src, int tag = 0) = 0;
  virtual Work barrier_async() = 0;
  // Posts the sends and receives together, so transfers that must progress at the same time
  // (ranks exchanging data, each sending and receiving) cannot wait on each other. One Work
  // per op. Plain send_async/recv_async pairs suffice on MPI; on NCCL a send blocks the GPU
  // until its receive is posted, so exchanges must go through here.
  virtual std::vector<Work> batch_send_recv(const std::vector<P2POp>& ops);

  void all_reduce(Tensor t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op).wait(); }
  void reduce_scatter(Tensor out, Tensor in, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(out, in, op).wait();
  }
  void all_gather(Tensor out, Tensor in) { all_gather_async(out, in).wait(); }
  void all_to_all(Tensor out, Tensor in) { all_to_all_async(out, in).wait(); }
  void broadcast(Tensor t, int root) { broadcast_async(t, root).wait(); }
  void send(Tensor t, int dst, int tag = 0) { send_async(t, dst, tag).wait(); }
  void recv(Tensor t, int src, int tag = 0) { recv_async(t, src, tag).wait(); }
  void barrier() { barrier_async().wait(); }
  // Sum of one double over the ranks (norms, losses, counts); exact on one rank.
  double all_reduce_scalar(double v, ReduceOp op = ReduceOp::Sum);

  // A group of the listed world ranks (every rank of this group must call it, in the same
  // order). Ranks not listed get nullptr.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

  CommsLogger& logger() { return logger_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  CommsLogger logger_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(30)};
};

// The job's world group, created on first use: MPI when started by mpirun or srun (or
// TESSERA_DIST_BACKEND=mpi), else a single local rank that needs no launcher.
std::shared_ptr<ProcessGroup> world();
// True when the process was started by an MPI-style launcher.
bool launched_distributed();
// Ends every rank of the job now with `code` (after an error on one rank).
// `after_rank0`: an error every rank may be hitting at once (a bad config or checkpoint):
// ranks other than 0 first give rank 0's abort a moment, since OpenMPI's mpirun can crash
// gathering several simultaneous aborts' messages. A timeout aborts at once.
[[noreturn]] void abort_job(int code, bool after_rank0 = false);

// A single-process group: collectives are identities, so one code path serves 1..N ranks.
std::shared_ptr<ProcessGroup> make_local_group();

// NCCL over the ranks of `bootstrap` (which carries NCCL's unique id from rank 0), for CUDA
// tensors on `device`; CPU tensors given to it go through `bootstrap`. Collectives run on a
// communication stream of their own after the work already queued on the device's compute
// stream. A watchdog thread ends the job when one is unfinished after the timeout or NCCL
// reports an asynchronous error. Fails with the reason in builds without NCCL.
std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<ProcessGroup> bootstrap,
                                              Device device);
bool nccl_compiled();
std::string nccl_version();  // "2.28.3" (the library loaded), empty without NCCL
// The device a rank should use when told only "cuda": its rank among the job's processes on
// this machine (launcher's local rank), modulo the visible devices.
int local_device_index();

}  // namespace tessera::parallel
