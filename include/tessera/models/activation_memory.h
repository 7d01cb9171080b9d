// The activation memory of the reference models: the bytes a training forward leaves
// allocated for backward on one rank, which the engine reports as "memory": {"activations"}
// and `tessera estimate-memory` predicts. Counted from what each op keeps for its backward:
//
//   per transformer layer (GPT-2 and BERT alike), R rows of the replicated region (B*T, or
//   B*T/N with sequence parallelism), B*T rows of the split one, N tensor-parallel ranks:
//     model dtype:  4 R C   (the layer's input, both LayerNorms' inputs or outputs feeding
//                            the next op, the residual sum)
//                 + (5 B*T*C + 2 B*T*I) / N   (q, k, v, the attention output and its
//                            merged heads; the MLP's input to and output of GeLU)
//     float32:      4 R (two LayerNorms' mean and 1/std) + B*T*H/N (attention's logsumexp)
//
// No B*T*T term: attention keeps its logsumexp, not its probabilities, and dropout keeps no
// mask (backward draws it again from the Philox stream). Activation checkpointing keeps one
// input per checkpoint instead of the layers' tensors (with partition_activations, this
// rank's 1/N of it; with cpu_checkpointing on a GPU, none on the device). Each tensor is
// counted in the allocator's 64-byte blocks.
//
// With the transformer kernel (a config's transformer_kernel options), per layer:
//   normalize_invertible     - 2 R C           gelu_checkpoint   - B*T*I/N
//   BERT's joined q|k|v weight kept by its GEMM: + 3 C^2/N
//   attn_dropout_ratio: nothing (the fused attention draws its mask again in backward; on
//   CUDA, until its kernel takes dropout, the probabilities are kept: 2 B*H*T*T/N more)
//
// With FP8 (the "fp8" section), each linear keeps its input's and weight's FP8 numbers (in
// the model's dtype) instead of the input: per layer + (4 C^2 + 2 C I)/N of weights; BERT's
// q, k, v each keep their own copy of the layer's input (+ 2 R C), and the attention output's
// linear a copy where the heads were not merged (+ B*T*C/N). With sequence parallelism the
// column-parallel linears keep their input chunk, as without FP8, and no FP8 numbers.
//
// MoE layers (the "moe" section) keep their gate's tensors, the dispatch indices and what their
// experts keep instead of the dense MLP's GeLU pair, counting every route as kept (exact when
// every capacity buffer is full, an upper bound otherwise): docs/moe.md, "Activation memory".
#pragma once
#include <cstdint>

#include "tessera/dtype.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"

namespace tessera::models {

struct ActivationPlan {
  int64_t batch = 1;     // micro-batch rows on this rank
  int64_t sequence = 1;  // tokens per row
  int64_t tensor_parallel = 1;
  bool sequence_parallel = false;
  int64_t layers_per_checkpoint = 0;  // 0: no activation checkpointing
  bool partition_activations = false;
  bool checkpoints_on_host = false;  // cpu_checkpointing on a GPU
  DType dtype = DType::Float32;      // the model's
  bool fp8 = false;                  // the layers' linears through FP8 (the "fp8" section)
};

struct ActivationBytes {
  int64_t embeddings = 0, layers = 0, head = 0;  // head: final norm, logits, loss
  int64_t total() const { return embeddings + layers + head; }
};

ActivationBytes gpt2_activation_bytes(const GPT2Config& c, const ActivationPlan& plan);
// With the next-sentence head when `nsp`; batches carry token types and an attention mask
// (as the built-in data gives them).
ActivationBytes bert_activation_bytes(const BertConfig& c, bool nsp, const ActivationPlan& plan);

// One micro-batch's bytes on the pipeline stage that holds positions [first, last) of
// gpt2_pipeline_layers(c): what its layers keep for backward and its output, not the input it
// received (the previous stage's). With plan.layers_per_checkpoint k, the stage's blocks run
// in checkpoints of up to k, each keeping its output alone beyond the input it shares. A
// stage of a 1F1B pipeline holds min(micro-batches, stages - stage) of these at once.
int64_t gpt2_pipeline_stage_bytes(const GPT2Config& c, const ActivationPlan& plan, int64_t first,
                                  int64_t last);
// The same for bert_pipeline_layers(c, nsp).
int64_t bert_pipeline_stage_bytes(const BertConfig& c, bool nsp, const ActivationPlan& plan,
                                  int64_t first, int64_t last);

}  // namespace tessera::models
