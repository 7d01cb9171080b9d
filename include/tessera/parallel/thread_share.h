// Processes that share a machine share its cores: a rank started by mpirun or srun (or a trial
// the experiment runner starts beside others) uses cores / processes-on-this-host OpenMP
// threads, not every core each (two 2-thread ranks on 2 cores ran at a fifth of one alone).
// OMP_NUM_THREADS, when set, wins.
#pragma once

namespace tessera::parallel {

// Processes of this job on this host, from the launcher's variables (OpenMPI's
// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS, Slurm's SLURM_NTASKS_PER_NODE /
// SLURM_TASKS_PER_NODE, and TESSERA_PROCESSES_PER_HOST, which the experiment runner sets for
// trials sharing a host); 1 when none is set.
int processes_per_host();

// The cores this process may run on (its CPU affinity).
int usable_cores();

// Sets OpenMP's thread count to usable_cores() / processes_per_host() (at least 1; the usable
// cores alone when the launcher bound the process to fewer than the machine's) unless
// OMP_NUM_THREADS is set, and returns the count in effect.
int share_cores();

}  // namespace tessera::parallel
