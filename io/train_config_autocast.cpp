// DeepSpeed's "torch_autocast" section, mapped to Tessera's mixed precision. DeepSpeed runs the
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
std::string autocast_dtype(Section& t, const std::string& name) {
  for (const char* s : {"torch.bfloat16", "bf16", "bfloat16"})
    if (name == s) return "bf16";
  for (const char* s : {"torch.float16", "fp16", "float16", "half"})
    if (name == s) return "fp16";
  for (const char* s : {"torch.float32", "fp32", "float32", "float"})
    if (name == s) return "fp32";
  t.expect("dtype", false, name,
           "bfloat16 or float16 (or DeepSpeed's other names for them: bf16, torch.bfloat16, "
           "fp16, half, torch.float16; float32 trains in float32)");
  return "";
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
  const std::string precision = autocast_dtype(t, dtype);
  TS_CHECK(!c.bf16 && !c.fp16.enabled, root.source(), ": 'torch_autocast.enabled' and '",
           c.bf16 ? "bf16" : "fp16", ".enabled' cannot both be true: choose one");
  if (precision == "bf16") c.bf16 = true;
  if (precision != "fp16") return;
  // float16: dynamic loss scaling as torch.amp.GradScaler (DeepSpeed's, at stage 0) does it:
  // from 2^16, doubling after 2000 clean steps, halving on every overflow.
  c.fp16.enabled = true;
  c.fp16.initial_scale_power = 16;
  c.fp16.loss_scale_window = 2000;
  c.fp16.hysteresis = 1;
  c.fp16.hysteresis_stated = true;
}

}  // namespace tessera::io::config
