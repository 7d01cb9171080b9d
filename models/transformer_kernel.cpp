#include "tessera/models/transformer_kernel.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/models/sparse_attention.h"

namespace tessera::models {

void TransformerKernelConfig::parse(io::config::Section& s, TransformerKernelConfig& out) {
  out.stated = true;
  out.stated_keys = s.stated_keys();
  nn::TransformerKernelOptions& o = out.options;
  s.notes({{"",
            "Tessera's: options of DeepSpeed's transformer kernel for the built-in models "
            "(with model.transformer_kernel; docs/models.md)"},
           {"normalize_invertible",
            "LayerNorms keep their output, not their input: 2 x tokens x hidden fewer values "
            "per layer"},
           {"gelu_checkpoint", "the GELU's output is recomputed in backward: tokens x inner fewer"},
           {"attn_dropout_checkpoint",
            "DeepSpeed's: keep no dropped-out probabilities; the fused attention keeps none "
            "either way"},
           {"attn_dropout_ratio",
            "dropout on the attention probabilities, inside the fused attention (DeepSpeed's)"},
           {"stochastic_mode",
            "DeepSpeed's non-deterministic CUDA kernels; Tessera's are deterministic, so it "
            "changes nothing"}});
  s.get("normalize_invertible", o.normalize_invertible);
  s.get("gelu_checkpoint", o.gelu_checkpoint);
  s.get("attn_dropout_checkpoint", o.attn_dropout_checkpoint);
  s.get("attn_dropout_ratio", o.attn_dropout_ratio);
  s.expect("attn_dropout_ratio", o.attn_dropout_ratio >= 0 && o.attn_dropout_ratio < 1,
           o.attn_dropout_ratio, "in [0, 1)");
  s.get("stochastic_mode", o.stochastic_mode);
}

std::optional<nn::TransformerKernelOptions> transformer_kernel_of(const io::TrainConfig& cfg) {
  if (!cfg.model.transformer_kernel) return std::nullopt;
  return cfg.section<TransformerKernelConfig>().options;
}

namespace {

// The section configures the kernel: without it turned on it would be ignored.
void check_transformer_kernel(io::TrainConfig& cfg) {
  const TransformerKernelConfig& k = cfg.section<TransformerKernelConfig>();
  const std::string key =
      k.stated_keys.empty() ? "transformer_kernel" : "transformer_kernel." + k.stated_keys.front();
  TS_CHECK(!k.stated || cfg.model.transformer_kernel, cfg.source, ": '", key,
           "' needs \"model\": {\"transformer_kernel\": true} (without it the layers are not "
           "the kernel's and the 'transformer_kernel' section has no effect)");
  TS_CHECK(!cfg.model.transformer_kernel || k.options.attn_dropout_ratio == 0 ||
               !cfg.section<SparseAttentionConfig>().enabled,
           cfg.source,
           ": 'transformer_kernel.attn_dropout_ratio' needs dense attention: block-sparse "
           "attention (the 'sparse_attention' section) applies no probability dropout");
}

const io::RegisterConfigSection<TransformerKernelConfig> kTransformerKernelSection{
    "transformer_kernel", check_transformer_kernel};

}  // namespace

}  // namespace tessera::models
