// DeepSpeed's launcher for people with a hostfile (`deepspeed --hostfile H ...`), as
// `tessera launch`: the hostfile's hosts and slots, filtered as DeepSpeed's runner filters them
// (--include / --exclude, --num_nodes, --num_gpus), become one mpirun (or, under Slurm, srun)
// command. Tessera starts no launcher of its own: MPI's places the ranks.
//
//   hostfile:   worker-1 slots=4          (DeepSpeed's format: NAME slots=N, # comments)
//               worker-2 slots=4
//   tessera launch --hostfile hostfile --include "worker-1:0,1@worker-2" -- tessera train c.json
//
// With a slot filter each host's ranks see only their slots as CUDA_VISIBLE_DEVICES (mpirun
// app contexts, one per host: what DeepSpeed's per-node launcher sets).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace tessera::experiment {

// Hosts in hostfile order, each with its slot indices (0..slots-1 before a filter).
struct HostSlots {
  std::string host;
  std::vector<int> slots;
};
using ResourcePool = std::vector<HostSlots>;

// DeepSpeed's _parse_hostfile: "NAME slots=N" lines, '#' comments and blank lines skipped.
// Errors name `source` and the line (a bad entry, a host twice, slots out of range) or say the
// file has no host.
ResourcePool parse_hostfile(const std::string& text, const std::string& source);
ResourcePool read_hostfile(const std::string& path);

// DeepSpeed's parse_resource_filter: NODE_SPEC[@NODE_SPEC...], NODE_SPEC = NAME[:SLOT[,SLOT...]].
// include keeps only what it names; exclude removes it (a host left with no slot goes).
// Errors name the host or slot the hostfile does not have; include and exclude together are an
// error.
ResourcePool filter_resources(const ResourcePool& pool, const std::string& include,
                              const std::string& exclude);

struct LaunchOptions {
  std::string hostfile;
  std::string include, exclude;
  int num_nodes = -1;  // the first N hosts (-1: all)
  int num_gpus = -1;   // the first G slots of each host (-1: all)
  int master_port = 29500;
  std::string master_addr;           // default: the first host
  std::string launcher;              // "openmpi" (mpirun) or "slurm" (srun); "": slurm inside a job
  std::vector<std::string> program;  // what each rank runs (after "--")
};

// The hosts a launch uses: the hostfile filtered by include/exclude, then num_nodes and
// num_gpus (which cannot be combined with include/exclude, as in DeepSpeed).
ResourcePool launch_resources(const LaunchOptions& options);

// The command that runs options.program once per slot of `pool`: mpirun with one app context
// per host (-np N -H host:N, and CUDA_VISIBLE_DEVICES of its slots when `pin_devices`), or
// srun over the hosts (equal slots per host); MASTER_ADDR and MASTER_PORT exported to every
// rank.
std::vector<std::string> launch_command(const LaunchOptions& options, const ResourcePool& pool,
                                        bool pin_devices);

}  // namespace tessera::experiment
