// `tessera launch --hostfile H [filters] -- PROGRAM...`: DeepSpeed's launcher through mpirun or
// srun (experiment/job_launcher.h).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "tessera/experiment/job_launcher.h"

namespace tessera::cli {

namespace {

const char* kLaunchHelp =
    R"(usage: tessera launch [--hostfile H] [--include SPEC | --exclude SPEC]
                      [--num_nodes N] [--num_gpus G] [--master_addr A] [--master_port P]
                      [--launcher openmpi|slurm] [--dry_run] -- PROGRAM [ARGS...]

DeepSpeed's launcher (`deepspeed --hostfile H ...`) for people who have a hostfile: runs
PROGRAM once per slot of the hostfile's hosts, through mpirun (or srun inside a Slurm job),
never a launcher of its own. PROGRAM "tessera" means this tessera binary.

  --hostfile H       DeepSpeed's format, one host per line: "worker-1 slots=4" ('#'
                     comments); default /job/hostfile, as DeepSpeed's
  --include SPEC     only these hosts/slots: HOST[:SLOT,...][@HOST[:SLOT,...]...]
                     ("worker-1:0,2@worker-2": slots 0 and 2 of worker-1, all of worker-2)
  --exclude SPEC     everything but these (same syntax)
  --num_nodes N      the first N hosts;  --num_gpus G  the first G slots of each
  --master_addr A, --master_port P
                     exported to every rank as MASTER_ADDR / MASTER_PORT (default: the
                     first host, 29500); Tessera's own ranks meet through MPI
  --launcher L       openmpi (mpirun; default) or slurm (srun; default inside a Slurm job)
  --dry_run          print the command and run nothing

With --include, --exclude or --num_gpus each host's ranks see only their slots as
CUDA_VISIBLE_DEVICES (one mpirun app context per host), as DeepSpeed's per-node launcher sets.
The exit status is the job's.

  tessera launch --hostfile hostfile -- tessera train configs/gpt2_124m.json
)";

// "tessera" as the program: this binary, so a build that is not on PATH runs on every rank.
std::vector<std::string> program_of(int argc, char** argv, int from) {
  std::vector<std::string> program(argv + std::min(from, argc), argv + argc);
  if (!program.empty() && program.front() == "tessera") {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) program.front() = self.string();
  }
  return program;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_of(" \t\"'\\$`;&|<>()*?") == std::string::npos;
    line += (line.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  return line;
}

}  // namespace

int launch_main(int argc, char** argv) {
  int dashes = argc;
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      dashes = i;
      break;
    }
  const Args a(dashes, argv, 2, {"help", "dry_run"},
               {"hostfile", "include", "exclude", "num_nodes", "num_gpus", "master_addr",
                "master_port", "launcher"});
  if (a.has("help")) {
    std::cout << kLaunchHelp;
    return 0;
  }
  TS_CHECK(a.positional().empty(), "launch: unexpected '",
           a.positional().empty() ? "" : a.positional()[0],
           "': the program to run goes after -- (see --help)");
  experiment::LaunchOptions o;
  o.hostfile = a.get("hostfile", "/job/hostfile");
  o.include = a.get("include", "");
  o.exclude = a.get("exclude", "");
  o.num_nodes = static_cast<int>(a.get_int("num_nodes", -1));
  o.num_gpus = static_cast<int>(a.get_int("num_gpus", -1));
  o.master_addr = a.get("master_addr", "");
  o.master_port = static_cast<int>(a.get_int("master_port", 29500));
  o.launcher = a.get("launcher", std::getenv("SLURM_JOB_ID") ? "slurm" : "openmpi");
  o.program = program_of(argc, argv, dashes + 1);
  const experiment::ResourcePool pool = experiment::launch_resources(o);
  const bool pin = !o.include.empty() || !o.exclude.empty() || o.num_gpus >= 0;
  const std::vector<std::string> command = experiment::launch_command(o, pool, pin);
  if (a.has("dry_run")) {
    std::cout << shell_line(command) << "\n";
    return 0;
  }
  std::cerr << "launch: " << shell_line(command) << std::endl;
  std::vector<char*> args;
  for (const std::string& s : command) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fail("launch: cannot run ", command[0], ": ", std::strerror(errno),
       command[0] == "mpirun" ? " (OpenMPI's mpirun: apt-get install openmpi-bin)" : "");
}

}  // namespace tessera::cli
