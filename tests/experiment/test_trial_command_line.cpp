// The command lines the experiment runner starts trials with, local and on Slurm.
#include <doctest/doctest.h>

#include "tessera/experiment/experiment_runner.h"

using namespace tessera;

namespace {
using Argv = std::vector<std::string>;
const Argv kProgram = {"tessera", "trial", "exp.yaml", "--trial-id", "3"};
}  // namespace

TEST_CASE("trial command line: local, one slot and several") {
  trial::ExperimentConfig c;
  CHECK(experiment::trial_command_line(c, kProgram, "job") == kProgram);
  c.slots_per_trial = 4;
  Argv want = {"mpirun", "-np", "4"};
  want.insert(want.end(), kProgram.begin(), kProgram.end());
  CHECK(experiment::trial_command_line(c, kProgram, "job") == want);
}

TEST_CASE("trial command line: a Slurm job through srun") {
  trial::ExperimentConfig c = trial::ExperimentConfig::parse(
      "searcher: {metric: loss, max_length: {batches: 8}}\n"
      "resources:\n  slots_per_trial: 2\n  scheduler: slurm\n"
      "  slurm:\n    partition: gpu\n    time_limit: '1:00:00'\n    gpus_per_slot: 1\n"
      "    srun_args: [--exclusive]\n",
      "exp.yaml");
  CHECK(c.warnings.empty());
  Argv want = {"srun",
               "--mpi=pmix",
               "--ntasks",
               "2",
               "--input=0",
               "--job-name",
               "tessera-e1-t3",
               "--kill-on-bad-exit=1",
               "--partition",
               "gpu",
               "--time",
               "1:00:00",
               "--gpus-per-task=1",
               "--exclusive"};
  want.insert(want.end(), kProgram.begin(), kProgram.end());
  CHECK(experiment::trial_command_line(c, kProgram, "tessera-e1-t3") == want);
}

TEST_CASE("trial command line: a wrong scheduler is an error naming the key") {
  CHECK_THROWS_WITH(
      trial::ExperimentConfig::parse(
          "searcher: {metric: loss, max_length: {batches: 8}}\nresources: {scheduler: pbs}\n",
          "exp.yaml"),
      doctest::Contains("exp.yaml:2: 'resources.scheduler' is 'pbs'; expected local or slurm"));
  CHECK_THROWS_WITH(
      trial::ExperimentConfig::parse("searcher: {metric: loss, max_length: {batches: 8}}\n"
                                     "resources: {scheduler: slurm, slurm: {srun_args: --x}}\n",
                                     "exp.yaml"),
      doctest::Contains("'resources.slurm.srun_args' must be a list"));
}
