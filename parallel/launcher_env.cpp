#include "tessera/parallel/launcher_env.h"

#include <cstdlib>

namespace tessera::parallel {

namespace {

std::optional<int> first_count(std::initializer_list<const char*> names, int least) {
  for (const char* name : names)
    if (const auto n = env_count(name, least)) return n;
  return std::nullopt;
}

}  // namespace

std::optional<int> env_count(const char* name, int least) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || n < least || n >= 100000) return std::nullopt;
  return static_cast<int>(n);
}

std::optional<int> launcher_local_rank() {
  return first_count(
      {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}, 0);
}

std::optional<int> launcher_local_size() {
  return first_count({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                      "SLURM_TASKS_PER_NODE", "LOCAL_WORLD_SIZE"},
                     1);
}

}  // namespace tessera::parallel
