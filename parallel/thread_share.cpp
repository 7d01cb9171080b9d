#include "tessera/parallel/thread_share.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace tessera::parallel {

namespace {

// A positive count from the start of a launcher's variable ("2(x3)" is Slurm's 2 per node).
int leading_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && n > 0 && n < 100000 ? static_cast<int>(n) : 0;
}

}  // namespace

int processes_per_host() {
  for (const char* v : {"TESSERA_PROCESSES_PER_HOST", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
    if (const int n = leading_count(v)) return n;
  return 1;
}

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int share_cores() {
  if (!std::getenv("OMP_NUM_THREADS")) {
    // A launcher that bound this process to some cores has shared them out already.
    const int cores = usable_cores();
    const bool bound = cores < static_cast<int>(std::thread::hardware_concurrency());
    omp_set_num_threads(std::max(1, bound ? cores : cores / processes_per_host()));
  }
  return omp_get_max_threads();
}

}  // namespace tessera::parallel
