#include "tessera/engine/fp8_config.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"

namespace tessera::engine {

void Fp8Config::parse(io::config::Section& s, Fp8Config& out) {
  s.notes({{"",
            "FP8 training of the transformer layers' linear layers, Transformer Engine's "
            "DelayedScaling recipe (docs/training.md)"},
           {"enabled", "the column- and row-parallel linears' GEMMs through FP8"},
           {"fp8_format", "HYBRID: E4M3 forward, E5M2 gradients; E4M3: both E4M3"},
           {"margin", "scales are fp8_max / amax / 2^margin"},
           {"interval", "steps between scale updates (the amax history moves every step)"},
           {"amax_history_len", "amaxes kept per tensor"},
           {"amax_compute_algo", "max: the history's largest; most_recent: the last step's"},
           {"reduce_amax",
            "amaxes are the maxima over the data- and tensor-parallel ranks (a MoE expert's: "
            "over the ranks holding it)"}});
  s.get("enabled", out.enabled);
  nn::Fp8Recipe& r = out.recipe;
  std::string format = "HYBRID";
  s.get("fp8_format", format);
  s.expect("fp8_format", format == "HYBRID" || format == "E4M3", format,
           "\"HYBRID\" or \"E4M3\" (Transformer Engine has no pure-E5M2 training)");
  r.hybrid = format == "HYBRID";
  s.get("margin", r.margin);
  s.expect("margin", r.margin >= 0 && r.margin <= 64, r.margin, "an integer in [0, 64]");
  s.get("interval", r.interval);
  s.expect("interval", r.interval >= 1, r.interval, "an integer >= 1");
  s.get("amax_history_len", r.amax_history_len);
  s.expect("amax_history_len", r.amax_history_len >= 1 && r.amax_history_len <= 65536,
           r.amax_history_len, "an integer in [1, 65536]");
  std::string algo = "max";
  s.get("amax_compute_algo", algo);
  s.expect("amax_compute_algo", algo == "max" || algo == "most_recent", algo,
           "\"max\" or \"most_recent\"");
  r.amax_compute_algo = algo == "max" ? nn::AmaxComputeAlgo::Max : nn::AmaxComputeAlgo::MostRecent;
  s.get("reduce_amax", r.reduce_amax);
}

const Fp8Config& fp8_config(const io::TrainConfig& cfg) {
  return cfg.section<Fp8Config>();
}

namespace {

// The layouts FP8 is built for: each needs every rank of a data- and tensor-parallel group to
// hold the same layers (the amaxes are reduced as one vector) and one scaling state per
// layer (checkpoints keep one).
void check_fp8(io::TrainConfig& cfg) {
  const Fp8Config& f = fp8_config(cfg);
  if (!f.enabled) return;
  TS_CHECK(!cfg.model.transformer_kernel, cfg.source,
           ": 'fp8.enabled' with 'model.transformer_kernel' is not built (its joined q|k|v "
           "GEMM and recomputed GELU do not run through FP8)");
  TS_CHECK(f.recipe.reduce_amax || cfg.world_size <= 1, cfg.source,
           ": 'fp8.reduce_amax' false with ", cfg.world_size,
           " ranks is not built (each rank's scales would differ, and a checkpoint keeps one "
           "set)");
}

const io::RegisterConfigSection<Fp8Config> kFp8Section{"fp8", check_fp8};

}  // namespace

}  // namespace tessera::engine
