#include "tessera/io/train_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "tessera/error.h"
#include "tessera/io/files.h"

namespace tessera::io {

namespace {

using json = nlohmann::json;

// Reads typed values out of one JSON object, recording which keys it consumed so the rest
// can be reported as unknown.
class Section {
 public:
  Section(const json& j, std::string path, const std::string& source,
          std::vector<std::string>& warnings)
      : j_(j), path_(std::move(path)), source_(source), warnings_(warnings) {
    TS_CHECK(j.is_object(), source_, ": '", path_, "' must be an object, found ", j.dump());
  }
  ~Section() = default;

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  bool has(const std::string& k) {
    seen_.insert(k);
    return j_.contains(k) && !j_[k].is_null();
  }

  template <class T>
  void get(const std::string& k, T& out) {
    if (!has(k)) return;
    const json& v = j_[k];
    if constexpr (std::is_same_v<T, bool>) {
      TS_CHECK(v.is_boolean(), source_, ": '", key(k), "' must be true or false, found ", v.dump());
      out = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      TS_CHECK(v.is_number_integer() ||
                   (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())),
               source_, ": '", key(k), "' must be an integer, found ", v.dump());
      out = static_cast<T>(v.get<double>());
    } else if constexpr (std::is_floating_point_v<T>) {
      TS_CHECK(v.is_number(), source_, ": '", key(k), "' must be a number, found ", v.dump());
      out = v.get<double>();
    } else {
      TS_CHECK(v.is_string(), source_, ": '", key(k), "' must be a string, found ", v.dump());
      out = v.get<std::string>();
    }
  }

  template <class T>
  void get_min(const std::string& k, T& out, T min, const char* expect) {
    get(k, out);
    if (has(k))
      TS_CHECK(out >= min, source_, ": '", key(k), "' is ", j_[k].dump(), ", expected ", expect);
  }

  Section sub(const std::string& k) {
    seen_.insert(k);
    static const json empty = json::object();
    return Section(has(k) ? j_[k] : empty, key(k), source_, warnings_);
  }
  const json& raw(const std::string& k) {
    seen_.insert(k);
    return j_[k];
  }

  // Keys present but never asked for.
  void warn_unknown() {
    for (auto& [k, v] : j_.items())
      if (!seen_.count(k) && k.rfind("_", 0) != 0)  // "_comment" style keys are notes
        warnings_.push_back(source_ + ": unknown key '" + key(k) + "' (ignored)");
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& source_;
  std::vector<std::string>& warnings_;
  std::set<std::string> seen_;
};

void range(bool ok, const std::string& source, const std::string& key, double value,
           const char* expect) {
  TS_CHECK(ok, source, ": '", key, "' is ", value, ", expected ", expect);
}

}  // namespace

TrainConfig TrainConfig::from_file(const std::string& path, int64_t world_size) {
  return parse(read_text_file(path), world_size, path);
}

TrainConfig TrainConfig::parse(const std::string& text, int64_t world, const std::string& source) {
  TS_CHECK(world >= 1, source, ": world size must be >= 1");
  json j;
  try {
    j = json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    fail(source, ": invalid JSON: ", e.what());
  }
  TrainConfig c;
  c.world_size = world;
  Section root(j, "", source, c.warnings);

  // ---- batch triple ----
  const bool has_tbs = root.has("train_batch_size"),
             has_mb = root.has("train_micro_batch_size_per_gpu"),
             has_ga = root.has("gradient_accumulation_steps");
  root.get_min<int64_t>("train_batch_size", c.train_batch_size, 1, "a positive integer");
  root.get_min<int64_t>("train_micro_batch_size_per_gpu", c.micro_batch_size, 1,
                        "a positive integer");
  root.get_min<int64_t>("gradient_accumulation_steps", c.gradient_accumulation_steps, 1,
                        "a positive integer");
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

  // ---- optimizer ----
  if (root.has("optimizer")) {
    Section o = root.sub("optimizer");
    o.get("type", c.optimizer.type);
    const std::set<std::string> known{"Adam", "AdamW", "SGD", "Lamb"};
    TS_CHECK(known.count(c.optimizer.type), source, ": 'optimizer.type' is \"", c.optimizer.type,
             "\", expected one of Adam, AdamW, SGD, Lamb");
    if (c.optimizer.type == "Adam") c.optimizer.adam_w_mode = false;
    Section p = o.sub("params");
    p.get("lr", c.optimizer.lr);
    range(c.optimizer.lr >= 0, source, "optimizer.params.lr", c.optimizer.lr, ">= 0");
    if (p.has("betas")) {
      const json& b = p.raw("betas");
      TS_CHECK(b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number(), source,
               ": 'optimizer.params.betas' must be two numbers, found ", b.dump());
      c.optimizer.beta1 = b[0].get<double>();
      c.optimizer.beta2 = b[1].get<double>();
      for (double v : {c.optimizer.beta1, c.optimizer.beta2})
        range(v >= 0 && v < 1, source, "optimizer.params.betas", v, "values in [0, 1)");
    }
    p.get("eps", c.optimizer.eps);
    range(c.optimizer.eps > 0, source, "optimizer.params.eps", c.optimizer.eps, "> 0");
    p.get("weight_decay", c.optimizer.weight_decay);
    range(c.optimizer.weight_decay >= 0, source, "optimizer.params.weight_decay",
          c.optimizer.weight_decay, ">= 0");
    p.get("adam_w_mode", c.optimizer.adam_w_mode);
    p.get("momentum", c.optimizer.momentum);
    p.get("dampening", c.optimizer.dampening);
    p.get("nesterov", c.optimizer.nesterov);
    p.get("max_coeff", c.optimizer.max_coeff);
    p.get("min_coeff", c.optimizer.min_coeff);
    bool torch_adam = false;
    p.get("torch_adam", torch_adam);
    p.warn_unknown();
    o.warn_unknown();
  }

  // ---- scheduler ----
  if (root.has("scheduler")) {
    Section s = root.sub("scheduler");
    s.get("type", c.scheduler.type);
    const std::map<std::string, std::vector<std::string>> params{
        {"WarmupLR", {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps"}},
        {"WarmupDecayLR",
         {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps"}},
        {"WarmupCosineLR",
         {"warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "total_num_steps"}},
        {"OneCycle",
         {"cycle_min_lr", "cycle_max_lr", "decay_lr_rate", "cycle_first_step_size",
          "cycle_second_step_size", "decay_step_size", "cycle_first_stair_count",
          "cycle_second_stair_count", "cycle_momentum", "cycle_min_mom", "cycle_max_mom",
          "decay_mom_rate"}},
        {"LRRangeTest",
         {"lr_range_test_min_lr", "lr_range_test_step_size", "lr_range_test_step_rate",
          "lr_range_test_staircase"}}};
    auto it = params.find(c.scheduler.type);
    TS_CHECK(it != params.end(), source, ": 'scheduler.type' is \"", c.scheduler.type,
             "\", expected one of WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest");
    Section p = s.sub("params");
    for (const std::string& k : it->second) {
      if (!p.has(k)) continue;
      const json& v = p.raw(k);
      if (v.is_boolean())
        c.scheduler.params[k] = v.get<bool>() ? 1.0 : 0.0;
      else {
        double d = 0;
        p.get(k, d);
        c.scheduler.params[k] = d;
      }
    }
    p.get("warmup_type", c.scheduler.warmup_type);
    TS_CHECK(c.scheduler.warmup_type == "log" || c.scheduler.warmup_type == "linear", source,
             ": 'scheduler.params.warmup_type' is \"", c.scheduler.warmup_type,
             "\", expected \"log\" or \"linear\"");
    if (c.scheduler.type == "WarmupDecayLR" || c.scheduler.type == "WarmupCosineLR")
      TS_CHECK(c.scheduler.params.count("total_num_steps"), source,
               ": 'scheduler.params.total_num_steps' is required by ", c.scheduler.type);
    p.warn_unknown();
    s.warn_unknown();
  }

  root.get("gradient_clipping", c.gradient_clipping);
  range(c.gradient_clipping >= 0, source, "gradient_clipping", c.gradient_clipping,
        ">= 0 (0 = off)");

  if (root.has("fp16")) {
    Section f = root.sub("fp16");
    f.get("enabled", c.fp16.enabled);
    f.get("loss_scale", c.fp16.loss_scale);
    range(c.fp16.loss_scale >= 0, source, "fp16.loss_scale", c.fp16.loss_scale,
          ">= 0 (0 = dynamic)");
    f.get_min<int64_t>("initial_scale_power", c.fp16.initial_scale_power, 0, ">= 0");
    f.get_min<int64_t>("loss_scale_window", c.fp16.loss_scale_window, 1, ">= 1");
    f.get_min<int64_t>("hysteresis", c.fp16.hysteresis, 1, ">= 1");
    f.get("consecutive_hysteresis", c.fp16.consecutive_hysteresis);
    f.get("min_loss_scale", c.fp16.min_loss_scale);
    range(c.fp16.min_loss_scale > 0, source, "fp16.min_loss_scale", c.fp16.min_loss_scale, "> 0");
    bool auto_cast = false;
    f.get("auto_cast", auto_cast);
    f.warn_unknown();
  }
  for (const char* name : {"bf16", "bfloat16"}) {
    if (!root.has(name)) continue;
    Section b = root.sub(name);
    b.get("enabled", c.bf16);
    b.warn_unknown();
  }
  TS_CHECK(!(c.fp16.enabled && c.bf16), source,
           ": 'fp16.enabled' and 'bf16.enabled' cannot both be true");

  if (root.has("zero_optimization")) {
    Section z = root.sub("zero_optimization");
    z.get("stage", c.zero.stage);
    range(c.zero.stage >= 0 && c.zero.stage <= 3, source, "zero_optimization.stage",
          static_cast<double>(c.zero.stage), "0, 1, 2 or 3");
    if (z.has("offload_optimizer")) {
      Section off = z.sub("offload_optimizer");
      off.get("device", c.zero.offload_optimizer_device);
      TS_CHECK(
          c.zero.offload_optimizer_device == "cpu" || c.zero.offload_optimizer_device == "none",
          source, ": 'zero_optimization.offload_optimizer.device' is \"",
          c.zero.offload_optimizer_device, "\", expected \"cpu\" or \"none\"");
      TS_CHECK(c.zero.offload_optimizer_device == "none" || c.zero.stage >= 1, source,
               ": 'zero_optimization.offload_optimizer' needs ZeRO stage 1, 2 or 3 (the "
               "offloaded optimizer works on a rank's partition), but 'zero_optimization.stage' "
               "is 0");
      off.get("pin_memory", c.zero.offload_pin_memory);
      off.warn_unknown();
    }
    z.get_min<int64_t>("reduce_bucket_size", c.zero.reduce_bucket_size, 1, ">= 1");
    z.get("overlap_comm", c.zero.overlap_comm);
    z.get("contiguous_gradients", c.zero.contiguous_gradients);
    z.get_min<int64_t>("stage3_param_persistence_threshold",
                       c.zero.stage3_param_persistence_threshold, 0, ">= 0");
    z.get_min<int64_t>("stage3_prefetch_bucket_size", c.zero.stage3_prefetch_bucket_size, 0,
                       ">= 0");
    for (const char* k : {"allgather_bucket_size", "stage3_max_live_parameters",
                          "stage3_max_reuse_distance", "sub_group_size"}) {
      int64_t v = 0;
      z.get_min<int64_t>(k, v, 0, ">= 0");
    }
    for (const char* k :
         {"allgather_partitions", "reduce_scatter", "stage3_gather_16bit_weights_on_model_save"}) {
      bool v = false;
      z.get(k, v);
    }
    z.warn_unknown();
  }

  root.get("prescale_gradients", c.prescale_gradients);
  root.get("gradient_predivide_factor", c.gradient_predivide_factor);
  range(c.gradient_predivide_factor > 0, source, "gradient_predivide_factor",
        c.gradient_predivide_factor, "> 0");
  root.get("communication_data_type", c.communication_data_type);
  TS_CHECK(c.communication_data_type.empty() || c.communication_data_type == "fp32" ||
               c.communication_data_type == "fp16" || c.communication_data_type == "bf16",
           source, ": 'communication_data_type' is \"", c.communication_data_type,
           "\", expected \"fp32\", \"fp16\" or \"bf16\"");
  if (root.has("comms_logger")) {
    Section m = root.sub("comms_logger");
    m.get("enabled", c.comms_logger.enabled);
    m.get("verbose", c.comms_logger.verbose);
    m.get("prof_all", c.comms_logger.prof_all);
    if (m.has("prof_ops")) {
      const json& ops = m.raw("prof_ops");
      TS_CHECK(ops.is_array(), source,
               ": 'comms_logger.prof_ops' must be a list of op names, found ", ops.dump());
      for (const auto& op : ops) {
        TS_CHECK(op.is_string(), source, ": 'comms_logger.prof_ops' must hold strings, found ",
                 op.dump());
        c.comms_logger.prof_ops.push_back(op.get<std::string>());
      }
    }
    bool debug = false;
    m.get("debug", debug);
    m.warn_unknown();
  }
  if (root.has("distributed")) {
    Section d = root.sub("distributed");
    d.get("timeout_s", c.distributed.timeout_s);
    range(c.distributed.timeout_s > 0, source, "distributed.timeout_s", c.distributed.timeout_s,
          "> 0 seconds");
    d.warn_unknown();
  }
  root.get_min<int64_t>("steps_per_print", c.steps_per_print, 1, ">= 1");
  root.get("wall_clock_breakdown", c.wall_clock_breakdown);
  if (root.has("csv_monitor")) {
    Section m = root.sub("csv_monitor");
    m.get("enabled", c.csv_monitor.enabled);
    m.get("output_path", c.csv_monitor.output_path);
    m.get("job_name", c.csv_monitor.job_name);
    m.warn_unknown();
  }
  if (root.has("checkpoint")) {
    Section k = root.sub("checkpoint");
    k.get("tag_validation", c.checkpoint.tag_validation);
    TS_CHECK(c.checkpoint.tag_validation == "Warn" || c.checkpoint.tag_validation == "Ignore" ||
                 c.checkpoint.tag_validation == "Fail",
             source, ": 'checkpoint.tag_validation' is \"", c.checkpoint.tag_validation,
             "\", expected Warn, Ignore or Fail");
    bool b = false;
    k.get("load_universal", b);
    k.get("use_node_local_storage", b);
    k.warn_unknown();
  }

  // ---- Tessera's sections ----
  if (root.has("model")) {
    Section m = root.sub("model");
    m.get("type", c.model.type);
    TS_CHECK(c.model.type == "gpt2" || c.model.type == "bert", source, ": 'model.type' is \"",
             c.model.type, "\", expected \"gpt2\" or \"bert\"");
    m.get("size", c.model.size);
    m.get_min<int64_t>("n_layer", c.model.n_layer, 1, ">= 1");
    m.get_min<int64_t>("n_head", c.model.n_head, 1, ">= 1");
    m.get_min<int64_t>("n_embd", c.model.n_embd, 1, ">= 1");
    m.get_min<int64_t>("block_size", c.model.block_size, 2, ">= 2");
    m.get_min<int64_t>("intermediate_size", c.model.intermediate_size, 0, ">= 0");
    m.get("dropout", c.model.dropout);
    range(c.model.dropout >= 0 && c.model.dropout < 1, source, "model.dropout", c.model.dropout,
          "in [0, 1)");
    m.get("bias", c.model.bias);
    m.get("init_from", c.model.init_from);
    TS_CHECK(c.model.n_embd % c.model.n_head == 0, source, ": 'model.n_embd' (", c.model.n_embd,
             ") must be divisible by 'model.n_head' (", c.model.n_head, ")");
    m.warn_unknown();
  }
  if (root.has("data")) {
    Section d = root.sub("data");
    d.get("path", c.data.path);
    d.get("tokenizer", c.data.tokenizer);
    TS_CHECK(c.data.tokenizer == "char" || c.data.tokenizer == "gpt2", source,
             ": 'data.tokenizer' is \"", c.data.tokenizer, "\", expected \"char\" or \"gpt2\"");
    d.get("vocab", c.data.vocab);
    d.get("merges", c.data.merges);
    d.get("val_fraction", c.data.val_fraction);
    range(c.data.val_fraction > 0 && c.data.val_fraction < 1, source, "data.val_fraction",
          c.data.val_fraction, "in (0, 1)");
    d.get("cache_dir", c.data.cache_dir);
    d.get("mask_prob", c.data.mask_prob);
    range(c.data.mask_prob > 0 && c.data.mask_prob < 1, source, "data.mask_prob", c.data.mask_prob,
          "in (0, 1)");
    d.get("nsp", c.data.nsp);
    TS_CHECK(c.data.tokenizer != "gpt2" || (!c.data.vocab.empty() && !c.data.merges.empty()),
             source,
             ": 'data.tokenizer' \"gpt2\" needs 'data.vocab' (vocab.json) and 'data.merges' "
             "(merges.txt)");
    d.warn_unknown();
  }
  if (root.has("train")) {
    Section t = root.sub("train");
    t.get_min<int64_t>("steps", c.train.steps, 0, ">= 0");
    int64_t seed = static_cast<int64_t>(c.train.seed);
    t.get_min<int64_t>("seed", seed, 0, ">= 0");
    c.train.seed = static_cast<uint64_t>(seed);
    t.get_min<int64_t>("eval_interval", c.train.eval_interval, 0, ">= 0 (0 = only at the end)");
    t.get_min<int64_t>("eval_iters", c.train.eval_iters, 1, ">= 1");
    t.get_min<int64_t>("sample_tokens", c.train.sample_tokens, 0, ">= 0");
    t.get("checkpoint_dir", c.train.checkpoint_dir);
    t.get_min<int64_t>("checkpoint_interval", c.train.checkpoint_interval, 0, ">= 0 (0 = off)");
    t.get("device", c.train.device);
    TS_CHECK(c.train.device == "cpu" || c.train.device == "cuda" ||
                 c.train.device.rfind("cuda:", 0) == 0,
             source, ": 'train.device' is \"", c.train.device,
             "\", expected \"cpu\", \"cuda\" or \"cuda:N\"");
    t.warn_unknown();
  }
  root.warn_unknown();
  return c;
}

}  // namespace tessera::io
