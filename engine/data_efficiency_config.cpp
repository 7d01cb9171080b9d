#include "tessera/engine/data_efficiency_config.h"

#include <algorithm>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::engine {

namespace {

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
  s.notes(
      {{"",
        "DeepSpeed's data efficiency library: the curriculum sampler (data_sampling) and "
        "random-LTD (data_routing)"},
       {"enabled", "DeepSpeed's switch of the library (the sampler and random-LTD read their own)"},
       {"seed", "the sampler's and random-LTD's draws' seed"},
       {"data_sampling", "DeepSpeed's data-efficiency sampler: curriculum by a metric"},
       {"data_routing", "DeepSpeed's data routing: random-LTD"}});
  s.get("enabled", out.enabled);
  s.get_min<int64_t>("seed", out.seed, 0, "an integer >= 0");
  io::config::Section sampling = s.sub("data_sampling");
  DataSamplingConfig::parse(sampling, out.data_sampling);
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
void check_data_sampling(io::TrainConfig& cfg) {
  const DataSamplingConfig& d = data_efficiency_config(cfg).data_sampling;
  if (!d.curriculum) return;
  const std::string key = "data_efficiency.data_sampling.curriculum_learning";
  const bool bert = cfg.model.type == "bert";
  TS_CHECK(!bert || !d.clusters(), cfg.source, ": '", key,
           "' clusters samples by a metric, but BERT's batches are random sentence spans, "
           "not indexed samples; BERT takes the seqlen_truncate metric alone");
  const CurriculumMetricConfig* seq = d.sequence_metric();
  if (!seq) return;
  TS_CHECK(!curriculum_learning_config(cfg).enabled, cfg.source, ": '", key, ".curriculum_metrics.",
           seq->name,
           "' and the legacy 'curriculum_learning' section both set the sequence length; keep "
           "one");
  TS_CHECK(!bert || seq->name == "seqlen_truncate", cfg.source, ": '", key,
           ".curriculum_metrics.seqlen_reshape' needs a causal LM's windows (BERT's masks and "
           "sentence labels do not fold into shorter rows); use seqlen_truncate");
  parallel::refuse_pipeline_stages(cfg, key + ".curriculum_metrics." + seq->name,
                                   "a pipeline's stages exchange fixed shapes");
  TS_CHECK(seq->schedule.max_difficulty <= cfg.model.block_size, cfg.source, ": '", key,
           ".curriculum_metrics.", seq->name, ".max_difficulty' is ", seq->schedule.max_difficulty,
           ", longer than model.block_size (", cfg.model.block_size, ")");
}

void check_data_efficiency(io::TrainConfig& cfg) {
  check_data_sampling(cfg);
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
