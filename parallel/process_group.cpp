#include "tessera/parallel/process_group.h"

#include "tessera/parallel/launcher_env.h"

#include <cstdio>
#include <cstdlib>

#include "tessera/cuda.h"
#include "tessera/ops.h"
#include "work_state.h"

namespace tessera::parallel {

// ---- Work ----

void Work::wait() {
  if (!state_) return;
  if (state_->device_wait) {
    state_->device_wait();
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->error) std::rethrow_exception(state_->error);
    return;
  }
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (!state_->cv.wait_for(lock, state_->timeout, [&] { return state_->finished; })) {
    std::fprintf(stderr,
                 "tessera: rank %d: %s did not finish within %.0f s: another rank is stuck or "
                 "has died; ending the job\n",
                 state_->rank, state_->what.c_str(),
                 std::chrono::duration<double>(state_->timeout).count());
    std::fflush(stderr);
    abort_job(1);
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->finished;
}

// ---- CommThread ----

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommThread::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void CommThread::run(const std::function<void()>& job) {
  auto done = std::make_shared<Work::State>();
  post([&job, done] {
    try {
      job();
      done->finish();
    } catch (...) {
      done->finish(std::current_exception());
    }
  });
  std::unique_lock<std::mutex> lock(done->mutex);
  done->cv.wait(lock, [&] { return done->finished; });
  if (done->error) std::rethrow_exception(done->error);
}

void CommThread::set_poller(std::function<bool()> poll) {
  std::lock_guard<std::mutex> lock(mutex_);
  poll_ = std::move(poll);
}

void CommThread::loop() {
  bool polling = false;
  for (;;) {
    std::function<void()> job;
    std::function<bool()> poll;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto ready = [&] { return stop_ || !jobs_.empty(); };
      if (polling)
        cv_.wait_for(lock, std::chrono::microseconds(50), ready);
      else
        cv_.wait(lock, ready);
      if (jobs_.empty() && stop_) return;
      if (!jobs_.empty()) {
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      poll = poll_;
    }
    if (job) job();
    job = nullptr;  // its captured tensors go before the poller finishes more Work
    polling = poll && poll();
  }
}

// ---- ProcessGroup ----

std::vector<Work> ProcessGroup::batch_send_recv(const std::vector<P2POp>& ops) {
  std::vector<Work> works;
  for (const P2POp& op : ops)
    works.push_back(op.kind == P2POp::Kind::Send ? send_async(op.tensor, op.peer, op.tag)
                                                 : recv_async(op.tensor, op.peer, op.tag));
  return works;
}

double ProcessGroup::all_reduce_scalar(double v, ReduceOp op) {
  if (size() == 1) return v;
  Tensor t = full({1}, v, DType::Float64);
  all_reduce(t, op);
  return t.item();
}

namespace {

Work finished_work() {
  auto s = std::make_shared<Work::State>();
  s->finished = true;
  return Work(s);
}

void check_same(const Tensor& a, const Tensor& b, const char* op) {
  TS_CHECK(a.numel() == b.numel() && a.dtype() == b.dtype(), op,
           ": expected tensors of equal size ", "and dtype on one rank, got ", a.describe(),
           " and ", b.describe());
}

// One rank: collectives are identities, so code written for N ranks runs unchanged.
class LocalProcessGroup : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  Work all_reduce_async(Tensor t, ReduceOp) override {
    logger_.record("all_reduce", t.nbytes(), 0, 0);
    return finished_work();
  }
  Work reduce_scatter_async(Tensor out, Tensor in, ReduceOp) override {
    check_same(out, in, "reduce_scatter");
    if (!out.same(in)) out.copy_(in.view(out.shape()));
    logger_.record("reduce_scatter", in.nbytes(), 0, 0);
    return finished_work();
  }
  Work all_gather_async(Tensor out, Tensor in) override {
    check_same(out, in, "all_gather");
    if (out.data_ptr() != in.data_ptr()) out.copy_(in.view(out.shape()));
    logger_.record("all_gather", out.nbytes(), 0, 0);
    return finished_work();
  }
  Work all_to_all_async(Tensor out, Tensor in) override {
    check_same(out, in, "all_to_all");
    if (out.data_ptr() != in.data_ptr()) out.copy_(in.view(out.shape()));
    logger_.record("all_to_all", in.nbytes(), 0, 0);
    return finished_work();
  }
  Work broadcast_async(Tensor, int root) override {
    TS_CHECK(root == 0, "broadcast: root ", root, " is not a rank of a 1-rank group");
    return finished_work();
  }
  Work send_async(Tensor, int dst, int) override {
    fail("send: rank ", dst, " does not exist in a 1-rank group");
  }
  Work recv_async(Tensor, int src, int) override {
    fail("recv: rank ", src, " does not exist in a 1-rank group");
  }
  Work barrier_async() override { return finished_work(); }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    TS_CHECK(ranks.size() == 1 && ranks[0] == 0, "new_group: a 1-rank world has only rank 0");
    return std::make_shared<LocalProcessGroup>();
  }
};

}  // namespace

std::shared_ptr<ProcessGroup> make_local_group() {
  return std::make_shared<LocalProcessGroup>();
}

int local_device_index() {
  const int devices = cuda_device_count();
  const std::optional<int> local = launcher_local_rank();
  return local && devices > 0 ? *local % devices : 0;
}

bool launched_distributed() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  const char* b = std::getenv("TESSERA_DIST_BACKEND");
  return b && std::string(b) == "mpi";
}

}  // namespace tessera::parallel
