#include "tessera/engine/data_efficiency_config.h"

#include <algorithm>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::engine {

namespace {

// data_sampling: DeepSpeed's data-efficiency sampler, not built; on, it is refused.
void parse_data_sampling(io::config::Section& s) {
  s.notes({{"",
            "DeepSpeed's data-efficiency sampler (metric-based curriculum, dynamic "
            "batching): not built in Tessera; enabling it is an error"},
           {"enabled", "the sampler (not built: true is an error)"},
           {"num_epochs", "the sampler's epochs (with the sampler only)"},
           {"num_workers", "the sampler's loader workers (with the sampler only)"},
           {"pin_memory", "the sampler's pinned batches (with the sampler only)"},
           {"curriculum_learning", "the sampler's curriculum by a metric (not built)"},
           {"dynamic_batching", "the sampler's token-budget batches (not built)"}});
  bool on = false, pin = false;
  int64_t epochs = 1000, workers = 0;
  s.get("enabled", on);
  s.get("num_epochs", epochs);
  s.get("num_workers", workers);
  s.get("pin_memory", pin);
  TS_CHECK(!on, s.source(), ": '", s.key("enabled"),
           "' is true: DeepSpeed's data-efficiency sampler (curriculum by a metric, dynamic "
           "batching) is not built in Tessera yet; for sequence-length curriculum use the "
           "'curriculum_learning' section");
  for (const char* part : {"curriculum_learning", "dynamic_batching"}) {
    io::config::Section p = s.sub(part);
    bool part_on = false;
    p.get("enabled", part_on);
    p.note("enabled", "not built: true is an error");
    TS_CHECK(!part_on, s.source(), ": '", p.key("enabled"), "' is true: ", part,
             " of DeepSpeed's data-efficiency sampler is not built in Tessera yet");
  }
}

void parse_schedule(io::config::Section& s, nn::RandomLtdOptions& o, bool on) {
  s.notes({{"", "the kept tokens per sample over training (DeepSpeed's fixed_linear)"},
           {"min_value", "tokens kept at step 0"},
           {"max_value", "tokens kept once the schedule ends"},
           {"schedule_type", "\"fixed_linear\" (DeepSpeed's only type)"}});
  std::string type = "fixed_linear";
  s.get_min<int64_t>("min_value", o.min_value, 1, "a positive integer");
  s.get_min<int64_t>("max_value", o.max_value, 1, "a positive integer");
  s.get("schedule_type", type);
  s.note("schedule_config", "require_steps and seq_per_step");
  io::config::Section c = s.sub("schedule_config");
  c.notes({{"require_steps", "steps from min_value to max_value"},
           {"seq_per_step", "each kept count is a multiple of it"}});
  c.get_min<int64_t>("require_steps", o.require_steps, 1, "a positive integer");
  c.get_min<int64_t>("seq_per_step", o.seq_per_step, 1, "a positive integer");
  if (!on) return;
  s.expect("schedule_type", type == "fixed_linear", type, "\"fixed_linear\"");
  for (const char* k : {"min_value", "max_value", "schedule_type"})
    TS_CHECK(s.has(k), s.source(), ": '", s.key(k), "' is required with random_ltd");
  for (const char* k : {"require_steps", "seq_per_step"})
    TS_CHECK(c.has(k), s.source(), ": '", c.key(k), "' is required with random_ltd");
  s.expect("max_value", o.max_value >= o.min_value, o.max_value,
           "at least min_value (" + std::to_string(o.min_value) + ")");
  const int64_t first = o.min_value - o.min_value % o.seq_per_step;
  TS_CHECK(first >= 1, s.source(), ": '", c.key("seq_per_step"), "' is ", o.seq_per_step,
           ": step 0's kept count, min_value ", o.min_value,
           " rounded down to a multiple of it, is 0 tokens");
}

void parse_random_ltd(io::config::Section& s, DataEfficiencyConfig& out) {
  s.notes({{"", "DeepSpeed's random layer-wise token dropping (docs/training.md)"},
           {"enabled", "chosen layers see a random subset of the tokens in training"},
           {"total_layer_num", "the model's layers (checked against model.n_layer)"},
           {"random_ltd_layer_num", "how many layers drop tokens (the list's length)"},
           {"random_ltd_layer_id", "the layers (0-based) that drop tokens"},
           {"model_mask_name",
            "DeepSpeed's name of the model's mask argument; the built-in models pass their own"},
           {"model_type", "\"decoder\" (GPT-2) or \"encoder\" (BERT)"},
           {"hidden_state_order", "\"batch_seq_dim\" (the built-in models' layout)"},
           {"random_ltd_schedule", "how many tokens the layers keep over training"},
           {"layer_token_lr_schedule", "DeepSpeed's unfinished lr schedule by layer tokens"}});
  s.get("enabled", out.random_ltd);
  int64_t count = 0;
  std::string mask_name, order = "batch_seq_dim";
  s.get_min<int64_t>("total_layer_num", out.total_layer_num, 1, "a positive integer");
  s.get_min<int64_t>("random_ltd_layer_num", count, 1, "a positive integer");
  nn::RandomLtdOptions& o = out.random_ltd_options;
  o.layer_ids =
      s.non_negative_integers("random_ltd_layer_id", 1, "a non-empty list of layer indices");
  s.get("model_mask_name", mask_name);
  s.get("model_type", out.model_type);
  s.get("hidden_state_order", order);
  io::config::Section schedule = s.sub("random_ltd_schedule");
  parse_schedule(schedule, o, out.random_ltd);
  io::config::Section lr = s.sub("layer_token_lr_schedule");
  bool lr_on = false;
  lr.get("enabled", lr_on);
  lr.note("enabled", "DeepSpeed's unfinished layer-token lr schedule: true is an error there too");
  if (!out.random_ltd) return;
  TS_CHECK(!lr_on, s.source(), ": '", lr.key("enabled"),
           "' is true: DeepSpeed's layer-token lr schedule is unfinished (it raises "
           "NotImplementedError) and Tessera has none either");
  for (const char* k :
       {"total_layer_num", "random_ltd_layer_num", "random_ltd_layer_id", "model_type"})
    TS_CHECK(s.has(k), s.source(), ": '", s.key(k), "' is required with random_ltd");
  s.expect("model_type", out.model_type == "decoder" || out.model_type == "encoder", out.model_type,
           "\"decoder\" or \"encoder\"");
  s.expect("hidden_state_order", order == "batch_seq_dim", order,
           "\"batch_seq_dim\" (the built-in models' hidden states are [batch, sequence, C])");
  s.expect("random_ltd_layer_num", count == static_cast<int64_t>(o.layer_ids.size()), count,
           "the length of random_ltd_layer_id (" + std::to_string(o.layer_ids.size()) + ")");
  std::vector<int64_t> seen;
  for (int64_t id : o.layer_ids) {
    TS_CHECK(id < out.total_layer_num, s.source(), ": '", s.key("random_ltd_layer_id"),
             "' names layer ", id, ", but total_layer_num is ", out.total_layer_num);
    TS_CHECK(std::find(seen.begin(), seen.end(), id) == seen.end(), s.source(), ": '",
             s.key("random_ltd_layer_id"), "' names layer ", id, " twice");
    seen.push_back(id);
  }
}

}  // namespace

void DataEfficiencyConfig::parse(io::config::Section& s, DataEfficiencyConfig& out) {
  s.notes({{"",
            "DeepSpeed's data efficiency library: random-LTD (data_routing); its data "
            "sampler is not built"},
           {"enabled", "DeepSpeed's switch of the library (random-LTD reads its own)"},
           {"seed", "the random-LTD draws' seed"},
           {"data_sampling", "DeepSpeed's data-efficiency sampler (not built)"},
           {"data_routing", "DeepSpeed's data routing: random-LTD"}});
  s.get("enabled", out.enabled);
  s.get_min<int64_t>("seed", out.seed, 0, "an integer >= 0");
  io::config::Section sampling = s.sub("data_sampling");
  parse_data_sampling(sampling);
  io::config::Section routing = s.sub("data_routing");
  bool routing_on = false;
  routing.get("enabled", routing_on);
  routing.note("enabled", "DeepSpeed's switch of data routing (random-LTD reads its own)");
  io::config::Section random_ltd = routing.sub("random_ltd");
  parse_random_ltd(random_ltd, out);
}

const DataEfficiencyConfig& data_efficiency_config(const io::TrainConfig& cfg) {
  return cfg.section<DataEfficiencyConfig>();
}

namespace {

// The layouts a token subset fits: whole sequences on every rank, shapes free to change.
void check_data_efficiency(io::TrainConfig& cfg) {
  const DataEfficiencyConfig& d = data_efficiency_config(cfg);
  if (!d.random_ltd) return;
  const std::string key = "data_efficiency.data_routing.random_ltd";
  parallel::refuse_pipeline_stages(cfg, key, "a pipeline's stages exchange fixed shapes");
  TS_CHECK(!parallel::tensor_parallel_config(cfg).sequence_parallel, cfg.source, ": '", key,
           "' needs whole sequences on each rank (tensor_parallel.sequence_parallel splits them)");
  TS_CHECK(d.total_layer_num == cfg.model.n_layer, cfg.source,
           ": 'data_efficiency.data_routing.random_ltd.total_layer_num' is ", d.total_layer_num,
           ", but the model has ", cfg.model.n_layer, " layers (model.n_layer)");
  const std::string want = cfg.model.type == "bert" ? "encoder" : "decoder";
  const bool built_in = cfg.model.type == "gpt2" || cfg.model.type == "bert";
  TS_CHECK(!built_in || d.model_type == want, cfg.source,
           ": 'data_efficiency.data_routing.random_ltd.model_type' is \"", d.model_type,
           "\", but model.type ", cfg.model.type, " is ",
           want == "encoder" ? "an encoder" : "a decoder");
}

const io::RegisterConfigSection<DataEfficiencyConfig> kDataEfficiencySection{"data_efficiency",
                                                                             check_data_efficiency};

}  // namespace

}  // namespace tessera::engine
