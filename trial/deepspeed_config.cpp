// Determined's merge of a DeepSpeed config with hyperparameters (determined/pytorch/deepspeed:
// merge_dicts), and the JSON reading with DeepSpeed's duplicate-key check.
#include "tessera/trial/deepspeed_config.h"

#include <vector>

#include "tessera/error.h"
#include "tessera/io/files.h"

namespace tessera::trial {

namespace {
void merge(nlohmann::json& base, const nlohmann::json& source, const std::string& path) {
  for (const auto& [key, value] : source.items()) {
    const std::string here = path.empty() ? key : path + "." + key;
    if (value.is_object() && base.contains(key)) {
      TS_CHECK(base[key].is_object(), "overwrite_deepspeed_config: '", here,
               "' is an object in the overrides but ", base[key].dump(), " in the base config");
      merge(base[key], value, here);
    } else {
      base[key] = value;
    }
  }
}
}  // namespace

nlohmann::json overwrite_deepspeed_config(nlohmann::json base, const nlohmann::json& source) {
  TS_CHECK(base.is_object(), "overwrite_deepspeed_config: the base config must be an object");
  TS_CHECK(source.is_object(), "overwrite_deepspeed_config: the overrides must be an object");
  merge(base, source, "");
  return base;
}

nlohmann::json overwrite_deepspeed_config(const std::string& base_path,
                                          const nlohmann::json& source) {
  const std::string text = io::read_text_file(base_path);
  // One set of keys per open object: a key seen twice in one object is refused.
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto check = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) open.emplace_back();
    if (event == E::object_end) open.pop_back();
    if (event == E::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json base;
  try {
    base = nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::parse_error& e) {
    fail(base_path, ": not valid JSON at byte ", e.byte, ": ", e.what());
  }
  TS_CHECK(duplicate.empty(), base_path, ": key '", duplicate,
           "' appears twice in one object (DeepSpeed refuses duplicate keys)");
  return overwrite_deepspeed_config(std::move(base), source);
}

nlohmann::json overrides_from_hparams(const std::map<std::string, nlohmann::json>& hparams,
                                      const std::set<std::string>& skip) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, value] : hparams) {
    if (skip.count(name)) continue;
    nlohmann::json* node = &out;
    size_t start = 0;
    for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1) {
      const std::string part = name.substr(start, dot - start);
      TS_CHECK(!part.empty(), "hyperparameter '", name, "': an empty part in a dotted key");
      nlohmann::json& next = (*node)[part];
      TS_CHECK(next.is_null() || next.is_object(), "hyperparameter '", name, "': '",
               name.substr(0, dot), "' is also given a value of its own");
      node = &next;
    }
    const std::string last = name.substr(start);
    TS_CHECK(!last.empty() && !(*node).contains(last), "hyperparameter '", name,
             "': an empty or repeated key");
    (*node)[last] = value;
  }
  return out;
}

}  // namespace tessera::trial
