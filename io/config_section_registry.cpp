#include "tessera/io/config_section_registry.h"

#include <map>
#include <mutex>

#include "tessera/io/train_config.h"

namespace tessera::io {

namespace {

struct SectionRegistry {
  std::mutex mutex;
  std::vector<ConfigSectionEntry> entries;
  std::vector<std::pair<std::string, std::function<void(TrainConfig&)>>> checks;
  std::vector<std::string> monitors;
  std::map<std::string, std::string> monitor_docs;
  std::map<std::string, std::function<std::string()>> expectations;
};

// Made on first use: owners register from their files' static initialisers.
SectionRegistry& section_registry() {
  static SectionRegistry r;
  return r;
}

}  // namespace

void register_config_section(ConfigSectionEntry entry) {
  TS_CHECK(!entry.key.empty() && entry.make_default && entry.parse,
           "io::register_config_section: an entry needs a key, defaults and a parser");
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  for (const ConfigSectionEntry& e : r.entries)
    TS_CHECK(e.key != entry.key && e.type != entry.type, "io::register_config_section: '",
             entry.key, "' (or its type) is registered twice");
  r.entries.push_back(std::move(entry));
}

void register_config_check(std::string name, std::function<void(TrainConfig&)> check) {
  TS_CHECK(!name.empty() && check, "io::register_config_check: a check needs a name and a body");
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  for (const auto& c : r.checks)
    TS_CHECK(c.first != name, "io::register_config_check: '", name, "' is registered twice");
  r.checks.emplace_back(std::move(name), std::move(check));
}

void register_config_key_expectation(std::string key, std::function<std::string()> expected) {
  TS_CHECK(!key.empty() && expected,
           "io::register_config_key_expectation: an entry needs a key and a description");
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  TS_CHECK(!r.expectations.count(key), "io::register_config_key_expectation: '", key,
           "' is registered twice");
  r.expectations[key] = std::move(expected);
}

std::string registered_config_key_expectation(const std::string& key) {
  std::function<std::string()> expected;
  {
    SectionRegistry& r = section_registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.expectations.find(key);
    if (it == r.expectations.end()) return "";
    expected = it->second;
  }
  return expected();  // (outside the lock: it may read other registries)
}

void register_monitor_section(const std::string& key, const std::string& doc) {
  TS_CHECK(!key.empty(), "io::register_monitor_section: a monitor needs a section key");
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  for (const std::string& m : r.monitors)
    TS_CHECK(m != key, "io::register_monitor_section: '", key, "' is registered twice");
  for (const ConfigSectionEntry& e : r.entries)
    TS_CHECK(e.key != key, "io::register_monitor_section: '", key, "' is a config section already");
  r.monitors.push_back(key);
  r.monitor_docs[key] = doc;
}

std::string monitor_section_doc(const std::string& key) {
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.monitor_docs.find(key);
  return it == r.monitor_docs.end() ? "" : it->second;
}

std::vector<std::string> registered_monitor_sections() {
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  return r.monitors;
}

std::vector<ConfigSectionEntry> registered_config_sections() {
  SectionRegistry& r = section_registry();
  std::lock_guard lock(r.mutex);
  return r.entries;
}

namespace config {

void parse_registered_sections(Section& root, TrainConfig& c) {
  for (const ConfigSectionEntry& e : registered_config_sections()) {
    std::any value = e.make_default();
    if (root.has(e.key)) {
      Section s = root.sub(e.key);
      e.parse(s, value);
      s.warn_unknown();
    }
    c.sections[e.type] = std::move(value);
  }
}

int64_t data_parallel_size(const TrainConfig& c, int64_t world) {
  int64_t remaining = world;  // (divided factor by factor: no product to overflow)
  bool divides = true;
  std::string factors;  // "tensor_parallel.autotp_size 4 x pipeline.stages 2": the ones > 1
  for (const ConfigSectionEntry& e : registered_config_sections()) {
    if (!e.replica_ranks) continue;
    const auto [key, ranks] = e.replica_ranks(c.sections.at(e.type));
    if (ranks > 1) factors += (factors.empty() ? "" : " x ") + key + " " + std::to_string(ranks);
    divides = divides && remaining % ranks == 0;
    if (divides) remaining /= ranks;
  }
  TS_CHECK(divides, c.source, ": the job's ", world, " ranks do not divide into ", factors,
           " (ranks = data-parallel size x the ranks of one model replica)");
  return remaining;
}

void check_registered_sections(TrainConfig& c) {
  for (const ConfigSectionEntry& e : registered_config_sections())
    if (e.check) e.check(c);
  std::vector<std::function<void(TrainConfig&)>> checks;
  {
    SectionRegistry& r = section_registry();
    std::lock_guard lock(r.mutex);
    for (const auto& check : r.checks) checks.push_back(check.second);
  }
  for (const auto& check : checks) check(c);
}

}  // namespace config

}  // namespace tessera::io
