// Internal: the shared state behind a Work handle and the thread that runs collectives.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

struct Work::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool finished = false;
  std::exception_ptr error;
  std::string what;  // "all_reduce of float32[4096]" for the timeout message
  int rank = 0;
  std::chrono::milliseconds timeout{0};
  // Device collectives (NCCL): wait() orders the caller's GPU stream after the collective
  // instead of blocking the host; the group's watchdog enforces the timeout.
  std::function<void()> device_wait;

  void finish(std::exception_ptr e = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      finished = true;
      error = e;
    }
    cv.notify_all();
  }
};

// Runs posted jobs one at a time, in order, on its own thread (so MPI calls overlap compute
// and are never made from two threads at once).
class CommThread {
 public:
  CommThread();
  ~CommThread();  // runs what was posted, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;
  void post(std::function<void()> job);
  // Runs `job` on the thread and waits for it (setup calls such as MPI_Init).
  void run(const std::function<void()>& job);
  // `poll` runs on the thread after every job and, while it returns true (requests still
  // outstanding, such as non-blocking sends), every 50 us when there is no job.
  void set_poller(std::function<bool()> poll);

 private:
  void loop();
  std::function<bool()> poll_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::parallel
