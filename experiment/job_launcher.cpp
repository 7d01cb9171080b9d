#include "tessera/experiment/job_launcher.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "tessera/error.h"

namespace tessera::experiment {

namespace {

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// A count of at most 6 digits (anything longer is no slot count or index anyone means).
bool small_count(const std::string& s, int& out) {
  if (s.empty() || s.size() > 6 || !std::all_of(s.begin(), s.end(), ::isdigit)) return false;
  out = std::stoi(s);
  return true;
}

// DeepSpeed's parse_node_config_list: host -> its slots (sorted, without repeats).
std::vector<std::pair<std::string, std::vector<int>>> node_specs(const std::string& text,
                                                                 const char* flag) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  std::stringstream nodes(text);
  std::string node;
  while (std::getline(nodes, node, '@')) {
    const size_t colon = node.find(':');
    const std::string host = node.substr(0, colon);
    TS_CHECK(!host.empty(), "launch: --", flag, " \"", text,
             "\": expected HOST[:SLOT,...] specs joined by '@', found an empty host");
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == host; });
    if (it == out.end()) it = out.insert(out.end(), {host, {}});
    if (colon == std::string::npos) continue;
    std::stringstream slots(node.substr(colon + 1));
    std::string slot;
    while (std::getline(slots, slot, ',')) {
      int s = 0;
      TS_CHECK(small_count(trimmed(slot), s), "launch: --", flag, " \"", text, "\": slot '", slot,
               "' of host '", host, "' is not a slot index");
      it->second.push_back(s);
    }
    TS_CHECK(!it->second.empty(), "launch: --", flag, " \"", text, "\": host '", host,
             "' has ':' but no slot after it");
  }
  for (auto& [host, slots] : out) {
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  }
  return out;
}

const HostSlots& host_of(const ResourcePool& pool, const std::string& host, const char* flag) {
  for (const HostSlots& h : pool)
    if (h.host == host) return h;
  fail("launch: --", flag, ": host '", host, "' is not in the hostfile");
}

}  // namespace

ResourcePool parse_hostfile(const std::string& text, const std::string& source) {
  ResourcePool pool;
  std::stringstream in(text);
  std::string raw;
  for (int line_no = 1; std::getline(in, raw); ++line_no) {
    const std::string line = trimmed(raw);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = source + ":" + std::to_string(line_no);
    std::stringstream words(line);
    std::string host, slots_word;
    words >> host >> slots_word;
    int slots = 0;
    TS_CHECK(slots_word.rfind("slots=", 0) == 0 && small_count(slots_word.substr(6), slots), where,
             ": expected \"HOSTNAME slots=N\" (DeepSpeed's hostfile format), found \"", line, "\"");
    TS_CHECK(slots >= 1, where, ": host '", host, "' has slots=", slots,
             ": a host needs at least one slot");
    TS_CHECK(host.find_first_of(":,@") == std::string::npos, where, ": host name '", host,
             "' holds ':', ',' or '@', which separate hosts and slots in --include/--exclude "
             "and mpirun's host list");
    for (const HostSlots& h : pool)
      TS_CHECK(h.host != host, where, ": host '", host,
               "' appears twice (DeepSpeed's launcher refuses this too)");
    HostSlots h{host, {}};
    for (int s = 0; s < slots; ++s) h.slots.push_back(s);
    pool.push_back(std::move(h));
  }
  TS_CHECK(!pool.empty(), source,
           ": the hostfile names no host (expected lines \"HOSTNAME slots=N\")");
  return pool;
}

ResourcePool read_hostfile(const std::string& path) {
  std::ifstream in(path);
  TS_CHECK(in, "launch: cannot read the hostfile '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path);
}

ResourcePool filter_resources(const ResourcePool& pool, const std::string& include,
                              const std::string& exclude) {
  TS_CHECK(include.empty() || exclude.empty(),
           "launch: --include and --exclude cannot be used together (as in DeepSpeed)");
  if (include.empty() && exclude.empty()) return pool;
  const bool including = !include.empty();
  const char* flag = including ? "include" : "exclude";
  std::map<std::string, std::vector<int>> chosen;
  if (!including)
    for (const HostSlots& h : pool) chosen[h.host] = h.slots;
  for (const auto& [host, slots] : node_specs(including ? include : exclude, flag)) {
    const HostSlots& h = host_of(pool, host, flag);
    for (int s : slots)
      TS_CHECK(std::find(h.slots.begin(), h.slots.end(), s) != h.slots.end(), "launch: --", flag,
               ": host '", host, "' has no slot ", s, " (the hostfile gives it ", h.slots.size(),
               ")");
    if (including) {
      chosen[host] = slots.empty() ? h.slots : slots;
    } else if (slots.empty()) {
      chosen[host].clear();
    } else {
      auto& left = chosen[host];
      for (int s : slots) left.erase(std::remove(left.begin(), left.end(), s), left.end());
    }
  }
  ResourcePool out;  // (hostfile order: ranks go to hosts in it)
  for (const HostSlots& h : pool)
    if (auto it = chosen.find(h.host); it != chosen.end() && !it->second.empty())
      out.push_back({h.host, it->second});
  TS_CHECK(!out.empty(), "launch: --", flag, " leaves no slot to run on");
  return out;
}

ResourcePool launch_resources(const LaunchOptions& o) {
  const ResourcePool pool = read_hostfile(o.hostfile);
  const bool counts = o.num_nodes >= 0 || o.num_gpus >= 0;
  TS_CHECK(!counts || (o.include.empty() && o.exclude.empty()),
           "launch: --num_nodes and --num_gpus cannot be combined with --include/--exclude (as in "
           "DeepSpeed)");
  ResourcePool out = filter_resources(pool, o.include, o.exclude);
  if (o.num_nodes >= 0) {
    TS_CHECK(o.num_nodes >= 1 && o.num_nodes <= static_cast<int>(out.size()),
             "launch: --num_nodes ", o.num_nodes, ": the hostfile ", o.hostfile, " has ",
             out.size(), " hosts");
    out.resize(static_cast<size_t>(o.num_nodes));
  }
  if (o.num_gpus >= 0) {
    TS_CHECK(o.num_gpus >= 1, "launch: --num_gpus ", o.num_gpus, ": expected at least 1");
    for (HostSlots& h : out) {
      TS_CHECK(o.num_gpus <= static_cast<int>(h.slots.size()), "launch: --num_gpus ", o.num_gpus,
               ": host '", h.host, "' has ", h.slots.size(), " slots in ", o.hostfile);
      h.slots.resize(static_cast<size_t>(o.num_gpus));
    }
  }
  return out;
}

namespace {

std::string joined(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::vector<std::string> srun_command(const LaunchOptions& o, const ResourcePool& pool,
                                      bool pin_devices, const std::string& master) {
  const size_t per_host = pool.front().slots.size();
  std::string hosts;
  for (const HostSlots& h : pool) {
    TS_CHECK(h.slots == pool.front().slots || (!pin_devices && h.slots.size() == per_host),
             "launch: under Slurm every host runs the same slots (srun --ntasks-per-node); host '",
             h.host, "' has ", joined(h.slots), ", host '", pool.front().host, "' ",
             joined(pool.front().slots), ". Use --launcher openmpi for uneven hosts");
    hosts += (hosts.empty() ? "" : ",") + h.host;
  }
  std::string exports =
      "--export=ALL,MASTER_ADDR=" + master + ",MASTER_PORT=" + std::to_string(o.master_port);
  if (pin_devices) exports += ",CUDA_VISIBLE_DEVICES=" + joined(pool.front().slots);
  std::vector<std::string> argv = {"srun",
                                   "--mpi=pmix",
                                   "--nodelist=" + hosts,
                                   "--nodes=" + std::to_string(pool.size()),
                                   "--ntasks=" + std::to_string(per_host * pool.size()),
                                   "--ntasks-per-node=" + std::to_string(per_host),
                                   "--kill-on-bad-exit=1",
                                   exports};
  argv.insert(argv.end(), o.program.begin(), o.program.end());
  return argv;
}

}  // namespace

std::vector<std::string> launch_command(const LaunchOptions& o, const ResourcePool& pool,
                                        bool pin_devices) {
  TS_CHECK(!o.program.empty(),
           "launch: no program to run: give it after --, e.g. "
           "`tessera launch --hostfile H -- tessera train config.json`");
  TS_CHECK(!pool.empty(), "launch: no host to run on");
  TS_CHECK(o.master_port >= 1 && o.master_port <= 65535, "launch: --master_port ", o.master_port,
           " is not a TCP port (1-65535)");
  const std::string master = o.master_addr.empty() ? pool.front().host : o.master_addr;
  TS_CHECK(o.launcher == "openmpi" || o.launcher == "slurm", "launch: --launcher '", o.launcher,
           "': Tessera runs jobs through \"openmpi\" (mpirun) or \"slurm\" (srun)");
  if (o.launcher == "slurm") return srun_command(o, pool, pin_devices, master);
  // One app context per host: its rank count, and with a slot filter its slots' devices.
  std::vector<std::string> argv = {"mpirun", "-x", "MASTER_ADDR=" + master, "-x",
                                   "MASTER_PORT=" + std::to_string(o.master_port)};
  for (size_t i = 0; i < pool.size(); ++i) {
    const HostSlots& h = pool[i];
    const std::string n = std::to_string(h.slots.size());
    if (i > 0) argv.push_back(":");
    argv.insert(argv.end(), {"-np", n, "-H", h.host + ":" + n});
    if (pin_devices) argv.insert(argv.end(), {"-x", "CUDA_VISIBLE_DEVICES=" + joined(h.slots)});
    argv.insert(argv.end(), o.program.begin(), o.program.end());
  }
  return argv;
}

}  // namespace tessera::experiment
