// `tessera launch`'s hostfile and filters, against DeepSpeed's runner (launcher/runner.py:
// _parse_hostfile, parse_resource_filter and the num_nodes / num_gpus rules, transcribed by
// hand into the expected pools below), and the command lines it builds.
#include <doctest/doctest.h>

#include <functional>

#include "tessera/error.h"
#include "tessera/experiment/job_launcher.h"

using namespace tessera;
using experiment::HostSlots;
using experiment::ResourcePool;

namespace {

const char* kHostfile = R"(# two workers
worker-0 slots=4
  worker-1   slots=2

worker-2 slots=3 # trailing words are ignored, as DeepSpeed's regex does
)";

ResourcePool pool() {
  return experiment::parse_hostfile(kHostfile, "hostfile");
}

bool same(const ResourcePool& a, const ResourcePool& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].host != b[i].host || a[i].slots != b[i].slots) return false;
  return true;
}

void check_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL("no error; expected '", needle, "'");
  } catch (const Error& e) {
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("a hostfile is DeepSpeed's: hosts in order with their slots") {
  CHECK(same(pool(), {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1}}, {"worker-2", {0, 1, 2}}}));
  check_error([] { experiment::parse_hostfile("a slots=2\nb slot=2\n", "h"); },
              "h:2: expected \"HOSTNAME slots=N\"");
  check_error([] { experiment::parse_hostfile("a slots=2\n\na slots=1\n", "h"); },
              "h:3: host 'a' appears twice");
  check_error([] { experiment::parse_hostfile("a slots=0\n", "h"); }, "h:1: host 'a' has slots=0");
  check_error([] { experiment::parse_hostfile("a slots=99999999999\n", "h"); },
              "h:1: expected \"HOSTNAME slots=N\"");
  check_error([] { experiment::parse_hostfile("a:1 slots=2\n", "h"); }, "holds ':', ',' or '@'");
  check_error([] { experiment::parse_hostfile("# nothing\n\n", "h"); },
              "h: the hostfile names no host");
}

TEST_CASE("--include and --exclude filter as DeepSpeed's parse_resource_filter") {
  using experiment::filter_resources;
  // DeepSpeed's docstring examples and its tests' cases, worked by hand.
  CHECK(same(filter_resources(pool(), "worker-0@worker-1:0,1", ""),
             {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {0, 1}}}));
  CHECK(same(filter_resources(pool(), "worker-2:2,0@worker-0:1", ""),
             {{"worker-0", {1}}, {"worker-2", {0, 2}}}));  // hostfile order, sorted slots
  CHECK(same(filter_resources(pool(), "", "worker-1:0"),
             {{"worker-0", {0, 1, 2, 3}}, {"worker-1", {1}}, {"worker-2", {0, 1, 2}}}));
  CHECK(same(filter_resources(pool(), "", "worker-0@worker-2:1"),
             {{"worker-1", {0, 1}}, {"worker-2", {0, 2}}}));
  CHECK(same(filter_resources(pool(), "", "worker-1:0,1"),  // a host left with nothing goes
             {{"worker-0", {0, 1, 2, 3}}, {"worker-2", {0, 1, 2}}}));
  CHECK(same(filter_resources(pool(), "worker-1:1,1", ""), {{"worker-1", {1}}}));
  check_error([] { filter_resources(pool(), "worker-9", ""); },
              "--include: host 'worker-9' is not in the hostfile");
  check_error([] { filter_resources(pool(), "worker-1:2", ""); },
              "host 'worker-1' has no slot 2 (the hostfile gives it 2)");
  check_error([] { filter_resources(pool(), "worker-1:x", ""); }, "slot 'x' of host 'worker-1'");
  check_error([] { filter_resources(pool(), "worker-1", "worker-0"); }, "cannot be used together");
  check_error([] { filter_resources(pool(), "", "worker-0@worker-1@worker-2"); },
              "--exclude leaves no slot to run on");
}

TEST_CASE("launch commands: one mpirun app context per host, or srun over equal hosts") {
  experiment::LaunchOptions o;
  o.launcher = "openmpi";
  o.program = {"/bin/tessera", "train", "c.json"};
  const ResourcePool two = {{"a", {0, 1}}, {"b", {1}}};
  using V = std::vector<std::string>;
  CHECK(experiment::launch_command(o, two, false) == V{"mpirun",
                                                       "-x",
                                                       "MASTER_ADDR=a",
                                                       "-x",
                                                       "MASTER_PORT=29500",
                                                       "-np",
                                                       "2",
                                                       "-H",
                                                       "a:2",
                                                       "/bin/tessera",
                                                       "train",
                                                       "c.json",
                                                       ":",
                                                       "-np",
                                                       "1",
                                                       "-H",
                                                       "b:1",
                                                       "/bin/tessera",
                                                       "train",
                                                       "c.json"});
  o.master_addr = "10.0.0.1", o.master_port = 1234;
  CHECK(experiment::launch_command(o, {{"a", {0, 2}}}, true) ==
        V{"mpirun", "-x", "MASTER_ADDR=10.0.0.1", "-x", "MASTER_PORT=1234", "-np", "2", "-H", "a:2",
          "-x", "CUDA_VISIBLE_DEVICES=0,2", "/bin/tessera", "train", "c.json"});
  o.launcher = "slurm";
  CHECK(experiment::launch_command(o, {{"a", {0, 1}}, {"b", {0, 1}}}, false) ==
        V{"srun", "--mpi=pmix", "--nodelist=a,b", "--nodes=2", "--ntasks=4", "--ntasks-per-node=2",
          "--kill-on-bad-exit=1", "--export=ALL,MASTER_ADDR=10.0.0.1,MASTER_PORT=1234",
          "/bin/tessera", "train", "c.json"});
  check_error([&] { experiment::launch_command(o, two, false); },
              "under Slurm every host runs the same slots");
  o.launcher = "pdsh";
  check_error([&] { experiment::launch_command(o, two, false); }, "--launcher 'pdsh'");
  o.launcher = "openmpi", o.master_port = 70000;
  check_error([&] { experiment::launch_command(o, two, false); }, "--master_port 70000");
  o.master_port = 1, o.program.clear();
  check_error([&] { experiment::launch_command(o, two, false); }, "no program to run");
}
