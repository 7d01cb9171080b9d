// Processes that share a machine share its cores: a rank started by mpirun or srun (or a trial
// the experiment runner starts beside others) uses cores / processes-on-this-host OpenMP
// threads, not every core each (two 2-thread ranks on 2 cores ran at a fifth of one alone).
// Runs started by hand find each other through the host registry (host_registry.h) and share
// too, re-dividing the cores as runs start and end. OMP_NUM_THREADS, when set, wins.
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

// For processes that compute (train, trial, eval, generate, profile): registers this one in the
// host registry and sets its threads to usable_cores() / the registered processes (or the
// launcher's count when larger). Does nothing when OMP_NUM_THREADS is set or the launcher bound
// the process. Returns the thread count in effect.
int join_host_share();

// Between steps, on the thread that runs them: re-counts the registered processes (at most once
// a second) and takes this process's share now, so a run started beside this one halves its
// threads and the survivor takes the cores back when the other ends. Results do not change:
// CPU kernels give the same bits at every thread count. Returns the thread count in effect.
int rebalance_cores();

}  // namespace tessera::parallel
