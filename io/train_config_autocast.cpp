// DeepSpeed's "torch_autocast" and "amp" (Apex) sections, mapped to Tessera's mixed precision.
// amp: Apex's O1 (patched functions) and O2 (a float16 model with float32 masters) both train
// as Tessera's fp16 does, with Apex's dynamic loss scale; DeepSpeed refuses amp with ZeRO, and
// so does Tessera (parallel/zero_config.cpp). torch_autocast: DeepSpeed runs the
// forward under torch.autocast: float32 parameters, the listed modules (Linear and Conv by
// default) computing in the lower precision. Tessera has no per-op autocast: it trains the
// whole model in that dtype with float32 masters, as its bf16 and fp16 sections do (the ops it
// keeps in float32 are in docs/training.md), so the numbers differ from DeepSpeed's by
// rounding, not in kind. A module list other than DeepSpeed's default cannot be honoured and is
// an error rather than a silent difference.
#include <algorithm>

#include "config_sections.h"

namespace tessera::io::config {

namespace {

// DeepSpeed's DtypeEnum spellings of the two lower precisions and float32.
DType autocast_dtype(Section& t, const std::string& name) {
  for (const char* s : {"torch.bfloat16", "bf16", "bfloat16"})
    if (name == s) return DType::BFloat16;
  for (const char* s : {"torch.float16", "fp16", "float16", "half"})
    if (name == s) return DType::Float16;
  for (const char* s : {"torch.float32", "fp32", "float32", "float"})
    if (name == s) return DType::Float32;
  t.expect("dtype", false, name,
           "bfloat16 or float16 (or DeepSpeed's other names for them: bf16, torch.bfloat16, "
           "fp16, half, torch.float16; float32 trains in float32)");
  return DType::Float32;
}

// `section` turns on a lower precision: Tessera's own bf16 / fp16 sections must not as well.
void check_one_precision(const Section& root, const TrainConfig& c, const char* section) {
  TS_CHECK(!c.bf16 && !c.fp16.enabled, root.source(), ": '", section, ".enabled' and '",
           c.bf16 ? "bf16" : "fp16", ".enabled' cannot both be true: choose one");
}

// float16 with dynamic loss scaling as torch.amp.GradScaler and Apex's scaler do it: from
// 2^16, doubling after 2000 clean steps, halving on every overflow.
void enable_fp16_with_torch_scale_schedule(TrainConfig& c) {
  c.fp16.enabled = true;
  c.fp16.initial_scale_power = 16;
  c.fp16.loss_scale_window = 2000;
  c.fp16.hysteresis = 1;
}

// DeepSpeed's LOWER_PRECISION_SAFE_MODULES, as its config names them.
const std::vector<std::string>& default_safe_modules() {
  static const std::vector<std::string> names = {
      "torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv1d",
      "torch.nn.modules.conv.Conv2d", "torch.nn.modules.conv.Conv3d"};
  return names;
}

void check_safe_modules(Section& t) {
  const json& v =
      t.raw("lower_precision_safe_modules", "list of strings", json(default_safe_modules()).dump());
  if (v.is_null()) return;
  TS_CHECK(v.is_array() && v.size() <= 256 &&
               std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); }),
           t.source(), ": '", t.key("lower_precision_safe_modules"),
           "' must be a list of module class names, found ", v.dump());
  for (const json& e : v) {
    const auto& names = default_safe_modules();
    TS_CHECK(std::find(names.begin(), names.end(), e.get<std::string>()) != names.end(), t.source(),
             ": '", t.key("lower_precision_safe_modules"), "' names ", e.dump(),
             ": Tessera computes the whole model in torch_autocast.dtype (float32 masters), not "
             "chosen modules; leave the key out or list only DeepSpeed's defaults (Linear, "
             "Conv1d/2d/3d)");
  }
}

}  // namespace

void parse_torch_autocast(Section& root, TrainConfig& c) {
  if (!root.has("torch_autocast")) return;
  Section t = root.sub("torch_autocast");
  t.notes({{"",
            "DeepSpeed's torch.autocast: Tessera trains the whole model in the dtype with "
            "float32 masters (as bf16 / fp16; docs/training.md)"},
           {"enabled", "train in the lower precision"},
           {"dtype", "bfloat16 or float16 (DeepSpeed's names: bf16, fp16, half, torch.*)"},
           {"lower_precision_safe_modules",
            "DeepSpeed's default list only: Tessera casts the whole model, not chosen modules"}});
  bool enabled = false;
  std::string dtype;
  t.get("enabled", enabled);
  t.get("dtype", dtype);
  check_safe_modules(t);
  t.warn_unknown();
  if (!enabled) return;
  TS_CHECK(!dtype.empty(), root.source(),
           ": 'torch_autocast.dtype' is needed with 'torch_autocast.enabled' (bfloat16 or "
           "float16: torch's default depends on the device)");
  const DType precision = autocast_dtype(t, dtype);
  check_one_precision(root, c, "torch_autocast");
  // (DeepSpeed's GradScaler, at stage 0, scales fp16 losses; bf16 needs no scale)
  if (precision == DType::BFloat16) c.bf16 = true;
  if (precision == DType::Float16) enable_fp16_with_torch_scale_schedule(c);
}

void parse_amp(Section& root, TrainConfig& c) {
  if (!root.has("amp")) return;
  Section a = root.sub("amp");
  a.notes({{"",
            "DeepSpeed's Apex AMP: Tessera trains in float16 with float32 masters and a loss "
            "scale, as its fp16 section (docs/training.md)"},
           {"enabled", "train with AMP"},
           {"opt_level", "O0 (float32), O1 or O2 (float16, float32 masters); O3 is refused"},
           {"loss_scale", "\"dynamic\" or a fixed scale"},
           {"min_loss_scale", "the dynamic scale halves no lower"},
           {"max_loss_scale", "Apex's default 2^24 only (Tessera's scale has no cap)"},
           {"master_weights", "true only: Tessera keeps float32 masters"},
           {"keep_batchnorm_fp32", "no effect: the built-in models have no batch norm"},
           {"verbosity", "Apex's log level (Tessera prints its own)"},
           {"num_losses", "1 only: one loss scale"}});
  bool enabled = false;
  std::string level = "O1";  // apex.amp.initialize's default
  a.get("enabled", enabled);
  a.get("opt_level", level);
  a.expect("opt_level", level == "O0" || level == "O1" || level == "O2", level,
           "O0, O1 or O2 (O3, pure float16 without float32 masters, is not supported)");
  const json& scale = a.raw("loss_scale", "\"dynamic\" or a number", "\"dynamic\"");
  TS_CHECK(scale.is_null() || (scale.is_string() && scale == "dynamic") ||
               (scale.is_number() && scale.get<double>() > 0),
           a.source(), ": 'amp.loss_scale' is ", scale.dump(),
           ", expected \"dynamic\" or a positive number");
  double min_scale = c.fp16.min_loss_scale, max_scale = 16777216.0;
  bool master_weights = true, keep_batchnorm = true;
  int64_t verbosity = 1, losses = 1;
  a.get("min_loss_scale", min_scale);
  a.expect("min_loss_scale", min_scale > 0, min_scale, "> 0");
  a.get("max_loss_scale", max_scale);
  a.expect("max_loss_scale", max_scale == 16777216.0, max_scale,
           "Apex's default 2^24 (16777216): Tessera's dynamic scale has no cap");
  a.get("master_weights", master_weights);
  a.expect("master_weights", master_weights, "false", "true (Tessera keeps float32 masters)");
  a.get("keep_batchnorm_fp32", keep_batchnorm);
  a.get("verbosity", verbosity);
  a.get("num_losses", losses);
  a.expect("num_losses", losses == 1, losses, "1 (one loss scale)");
  // Apex's per-level overrides: Tessera's mapping decides what they would.
  for (const char* k : {"cast_model_type", "patch_torch_functions", "cast_model_outputs"})
    a.refused(k,
              "Tessera trains amp's O1 and O2 alike, as its fp16 section (a float16 model, "
              "float32 masters)");
  a.warn_unknown();
  if (!enabled || level == "O0") return;
  check_one_precision(root, c, "amp");  // (DeepSpeed raises NotImplementedError for this pair)
  c.amp = true;
  enable_fp16_with_torch_scale_schedule(c);
  c.fp16.min_loss_scale = min_scale;
  if (scale.is_number()) c.fp16.loss_scale = scale.get<double>();
}

}  // namespace tessera::io::config
