// DeepSpeed's DeepSpeedTransformerConfig (deepspeed.ops.transformer, the Transformer Kernel API
// of DeepSpeed 0.3.0): the options of one DeepSpeedTransformerLayer. The field names are
// DeepSpeed's keyword arguments and from_dict keys; the defaults are its defaults (-1 = unset,
// filled or refused by check()).
//
//   nn::DeepSpeedTransformerConfig c;
//   c.hidden_size = 768; c.heads = 12; c.num_hidden_layers = 12; c.initializer_range = 0.02;
//   c.attn_dropout_ratio = 0.1; c.hidden_dropout_ratio = 0.1;
//   c.pre_layer_norm = false;  // BERT's post-LN
//   nn::DeepSpeedTransformerLayer layer(this, "layer", c);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/dtype.h"

namespace tessera::nn {

struct DeepSpeedTransformerConfig {
  int64_t batch_size = -1;           // the largest batch a forward may take (-1: any)
  int64_t max_seq_length = -1;       // the longest sequence a forward may take (-1: any)
  int64_t hidden_size = -1;          // required
  int64_t intermediate_size = -1;    // -1: 4 x hidden_size (as DeepSpeed)
  int64_t heads = -1;                // required; divides hidden_size
  double attn_dropout_ratio = -1;    // dropout of the attention probabilities (-1: 0)
  double hidden_dropout_ratio = -1;  // dropout of both sublayers' outputs (-1: 0)
  int64_t num_hidden_layers = -1;    // the model's layer count: adjust_init_range's divisor
  double initializer_range = -1;     // std of the weights' normal init (-1: 0.02)
  double layer_norm_eps = 1e-12;
  int64_t local_rank = -1;  // DeepSpeed's device choice; Tessera's tensors carry their device
  // >= 0: the layer's dropout masks come from a generator of its own seeded with seed +
  // layer_id (DeepSpeed's kernels draw all layers' masks from one stream seeded with seed;
  // the masks are not DeepSpeed's either way), which checkpoints do not hold; -1: from the
  // default generator, which the engine seeds, shards over data-parallel ranks and saves.
  int64_t seed = -1;
  bool fp16 = false;           // parameters and compute in float16
  bool bf16 = false;           // ... in bfloat16 (Tessera's; DeepSpeed's kernel has fp16 only)
  bool pre_layer_norm = true;  // Pre-LN (LayerNorm before each sublayer) or BERT's Post-LN
  // Memory options of DeepSpeed's kernel: each keeps less for backward and recomputes it
  // there. normalize_invertible: the LayerNorms keep their output, not their input (backward
  // rebuilds the input: gradients equal to rounding); gelu_checkpoint: the GELU's output is
  // recomputed from its input; attn_dropout_checkpoint: the dropped-out attention
  // probabilities are drawn again from the kept ones (both: the same bits).
  bool normalize_invertible = false;
  bool gelu_checkpoint = false;
  bool attn_dropout_checkpoint = false;
  // output_std = initializer_range / sqrt(2 * num_hidden_layers) for the two output
  // projections (attn_ow, output_w). DeepSpeed applies it only where local_rank == 0; here
  // wherever it is set, so every rank initialises alike.
  bool adjust_init_range = true;
  // DeepSpeed's faster, non-deterministic CUDA kernels. Tessera's kernels are deterministic
  // on every device, so this changes nothing (accepted for DeepSpeed configs).
  bool stochastic_mode = false;
  bool huggingface = false;   // forward's result is what HF's BertLayer returns (0.3.0 key)
  bool return_tuple = false;  // DeepSpeed's later name for it; same meaning here
  bool training = true;       // the layer's initial mode (Module::train/eval change it)
  // Set by DeepSpeedTransformerLayer from its static counter (0, 1, ... in creation order).
  int64_t layer_id = -1;

  // Fills the defaults above and checks every field, naming it ("DeepSpeedTransformerConfig.
  // heads 5 does not divide hidden_size 768"). Returns the filled copy.
  DeepSpeedTransformerConfig checked() const;
  // The parameters' dtype: Float16 with fp16, BFloat16 with bf16, else Float32.
  DType dtype() const;

  // DeepSpeed's from_dict: every key of the object sets the field of that name; an unknown
  // key or a value of the wrong kind is an error naming it.
  static DeepSpeedTransformerConfig from_json(const nlohmann::json& object);
  static const std::vector<std::string>& keys();
};

}  // namespace tessera::nn
