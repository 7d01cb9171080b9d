// Config sections owned by the subsystems that use them. A higher layer (parallel's ZeRO, ...)
// declares its section's struct and parser beside its code and registers it once; io's config
// reader parses every registered section with the rest of the file (errors name the key and the
// file, unknown keys are reported as for io's own sections), and the code reads it back with
// `config.section<T>()`. io never includes the owner: the owner registers itself.
//
//   struct MyConfig { int64_t width = 4; static void parse(io::config::Section& s, MyConfig& c); };
//   const io::RegisterConfigSection<MyConfig> kMySection{"my_section"};
//   ... io::TrainConfig::parse(text).section<MyConfig>().width
#pragma once
#include <any>
#include <functional>
#include <string>
#include <typeindex>
#include <vector>

#include "tessera/io/config_section.h"

namespace tessera::io {

struct TrainConfig;

struct ConfigSectionEntry {
  std::string key;  // the config's top-level key ("zero_optimization")
  std::type_index type;
  std::function<std::any()> make_default;  // the section's defaults (a T)
  std::function<void(config::Section&, std::any&)> parse;
  // Rules that span sections, run after the whole file is read; may be empty.
  std::function<void(TrainConfig&)> check;
  // For a section that splits each model replica over ranks (tensor_parallel, pipeline): the
  // key stating how many ranks one replica takes, and that count. The reader divides the job's
  // ranks by every such section's count before it reads the batch triple. May be empty.
  std::function<std::pair<std::string, int64_t>(const std::any&)> replica_ranks;
};

// A key or a type registered twice is an error.
void register_config_section(ConfigSectionEntry entry);
std::vector<ConfigSectionEntry> registered_config_sections();  // in registration order

// A rule over io's own sections that a higher layer knows (parallel checks pipeline.schedule
// against its registry), run after the whole file is read, as a section's check is. `name`
// (the key it checks) must be new.
void register_config_check(std::string name, std::function<void(TrainConfig&)> check);
struct RegisterConfigCheck {
  RegisterConfigCheck(std::string name, std::function<void(TrainConfig&)> check) {
    register_config_check(std::move(name), std::move(check));
  }
};

// What a value of `key` must be, for the config reference (TrainConfig::describe_keys), where a
// higher layer decides it: pipeline.schedule's and model.type's registered names. `expected` is
// asked when the reference is made, so it lists what is registered by then.
void register_config_key_expectation(std::string key, std::function<std::string()> expected);
std::string registered_config_key_expectation(const std::string& key);  // "" when none

struct DescribeConfigKey {
  DescribeConfigKey(std::string key, std::function<std::string()> expected) {
    register_config_key_expectation(std::move(key), std::move(expected));
  }
};

// The monitor sections (DeepSpeed's csv_monitor and tensorboard, and any a program adds): the
// engine's monitor registry publishes each monitor's key here, and the reader parses each as a
// TrainConfig::Monitor (enabled, output_path, job_name) into config.monitors. A key registered
// twice is an error. `doc`: what the monitor writes (the config reference's line for its key).
void register_monitor_section(const std::string& key, const std::string& doc = "");
std::vector<std::string> registered_monitor_sections();  // in registration order
std::string monitor_section_doc(const std::string& key);

// One line registers T (default-constructible, copyable, with a static
// `void parse(io::config::Section&, T&)`, and `std::pair<std::string, int64_t>
// replica_ranks() const` if it splits a model replica over ranks) under `key`.
template <class T>
struct RegisterConfigSection {
  explicit RegisterConfigSection(std::string key, std::function<void(TrainConfig&)> check = {}) {
    ConfigSectionEntry entry{
        std::move(key),
        typeid(T),
        [] { return std::any(T{}); },
        [](config::Section& s, std::any& value) { T::parse(s, std::any_cast<T&>(value)); },
        std::move(check),
        {}};
    if constexpr (requires(const T& t) { t.replica_ranks(); })
      entry.replica_ranks = [](const std::any& v) {
        return std::any_cast<const T&>(v).replica_ranks();
      };
    register_config_section(std::move(entry));
  }
};

}  // namespace tessera::io
