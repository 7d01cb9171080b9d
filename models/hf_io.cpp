// Hugging Face model directories in and out.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "hf_weight_files.h"

#include "tessera/grad_mode.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/model_registry.h"

namespace tessera::models {

namespace fs = std::filesystem;

std::unique_ptr<PretrainedModel> model_from_hf_config(const std::string& text,
                                                      const std::string& source,
                                                      const parallel::ParallelContext& ctx) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'", source, "': invalid JSON: ", e.what());
  }
  TS_CHECK(j.is_object() && j.contains("model_type") && j["model_type"].is_string(), "'", source,
           "': no \"model_type\" string (registered: ", registered_model_list("", " or "), ")");
  const std::string type = j["model_type"].get<std::string>();
  TS_CHECK(has_model(type), "'", source, "': model_type '", type, "' is not supported (",
           registered_model_list("", " or "), ")");
  const ModelEntry& entry = find_model(type);
  TS_CHECK(entry.from_config_json, "'", source, "': model_type '", type,
           "' cannot be rebuilt from a config.json (its registry entry has no from_config_json)");
  try {
    return entry.from_config_json(text, source, ctx);
  } catch (const std::exception& e) {
    fail("'", source, "': ", e.what());
  }
}

namespace {

// Copies `files`' tensors into `model` (strict: every parameter present, every key known);
// `what` names the files in the error for a mismatch.
void load_weights(PretrainedModel& model, const HFWeightFiles& files, const std::string& what,
                  std::map<std::string, std::string>* file_key_of);

}  // namespace

std::unique_ptr<PretrainedModel> load_pretrained(const std::string& dir,
                                                 std::map<std::string, std::string>* file_key_of) {
  const fs::path config_path = fs::path(dir) / "config.json";
  TS_CHECK(fs::is_directory(dir), "model directory '", dir, "' does not exist");
  TS_CHECK(fs::exists(config_path), "model directory '", dir, "' has no config.json");
  const HFWeightFiles files = HFWeightFiles::from_directory(dir);
  auto model = model_from_hf_config(io::read_text_file(config_path.string()), config_path.string());
  load_weights(*model, files, "the weights of '" + dir + "'", file_key_of);
  model->eval();
  return model;
}

std::unique_ptr<PretrainedModel> load_pretrained_shard(const std::string& dir,
                                                       const parallel::ParallelContext& ctx) {
  std::unique_ptr<PretrainedModel> whole = load_pretrained(dir);
  if (!ctx.tensor_group()) return whole;
  auto shard = model_from_hf_config(whole->config_json(), dir + "/config.json", ctx);
  shard->load_from_whole(*whole, "'" + dir + "'");
  shard->eval();
  return shard;
}

void load_hf_weights(PretrainedModel& model, const std::string& path,
                     std::map<std::string, std::string>* file_key_of) {
  load_weights(model, HFWeightFiles(path), "'" + path + "'", file_key_of);
}

void load_hf_directory_weights(PretrainedModel& model, const std::string& dir) {
  TS_CHECK(fs::is_directory(dir), "model directory '", dir, "' does not exist");
  load_weights(model, HFWeightFiles::from_directory(dir), "the weights of '" + dir + "'", nullptr);
}

namespace {

void load_weights(PretrainedModel& model, const HFWeightFiles& files, const std::string& what,
                  std::map<std::string, std::string>* file_key_of) {
  const std::string prefix = model.hf_prefix();
  std::set<std::string> used;
  std::map<std::string, Tensor*> slots;
  for (auto& [n, t] : model.named_parameters()) slots[n] = t;
  std::vector<std::string> missing;
  NoGradGuard no_grad;
  for (const HFWeight& w : model.hf_weights()) {
    // The key with or without the base-model prefix; old BERT files say gamma/beta.
    std::vector<std::string> candidates{w.hf};
    if (w.hf.rfind(prefix, 0) == 0) candidates.push_back(w.hf.substr(prefix.size()));
    for (size_t i = 0, n = candidates.size(); i < n; ++i) {
      const std::string c = candidates[i];  // a copy: push_back below may reallocate
      if (c.size() > 17 && c.compare(c.size() - 17, 17, ".LayerNorm.weight") == 0)
        candidates.push_back(c.substr(0, c.size() - 6) + "gamma");
      if (c.size() > 15 && c.compare(c.size() - 15, 15, ".LayerNorm.bias") == 0)
        candidates.push_back(c.substr(0, c.size() - 4) + "beta");
    }
    std::string found;
    for (const std::string& c : candidates)
      if (files.contains(c)) {
        found = c;
        break;
      }
    if (found.empty()) {
      missing.push_back(w.hf);
      continue;
    }
    used.insert(found);
    const io::SafetensorsFile& file = files.file_of(found);
    const std::string& path = file.path();
    Tensor value = file.get(found);
    if (w.transpose) {
      TS_CHECK(value.dim() == 2, "'", path, "': tensor '", found, "' should be 2-D, got ",
               value.describe());
      value = value.t();
    }
    Tensor& slot = *slots.at(w.ours);
    TS_CHECK(value.shape() == slot.shape(), "'", path, "': tensor '", found, "' has shape ",
             shape_str(file.entry(found).shape), " but the model (from config.json) expects ",
             shape_str(w.transpose ? Shape{slot.shape()[1], slot.shape()[0]} : slot.shape()));
    TS_CHECK(is_floating(value.dtype()), "'", path, "': tensor '", found, "' is ",
             file.entry(found).file_dtype, ", expected a floating dtype");
    slot.copy_(value);
    if (file_key_of) (*file_key_of)[w.ours] = found;
  }
  std::vector<std::string> unexpected;
  for (const std::string& n : files.names())
    if (!used.count(n) && !model.hf_ignorable(n)) unexpected.push_back(n);
  if (!missing.empty() || !unexpected.empty()) {
    std::string msg = "the " + model.type_name() + " of config.json does not match " + what + ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      msg += std::string(" ") + what + " (" + std::to_string(keys.size()) + "):";
      for (size_t i = 0; i < keys.size() && i < 10; ++i) msg += " " + keys[i];
      if (keys.size() > 10) msg += " ...";
      msg += ".";
    };
    list("missing", missing);
    list("unexpected", unexpected);
    throw Error(msg);
  }
}

}  // namespace

Tensor PretrainedModel::forward_cached(const Tensor&, KVCache&) {
  fail("a ", type_name(), " has no key/value cache: it does not generate text");
}

void check_token_drop_layout(const std::string& model, bool sparse_attention,
                             bool sequence_parallel) {
  TS_CHECK(!sparse_attention, "data_efficiency.data_routing.random_ltd: ", model,
           " with block-sparse attention (the 'sparse_attention' section) attends over layouts "
           "of the whole sequence, not over token subsets");
  TS_CHECK(!sequence_parallel, "data_efficiency.data_routing.random_ltd: ", model,
           " needs whole sequences on each rank (not tensor_parallel.sequence_parallel)");
}

void PretrainedModel::set_random_layer_token_drop(std::shared_ptr<nn::RandomLayerTokenDrop>) {
  fail("data_efficiency.data_routing.random_ltd: the model ", type_name(),
       " has no layers to drop tokens in (the built-in GPT-2 and BERT do)");
}

void PretrainedModel::set_progressive_layer_drop(std::shared_ptr<nn::ProgressiveLayerDrop>) {
  fail("progressive_layer_drop: the model ", type_name(),
       " has no layers to drop (the built-in GPT-2 and BERT do)");
}

std::map<std::string, Tensor> to_hf_layout(PretrainedModel& model,
                                           const std::map<std::string, Tensor>& ours,
                                           const std::string& source) {
  std::map<std::string, Tensor> out;
  for (const HFWeight& w : model.hf_weights()) {
    auto it = ours.find(w.ours);
    TS_CHECK(it != ours.end(), source, " has no '", w.ours, "'");
    const Tensor t = it->second.detach();
    out[w.hf] = w.transpose ? t.t().contiguous() : t;
  }
  return out;
}

void save_pretrained(PretrainedModel& model, const std::string& dir) {
  fs::create_directories(dir);
  std::map<std::string, Tensor> ours;
  for (auto& [n, t] : model.named_parameters()) ours[n] = *t;
  const std::map<std::string, Tensor> out = to_hf_layout(model, ours, "the model");
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  io::write_file_atomically((fs::path(dir) / "config.json").string(),
                            [&](std::ostream& os) { os << model.config_json() << "\n"; });
}

}  // namespace tessera::models
