// The launcher's variables, read once for every reader: the local rank (a rank's GPU, a
// trial's local slot) and the processes on the host (the cores each takes).
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "tessera/parallel/launcher_env.h"
#include "tessera/parallel/thread_share.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

namespace {

const char* kVariables[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
                            "MPI_LOCALRANKID",
                            "SLURM_LOCALID",
                            "LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE",
                            "MPI_LOCALNRANKS",
                            "SLURM_NTASKS_PER_NODE",
                            "SLURM_TASKS_PER_NODE",
                            "LOCAL_WORLD_SIZE",
                            "TESSERA_PROCESSES_PER_HOST"};

// Clears the launcher's variables for a case and puts back what mpirun set (this suite also
// runs under mpirun).
struct CleanLauncherEnv {
  std::map<std::string, std::string> saved;
  CleanLauncherEnv() {
    for (const char* v : kVariables)
      if (const char* s = std::getenv(v)) saved[v] = s;
    for (const char* v : kVariables) unsetenv(v);
  }
  ~CleanLauncherEnv() {
    for (const char* v : kVariables) unsetenv(v);
    for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  }
};

}  // namespace

TEST_CASE("launcher variables: each launcher's local rank and host size, in one place") {
  using tessera::parallel::launcher_local_rank;
  using tessera::parallel::launcher_local_size;
  const CleanLauncherEnv env;
  CHECK(launcher_local_rank() == std::nullopt);
  CHECK(launcher_local_size() == std::nullopt);
  CHECK(tessera::parallel::processes_per_host() == 1);

  setenv("LOCAL_RANK", "3", 1);
  CHECK(launcher_local_rank() == 3);
  setenv("MPI_LOCALRANKID", "1", 1);  // MPICH's, ahead of the generic one
  CHECK(launcher_local_rank() == 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);  // rank 0 is a rank, not "unset"
  CHECK(launcher_local_rank() == 0);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "-2", 1);  // not a rank: the next variable
  CHECK(launcher_local_rank() == 1);

  setenv("SLURM_TASKS_PER_NODE", "2(x3)", 1);  // Slurm: 2 on each of 3 nodes
  CHECK(launcher_local_size() == 2);
  CHECK(tessera::parallel::processes_per_host() == 2);
  setenv("MPI_LOCALNRANKS", "4", 1);
  CHECK(launcher_local_size() == 4);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "zero", 1);  // not a count: the next variable
  CHECK(launcher_local_size() == 4);
  setenv("TESSERA_PROCESSES_PER_HOST", "3", 1);  // the experiment runner's count wins
  CHECK(tessera::parallel::processes_per_host() == 3);
}

TEST_SUITE_END();
