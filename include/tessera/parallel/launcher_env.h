// What the launcher (mpirun, MPICH's mpiexec, srun, torchrun-style) says about this process's
// place on its host: one list of its variables for every reader (the rank's GPU, the cores a
// rank takes, a trial's local slot).
#pragma once
#include <optional>

namespace tessera::parallel {

// The count at the start of variable `name` (Slurm's "2(x3)" reads 2) when it is at least
// `least` and below 100000; none when unset or not such a count.
std::optional<int> env_count(const char* name, int least);

// This process among its job's processes on this host: OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK,
// MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID, or LOCAL_RANK (the first set wins); none
// when no launcher set one (a value that is not a count >= 0 counts as unset).
std::optional<int> launcher_local_rank();

// The job's processes on this host: OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS,
// SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE ("2(x3)": 2 on each of 3 nodes) or
// LOCAL_WORLD_SIZE; none when no launcher set one (or it is not a positive count).
std::optional<int> launcher_local_size();

}  // namespace tessera::parallel
