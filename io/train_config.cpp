// DeepSpeed's sections of a training config, one parser each, with DeepSpeed's defaults and
// rules (checked against DeepSpeed itself where they decide numbers:
// tests/fixtures/generate_deepspeed_fixtures.py).
#include "tessera/io/train_config.h"

#include <map>
#include <utility>

#include "config_sections.h"
#include "tessera/io/config_section_registry.h"
#include "tessera/io/files.h"

namespace tessera::io {

using config::Section;

namespace config {

void parse_batch(Section& root, TrainConfig& c) {
  const std::string& source = root.source();
  const int64_t world = c.world_size;
  const bool has_tbs = root.has("train_batch_size"),
             has_mb = root.has("train_micro_batch_size_per_gpu"),
             has_ga = root.has("gradient_accumulation_steps");
  root.get_min<int64_t>("train_batch_size", c.train_batch_size, 1, "a positive integer");
  root.get_min<int64_t>("train_micro_batch_size_per_gpu", c.micro_batch_size, 1,
                        "a positive integer");
  root.get_min<int64_t>("gradient_accumulation_steps", c.gradient_accumulation_steps, 1,
                        "a positive integer");
  root.notes(
      {{"train_batch_size",
        "samples per optimizer step = micro-batch x accumulation x data-parallel ranks: any two "
        "of the three give the third (0: derived); DeepSpeed needs this or the micro-batch"},
       {"train_micro_batch_size_per_gpu", "samples per rank per forward (0: derived)"},
       {"gradient_accumulation_steps", "micro-batches per optimizer step (0: derived, else 1)"}});
  if (has_tbs && has_mb && has_ga) {
    TS_CHECK(c.train_batch_size == c.micro_batch_size * c.gradient_accumulation_steps * world,
             source, ": batch sizes disagree: train_batch_size ", c.train_batch_size,
             " != train_micro_batch_size_per_gpu ", c.micro_batch_size,
             " * gradient_accumulation_steps ", c.gradient_accumulation_steps, " * world size ",
             world);
  } else if (has_tbs && has_mb) {
    TS_CHECK(c.train_batch_size % (c.micro_batch_size * world) == 0, source, ": train_batch_size ",
             c.train_batch_size, " is not divisible by train_micro_batch_size_per_gpu ",
             c.micro_batch_size, " * world size ", world);
    c.gradient_accumulation_steps = c.train_batch_size / (c.micro_batch_size * world);
  } else if (has_tbs && has_ga) {
    TS_CHECK(c.train_batch_size % (c.gradient_accumulation_steps * world) == 0, source,
             ": train_batch_size ", c.train_batch_size,
             " is not divisible by gradient_accumulation_steps ", c.gradient_accumulation_steps,
             " * world size ", world);
    c.micro_batch_size = c.train_batch_size / (c.gradient_accumulation_steps * world);
  } else if (has_mb && has_ga) {
    c.train_batch_size = c.micro_batch_size * c.gradient_accumulation_steps * world;
  } else if (has_tbs) {
    TS_CHECK(c.train_batch_size % world == 0, source, ": train_batch_size ", c.train_batch_size,
             " is not divisible by world size ", world);
    c.gradient_accumulation_steps = 1;
    c.micro_batch_size = c.train_batch_size / world;
  } else if (has_mb) {
    c.gradient_accumulation_steps = 1;
    c.train_batch_size = c.micro_batch_size * world;
  } else {
    fail(source,
         ": set train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed needs at least one)");
  }
}

void parse_precision(Section& root, TrainConfig& c) {
  const std::string& source = root.source();
  if (root.has("fp16")) {
    Section f = root.sub("fp16");
    f.notes({{"", "mixed precision in float16 with a loss scale (float32 masters)"},
             {"enabled", "train in float16"},
             {"loss_scale", "a fixed loss scale (0: dynamic, starting at 2^initial_scale_power)"},
             {"initial_scale_power", "the dynamic scale starts at 2^this"},
             {"loss_scale_window", "steps without overflow before the scale doubles"},
             {"hysteresis", "overflows tolerated before the scale halves (ZeRO stages 1-3)"},
             {"consecutive_hysteresis", "refill the hysteresis after each step without overflow"},
             {"min_loss_scale", "the dynamic scale halves no lower"}});
    auto& h = c.fp16;
    f.get("enabled", h.enabled);
    f.get("loss_scale", h.loss_scale);
    f.expect("loss_scale", h.loss_scale >= 0, h.loss_scale, ">= 0 (0 = dynamic)");
    f.get_min<int64_t>("initial_scale_power", h.initial_scale_power, 0, ">= 0");
    f.get_min<int64_t>("loss_scale_window", h.loss_scale_window, 1, ">= 1");
    h.hysteresis_stated = f.has("hysteresis") || f.has("consecutive_hysteresis");
    f.get_min<int64_t>("hysteresis", h.hysteresis, 1, ">= 1");
    f.get("consecutive_hysteresis", h.consecutive_hysteresis);
    f.get("min_loss_scale", h.min_loss_scale);
    f.expect("min_loss_scale", h.min_loss_scale > 0, h.min_loss_scale, "> 0");
    f.ignored<bool>("auto_cast", "the model's parameters decide the compute dtype");
    f.warn_unknown();
  }
  for (const char* name : {"bf16", "bfloat16"}) {
    if (!root.has(name)) continue;
    Section b = root.sub(name);
    b.notes({{"", "mixed precision in bfloat16 (float32 masters, no loss scale)"},
             {"enabled", "train in bfloat16"}});
    if (std::string(name) == "bfloat16") b.note("", "bf16's older name");
    b.get("enabled", c.bf16);
    b.warn_unknown();
  }
  TS_CHECK(!(c.fp16.enabled && c.bf16), source,
           ": 'fp16.enabled' and 'bf16.enabled' cannot both be true");
  parse_torch_autocast(root, c);
  parse_amp(root, c);
}

void parse_communication(Section& root, TrainConfig& c) {
  const std::string& source = root.source();
  root.notes({{"prescale_gradients", "divide gradients before the all-reduce, not after"},
              {"gradient_predivide_factor",
               "gradients are divided by this before the reduction, the rest after"},
              {"communication_data_type", "the dtype gradients are reduced in (\"\": the model's)"},
              {"comms_logger", "a summary of every collective's count, bytes and time"},
              {"comms_logger.enabled", "log collectives"},
              {"comms_logger.verbose", "print each collective as it happens"},
              {"comms_logger.prof_all", "log every op (false: only prof_ops)"},
              {"comms_logger.prof_ops", "the ops to log when prof_all is false"},
              {"distributed", "Tessera's: how ranks wait on each other"},
              {"distributed.timeout_s",
               "a collective or message not done by then ends the job naming the rank and op"}});
  root.get("prescale_gradients", c.prescale_gradients);
  root.get("gradient_predivide_factor", c.gradient_predivide_factor);
  root.expect("gradient_predivide_factor", c.gradient_predivide_factor > 0,
              c.gradient_predivide_factor, "> 0");
  root.get("communication_data_type", c.communication_data_type);
  const std::string& comm = c.communication_data_type;
  root.expect("communication_data_type",
              comm.empty() || comm == "fp32" || comm == "fp16" || comm == "bf16", comm,
              "\"fp32\", \"fp16\" or \"bf16\"");
  if (root.has("comms_logger")) {
    Section m = root.sub("comms_logger");
    m.get("enabled", c.comms_logger.enabled);
    m.get("verbose", c.comms_logger.verbose);
    m.get("prof_all", c.comms_logger.prof_all);
    if (const json& ops = m.raw("prof_ops", "list of strings", "[]"); !ops.is_null()) {
      TS_CHECK(ops.is_array(), source,
               ": 'comms_logger.prof_ops' must be a list of op names, found ", ops.dump());
      for (const auto& op : ops) {
        TS_CHECK(op.is_string(), source, ": 'comms_logger.prof_ops' must hold strings, found ",
                 op.dump());
        c.comms_logger.prof_ops.push_back(op.get<std::string>());
      }
    }
    m.ignored<bool>("debug", "the summary names each op's caller-visible name only");
    m.warn_unknown();
  }
  if (root.has("distributed")) {
    Section d = root.sub("distributed");
    d.get("timeout_s", c.distributed.timeout_s);
    d.expect("timeout_s", c.distributed.timeout_s > 0, c.distributed.timeout_s, "> 0 seconds");
    d.warn_unknown();
  }
}

void parse_monitor(Section& root, const char* key, TrainConfig::Monitor& m) {
  if (root.has(key)) {
    Section s = root.sub(key);
    s.note("", monitor_section_doc(key));
    s.notes({{"enabled", "write this monitor's events (rank 0)"},
             {"output_path", "the directory the job's folder goes under"},
             {"job_name", "the job's folder under output_path"}});
    s.get("enabled", m.enabled);
    s.get("output_path", m.output_path);
    s.get("job_name", m.job_name);
    s.warn_unknown();
  }
  // (An empty output_path is DeepSpeed's default: the job directory under the working one.)
  if (m.output_path.empty()) m.output_path = "./";
}

void parse_monitoring(Section& root, TrainConfig& c) {
  const std::string& source = root.source();
  root.notes(
      {{"steps_per_print", "a progress line (and timer, memory lines) every this many steps"},
       {"wall_clock_breakdown",
        "print the time of forward, backward and step every steps_per_print steps"},
       {"memory_breakdown", "print each rank's memory every steps_per_print steps"},
       {"flops_profiler",
        "DeepSpeed's flops profiler: one step's FLOPs, MACs, parameters, "
        "latency per module"},
       {"flops_profiler.enabled", "profile one step"},
       {"flops_profiler.recompute_fwd_factor",
        "forwards rerun by activation checkpointing, as a "
        "share of one, added to the FLOPs"},
       {"flops_profiler.profile_step", "the global step profiled"},
       {"flops_profiler.module_depth", "the depth of the per-module table"},
       {"flops_profiler.top_modules", "modules listed per depth in the summary"},
       {"flops_profiler.output_file", "the report's file (null: standard output)"},
       {"flops_profiler.detailed", "the per-module tree as well as the summary"},
       {"trace", "Tessera's: a Chrome/Perfetto timeline of steps, phases and collectives"},
       {"trace.enabled", "record a trace"},
       {"trace.output_path", "the directory of the trace files (one per rank)"},
       {"trace.kernels", "each op's kernel as an event as well (slower)"},
       {"trace.steps", "the global steps traced, inclusive"},
       {"checkpoint", "DeepSpeed's checkpoint options"},
       {"checkpoint.tag_validation",
        "no effect in Tessera: every rank writes the tag rank 0 chose"}});
  root.get_min<int64_t>("steps_per_print", c.steps_per_print, 1, ">= 1");
  root.get("wall_clock_breakdown", c.wall_clock_breakdown);
  root.get("memory_breakdown", c.memory_breakdown);
  for (const std::string& key : registered_monitor_sections())
    parse_monitor(root, key.c_str(), c.monitors[key]);
  if (root.has("flops_profiler")) {
    Section f = root.sub("flops_profiler");
    auto& p = c.flops_profiler;
    f.get("enabled", p.enabled);
    f.get_min("recompute_fwd_factor", p.recompute_fwd_factor, 0.0, ">= 0");
    f.get_min<int64_t>("profile_step", p.profile_step, 0, ">= 0");
    f.get_min<int64_t>("module_depth", p.module_depth, -1, ">= -1 (-1: every depth)");
    f.get_min<int64_t>("top_modules", p.top_modules, 1, ">= 1");
    f.get("detailed", p.detailed);
    if (!f.raw("output_file", "string or null", "null").is_null())
      f.get("output_file", p.output_file);
    f.warn_unknown();
  }
  if (root.has("trace")) {
    Section t = root.sub("trace");
    auto& tr = c.trace;
    t.get("enabled", tr.enabled);
    t.get("output_path", tr.output_path);
    t.get("kernels", tr.kernels);
    const std::string steps_default =
        "[" + std::to_string(tr.from) + ", " + std::to_string(tr.to) + "]";
    if (const json& steps = t.raw("steps", "[from, to]", steps_default); !steps.is_null()) {
      TS_CHECK(steps.is_array() && steps.size() == 2 && steps[0].is_number_integer() &&
                   steps[1].is_number_integer(),
               source, ": 'trace.steps' must be [from, to] (global steps, inclusive), found ",
               steps.dump());
      tr.from = steps[0].get<int64_t>();
      tr.to = steps[1].get<int64_t>();
      TS_CHECK(tr.from >= 0 && tr.from <= tr.to, source, ": 'trace.steps' is ", steps.dump(),
               ", expected 0 <= from <= to");
    }
    TS_CHECK(!tr.output_path.empty(), source, ": 'trace.output_path' is empty");
    t.warn_unknown();
  }
  for (const char* service : {"wandb", "comet"})
    if (root.has(service) && !c.monitors.count(service)) {
      Section m = root.sub(service);
      bool enabled = false;
      m.get("enabled", enabled);
      m.notes({{"", "DeepSpeed's monitor of a network service: not supported here"},
               {"enabled", "not supported (no network service): true is warned about"}});
      if (enabled)
        root.warnings().push_back(source + ": '" + service +
                                  ".enabled' is not supported (no network service here; ignored): "
                                  "use tensorboard or csv_monitor");
    }
  if (root.has("checkpoint")) {
    Section k = root.sub("checkpoint");
    k.get("tag_validation", c.checkpoint.tag_validation);
    const std::string& tag = c.checkpoint.tag_validation;
    k.expect("tag_validation", tag == "Warn" || tag == "Ignore" || tag == "Fail", tag,
             "Warn, Ignore or Fail");
    if (k.has("tag_validation"))
      k.warnings().push_back(source +
                             ": 'checkpoint.tag_validation' has no effect in Tessera (ignored): "
                             "every rank writes the tag rank 0 chose");
    k.ignored<bool>("load_universal", "any checkpoint loads at any stage and rank count");
    k.ignored<bool>("use_node_local_storage", "ranks write to the directory they are given");
    k.warn_unknown();
  }
}

}  // namespace config

void TrainConfig::refuse_unknown_keys() const {
  if (unknown_keys.empty()) return;
  std::string list;
  for (const std::string& k : unknown_keys) list += (list.empty() ? "" : ", ") + k;
  fail(source, ": unknown keys (refused: \"strict\": true or --strict): ", list);
}

TrainConfig TrainConfig::from_file(const std::string& path, int64_t world_size) {
  return parse(read_text_file(path), world_size, path);
}

TrainConfig TrainConfig::parse(const std::string& text, int64_t world, const std::string& source) {
  TS_CHECK(world >= 1, source, ": world size must be >= 1");
  config::json j;
  try {
    j = config::json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const config::json::exception& e) {
    fail(source, ": invalid JSON: ", e.what());
  }
  return config::parse_document(j, world, source, nullptr);
}

namespace config {

TrainConfig parse_document(const json& j, int64_t world, const std::string& source,
                           ConfigKeyRecorder* recorder) {
  TrainConfig c;
  c.source = source;
  Section root(j, "", source, c.warnings, c.unknown_keys, recorder);
  root.notes(
      {{"strict", "Tessera's: unknown keys are errors (else warnings)"},
       {"optimizer", "the optimizer and its parameters (`tessera optimizers`)"},
       {"scheduler", "the learning-rate schedule and its parameters (`tessera schedules`)"},
       {"gradient_clipping", "clip the global gradient norm to this (0: no clipping)"},
       {"dataloader_drop_last", "engine.deepspeed_io's loaders drop an epoch's last short batch"},
       {"model", "Tessera's: the built-in model to train (`tessera models`) and its shape"},
       {"data", "Tessera's: the corpus and its tokenizer"},
       {"train", "Tessera's: the run (`tessera train`): steps, seed, evaluation, checkpoints"}});
  root.get("strict", c.strict);
  // (The sections higher layers own first: tensor_parallel and pipeline decide the data-parallel
  // size the batch triple is resolved for.)
  config::parse_registered_sections(root, c);
  c.world_size = config::data_parallel_size(c, world);
  config::parse_batch(root, c);
  if (root.has("optimizer")) config::parse_optimizer(root.sub("optimizer"), c);
  if (root.has("scheduler")) config::parse_scheduler(root.sub("scheduler"), c);
  root.get("gradient_clipping", c.gradient_clipping);
  root.expect("gradient_clipping", c.gradient_clipping >= 0, c.gradient_clipping, ">= 0 (0 = off)");
  root.get("dataloader_drop_last", c.dataloader_drop_last);
  config::parse_precision(root, c);
  config::parse_communication(root, c);
  config::parse_monitoring(root, c);
  if (root.has("model")) config::parse_model(root.sub("model"), c);
  const bool nsp_from_init = c.data.nsp;
  if (root.has("data")) config::parse_data(root.sub("data"), c);
  config::adopt_init_from_data(j.value("data", config::json()), nsp_from_init, c);
  if (root.has("train")) config::parse_train(root.sub("train"), c);
  root.warn_unknown();
  if (c.strict) c.refuse_unknown_keys();

  // Rules that span sections (not while describing the keys: they read no keys, and the
  // documents TrainConfig::describe_keys reads state sections no real file would combine).
  if (!recorder) config::check_registered_sections(c);
  return c;
}

}  // namespace config

const TrainConfig::Monitor& TrainConfig::monitor(const std::string& key) const {
  const auto it = monitors.find(key);
  TS_CHECK(
      it != monitors.end(), "'", key, "' is not a registered monitor (registered: ",
      [&] {
        std::string out;
        for (const auto& [k, m] : monitors) out += (out.empty() ? "" : ", ") + k;
        return out;
      }(),
      ")");
  return it->second;
}

TrainConfig::Monitor& TrainConfig::monitor(const std::string& key) {
  (void)std::as_const(*this).monitor(key);  // (the error for an unregistered key)
  return monitors.at(key);
}

bool TrainConfig::any_monitor_enabled() const {
  for (const auto& [key, m] : monitors)
    if (m.enabled) return true;
  return false;
}

DType TrainConfig::model_dtype() const {
  return bf16 ? DType::BFloat16 : fp16.enabled ? DType::Float16 : DType::Float32;
}

DType TrainConfig::communication_dtype() const {
  return communication_data_type.empty() ? model_dtype() : dtype_from_name(communication_data_type);
}

}  // namespace tessera::io
