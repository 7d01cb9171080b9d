#include "tessera/parallel/thread_share.h"

#include "tessera/parallel/host_registry.h"
#include "tessera/parallel/launcher_env.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace tessera::parallel {

namespace {

// A launcher that bound this process to some cores has shared them out already.
bool bound_by_launcher() {
  return usable_cores() < static_cast<int>(std::thread::hardware_concurrency());
}

// This process's cores when `registered` processes (and at least the launcher's count) share
// the host.
int share_of(int registered) {
  return std::max(1, usable_cores() / std::max(registered, processes_per_host()));
}

struct HostShare {
  std::optional<HostRegistry> registry;
  std::chrono::steady_clock::time_point checked;
};

// Process-wide, as OpenMP's thread count it governs; used from the thread running the steps.
HostShare& host_share() {
  static HostShare share;
  return share;
}

}  // namespace

int processes_per_host() {
  // The experiment runner's count for trials sharing a host, else the launcher's.
  return env_count("TESSERA_PROCESSES_PER_HOST", 1).value_or(launcher_local_size().value_or(1));
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int share_cores() {
  if (!std::getenv("OMP_NUM_THREADS"))
    omp_set_num_threads(bound_by_launcher() ? usable_cores() : share_of(1));
  return omp_get_max_threads();
}

int join_host_share() {
  if (std::getenv("OMP_NUM_THREADS") || bound_by_launcher()) return omp_get_max_threads();
  HostShare& s = host_share();
  if (!s.registry) s.registry.emplace(HostRegistry::default_dir());
  s.checked = std::chrono::steady_clock::now();
  omp_set_num_threads(share_of(s.registry->live()));
  return omp_get_max_threads();
}

int rebalance_cores() {
  HostShare& s = host_share();
  const auto now = std::chrono::steady_clock::now();
  if (s.registry && now - s.checked >= std::chrono::seconds(1)) {
    s.checked = now;
    const int share = share_of(s.registry->live());
    if (share != omp_get_max_threads()) omp_set_num_threads(share);
  }
  return omp_get_max_threads();
}

}  // namespace tessera::parallel
