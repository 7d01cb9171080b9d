// What each op of the reference models keeps for backward, tensor by tensor. The comments name
// the op that keeps each one; tests/tools/activation_checkpointing.sh and
// tests/tools/transformer_kernel.sh check the sums against what the engine measures.
#include "tessera/models/activation_memory.h"

#include <algorithm>

#include "tessera/error.h"
#include "tessera/nn/moe_gating.h"

namespace tessera::models {

namespace {

constexpr int64_t kFloat32 = 4, kInt64 = 8, kBool = 1;

// Bytes of one tensor of `elems` elements, in the allocator's 64-byte blocks.
int64_t tensor_bytes(int64_t elems, int64_t itemsize) {
  const int64_t bytes = elems * itemsize;
  return (bytes + 63) / 64 * 64;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct Sizes {
  int64_t B, T, N, R, n, b;  // rows, tokens, B*T, replicated-region rows, ranks, dtype bytes
};

Sizes sizes_of(const ActivationPlan& p, const char* model) {
  TS_CHECK(p.batch >= 1 && p.sequence >= 1 && p.tensor_parallel >= 1, model,
           " activation memory: batch, sequence and tensor_parallel must be >= 1");
  TS_CHECK(!p.sequence_parallel || p.sequence % p.tensor_parallel == 0, model,
           " activation memory: a sequence of ", p.sequence, " tokens does not divide among ",
           p.tensor_parallel, " ranks");
  const int64_t N = p.batch * p.sequence;
  return {p.batch,
          p.sequence,
          N,
          p.sequence_parallel ? N / p.tensor_parallel : N,
          p.tensor_parallel,
          static_cast<int64_t>(itemsize(p.dtype))};
}

// What the transformer kernel's options change in one layer (models/transformer_kernel.h):
// BERT's joined q|k|v weight, kept by its GEMM; LayerNorms keeping their outputs (kept by the
// next op anyway) instead of their inputs; GELU's output recomputed. Attention dropout changes
// nothing: the fused attention applies it and keeps no probabilities.
int64_t kernel_bytes(const Sizes& s, const std::optional<nn::TransformerKernelOptions>& k,
                     int64_t C, int64_t I, bool joined_qkv) {
  if (!k) return 0;
  int64_t bytes = joined_qkv ? tensor_bytes(3 * C * C / s.n, s.b) : 0;
  if (k->normalize_invertible) bytes -= 2 * tensor_bytes(s.R * C, s.b);
  if (k->gelu_checkpoint) bytes -= tensor_bytes(s.N * I / s.n, s.b);
  return bytes;
}

// Merging the heads copies the attention output unless it is already [B, T, C] in memory
// (one head per rank, or one token).
int64_t heads_merged(const Sizes& s, int64_t H) {
  return H / s.n > 1 && s.T > 1 ? 1 : 0;
}

// What FP8 linears keep beyond the same layer in the model's dtype (activation_memory.h):
// their weights' FP8 numbers, and copies of inputs another op keeps as well. `separate_qkv`:
// BERT's three q, k, v linears over one input (GPT-2 has one c_attn).
int64_t fp8_bytes(const Sizes& s, const ActivationPlan& p, int64_t C, int64_t I, int64_t H,
                  bool separate_qkv) {
  if (!p.fp8) return 0;
  const int64_t n = s.n, w = tensor_bytes(C * C / n, s.b);
  // Row-parallel: the attention output's linear and the MLP's second.
  int64_t bytes =
      w + tensor_bytes(C * I / n, s.b) + (1 - heads_merged(s, H)) * tensor_bytes(s.N * C / n, s.b);
  if (p.sequence_parallel) return bytes;  // (the column-parallel ones keep no FP8 numbers)
  bytes += tensor_bytes(I * C / n, s.b);  // the MLP's first
  if (!separate_qkv) return bytes + tensor_bytes(3 * C * C / n, s.b);
  return bytes + 3 * w + 2 * tensor_bytes(s.R * C, s.b);
}

// One transformer layer (GPT-2's block or BERT's layer): C hidden, I inner, H heads; `kernel`
// what the transformer kernel's options change (kernel_bytes) and FP8 adds (fp8_bytes).
int64_t layer_bytes(const Sizes& s, int64_t C, int64_t I, int64_t H, int64_t kernel) {
  const int64_t N = s.N, R = s.R, n = s.n;
  const int64_t merged = heads_merged(s, H);
  return 4 * tensor_bytes(R * C, s.b)                   // input, two LayerNorm tensors, residual
         + (4 + merged) * tensor_bytes(N * C / n, s.b)  // attention: q, k, v, output; merged
         + 2 * tensor_bytes(N * I / n, s.b)             // MLP: GeLU's input and output
         + 4 * tensor_bytes(R, kFloat32)                // two LayerNorms' mean and 1/std
         + tensor_bytes(N * H / n, kFloat32)            // attention's logsumexp
         + kernel;
}

// The stack of `L` layers, or the inputs its checkpoints keep.
int64_t stack_bytes(const Sizes& s, const ActivationPlan& p, int64_t L, int64_t C, int64_t I,
                    int64_t H, int64_t kernel) {
  if (p.layers_per_checkpoint <= 0) return L * layer_bytes(s, C, I, H, kernel);
  if (p.checkpoints_on_host) return 0;
  const int64_t checkpoints = ceil_div(L, p.layers_per_checkpoint);
  const bool split = p.partition_activations && s.n > 1 && !p.sequence_parallel;
  return checkpoints *
         (split ? tensor_bytes(ceil_div(s.R * C, s.n), s.b) : tensor_bytes(s.R * C, s.b));
}

// One MoE layer's gate over N tokens in G groups of S (nn/moe_gating.cpp, float32): each
// group's softmax and one-hot route masks [S, E], l_aux's reductions over E experts and their
// scalars; top-2's two route gates, their guarded sum and its mask [S]. Jitter multiplies a
// float32 copy of the input by noise [N, M] and keeps both factors.
int64_t moe_gate_bytes(const Sizes& s, const parallel::MoEOptions& o, int64_t M) {
  const int64_t E = o.num_experts, G = o.gating_groups, S = s.N / G, k = o.gate.k;
  const int64_t scalar = tensor_bytes(1, kFloat32), per_expert = tensor_bytes(E, kFloat32);
  int64_t group = (1 + k) * tensor_bytes(S * E, kFloat32) + 3 * per_expert;
  group +=
      k == 1 ? 3 * scalar : 5 * scalar + 3 * tensor_bytes(S, kFloat32) + tensor_bytes(S, kBool);
  const int64_t copy = tensor_bytes(s.N * M, kFloat32);
  int64_t bytes = G * group + (G > 1 ? 2 * scalar : 0);  // (l_aux's mean over the groups)
  if (o.gate.noisy_gate_policy == nn::NoisyGatePolicy::Jitter) bytes += 2 * copy;
  if (s.b != kFloat32) bytes += copy + tensor_bytes(E * M, kFloat32);  // float32 input, wg
  return bytes;
}

// What one MoE layer keeps beyond the dense layer it replaces, whose MLP's GeLU input and output
// it does not have (parallel/moe.cpp): the gate; the dispatch and return indices over G x E x
// capacity slots; the rows routed to this rank's L = E / P experts, their indices and each
// expert's GeLU pair; per route the combine's indices, float32 rows and gates; PR-MoE's
// residual MLP and mix. The rows are an upper bound: every route kept (at most min(capacity, S)
// a group per expert), so the bytes are exact when no route is dropped.
int64_t moe_layer_bytes(const Sizes& s, const parallel::MoEOptions& o, int64_t P, int64_t M,
                        int64_t I, bool gelu_checkpoint) {
  // (gelu_checkpoint: GPT-2's experts and the dense MLP keep GeLU's input alone.)
  const int64_t E = o.num_experts, G = o.gating_groups, S = s.N / G, k = o.gate.k, L = E / P;
  const int64_t capacity =
      o.gate.drop_tokens ? nn::moe_capacity(S, E, static_cast<double>(k) * o.gate.capacity_factor,
                                            o.gate.min_capacity)
                         : S;  // (the largest load, at most every token)
  const int64_t slots = G * E * capacity;
  const int64_t rows = P * G * std::min(k * S, L * std::min(capacity, S));
  // Each expert's GeLU tensors in their own blocks: rows x I in all, L blocks' rounding.
  const int64_t gelu = tensor_bytes(rows * I, s.b) + (I * s.b % 64 != 0 ? 64 * (L - 1) : 0);
  int64_t bytes = moe_gate_bytes(s, o, M) + 2 * tensor_bytes(slots, kInt64) +
                  tensor_bytes(rows, kInt64) + tensor_bytes(rows * M, s.b) +
                  (gelu_checkpoint ? 1 : 2) * gelu +
                  k * (tensor_bytes(s.N, kInt64) + tensor_bytes(s.N * M, kFloat32) +
                       tensor_bytes(s.N, kFloat32));
  if (o.use_residual)  // the mix's softmax, the combine's output, the MLP's GeLU pair and output
    bytes += tensor_bytes(2 * s.N, s.b) + 2 * tensor_bytes(s.N * M, s.b) +
             (gelu_checkpoint ? 1 : 2) * tensor_bytes(s.N * I, s.b);
  else if (s.b != kFloat32)  // the layer's input is kept as its float32 copy alone
    bytes -= tensor_bytes(s.N * M, s.b);
  return bytes - (gelu_checkpoint ? 1 : 2) * tensor_bytes(s.N * I / s.n, s.b);
}

// FP8 in a MoE layer beyond what fp8_bytes counts for the dense MLP it replaces: each expert's
// (and the residual MLP's) two weights' FP8 numbers; an expert's FP8 inputs take the place of
// its rows (in blocks of their own), the residual MLP's input copy adds to the input the
// mix keeps.
int64_t moe_fp8_bytes(const Sizes& s, const parallel::MoEOptions& o, int64_t P, int64_t M,
                      int64_t I) {
  const int64_t L = o.num_experts / P, weights = 2 * tensor_bytes(M * I, s.b);
  int64_t bytes = L * weights - 2 * tensor_bytes(M * I / s.n, s.b);
  if (M * s.b % 64 != 0) bytes += 64 * (L - 1);
  if (o.use_residual) bytes += weights + tensor_bytes(s.N * M, s.b);
  return bytes;
}

// The MoE layers of a stack of L layers beyond their dense count, and their load-balancing
// losses: each layer's l_aux (kept by its layer), their sum and its coefficient (the loss).
int64_t moe_stack_bytes(const Sizes& s, const ActivationPlan& p,
                        const std::optional<MoELayout>& moe, int64_t L, int64_t M, int64_t I,
                        bool gelu_checkpoint) {
  if (!moe) return 0;
  const int64_t scalar = tensor_bytes(1, kFloat32);
  int64_t bytes = 0, layers = 0;
  for (int64_t l = 0; l < L; ++l) {
    if (!moe->is_moe_layer(l)) continue;
    ++layers;
    if (p.layers_per_checkpoint <= 0)
      bytes += moe_layer_bytes(s, moe->layer_options(l), moe->ep_size, M, I, gelu_checkpoint) +
               (p.fp8 ? moe_fp8_bytes(s, moe->layer_options(l), moe->ep_size, M, I) : 0);
  }
  return bytes + (layers + (layers > 1 ? 1 : 0) + 1) * scalar;
}

// The loss over a vocabulary of V: cross-entropy keeps the logits and each row's logsumexp;
// the vocabulary-parallel one keeps its softmax shard, each row's target column and weight.
int64_t loss_bytes(const Sizes& s, int64_t V) {
  const int64_t scalars = 2 * tensor_bytes(1, kFloat32);  // the loss, the target count
  if (s.n == 1) return tensor_bytes(s.N * V, s.b) + tensor_bytes(s.N, kFloat32) + scalars;
  return tensor_bytes(s.N * ceil_div(V, s.n), s.b) + tensor_bytes(s.N, kInt64) +
         tensor_bytes(s.N, s.b) + scalars;
}

// A vocabulary-parallel embedding keeps its local ids and its rows' out-of-shard mask.
int64_t vocab_parallel_lookup_bytes(const Sizes& s) {
  return s.n == 1 ? 0 : tensor_bytes(s.N, kInt64) + tensor_bytes(s.N, kBool);
}

}  // namespace

ActivationBytes gpt2_activation_bytes(const GPT2Config& c, const ActivationPlan& p) {
  const Sizes s = sizes_of(p, "GPT-2");
  const int64_t C = c.n_embd, I = c.n_inner ? c.n_inner : 4 * c.n_embd;
  ActivationBytes a;
  // The position ids (this rank's chunk with sequence parallelism) kept by wpe's lookup.
  a.embeddings =
      vocab_parallel_lookup_bytes(s) + tensor_bytes(p.sequence_parallel ? s.T / s.n : s.T, kInt64);
  const bool gelu_checkpoint = c.transformer_kernel && c.transformer_kernel->gelu_checkpoint;
  a.layers = stack_bytes(
      s, p, c.n_layer, C, I, c.n_head,
      kernel_bytes(s, c.transformer_kernel, C, I, false) + fp8_bytes(s, p, C, I, c.n_head, false));
  a.layers += moe_stack_bytes(s, p, c.moe, c.n_layer, C, I, gelu_checkpoint);
  // ln_f: its input and output (the tied head's input), mean and 1/std; then the loss.
  a.head = 2 * tensor_bytes(s.R * C, s.b) + 2 * tensor_bytes(s.R, kFloat32) +
           loss_bytes(s, c.vocab_size);
  return a;
}

ActivationBytes bert_activation_bytes(const BertConfig& c, bool nsp, const ActivationPlan& p) {
  const Sizes s = sizes_of(p, "BERT");
  const int64_t C = c.hidden_size;
  ActivationBytes a;
  // Position ids; token types (a copy of this rank's chunk with sequence parallelism); the
  // attention mask as bool; the LayerNorm's input, mean and 1/std.
  a.embeddings = vocab_parallel_lookup_bytes(s) +
                 tensor_bytes(p.sequence_parallel ? s.T / s.n : s.T, kInt64) +
                 (p.sequence_parallel ? tensor_bytes(s.R, kInt64) : 0) + tensor_bytes(s.N, kBool) +
                 tensor_bytes(s.R * C, s.b) + 2 * tensor_bytes(s.R, kFloat32);
  const int64_t I = c.intermediate_size, H = c.num_attention_heads;
  a.layers = stack_bytes(
      s, p, c.num_hidden_layers, C, I, H,
      kernel_bytes(s, c.transformer_kernel, C, I, true) + fp8_bytes(s, p, C, I, H, true));
  a.layers += moe_stack_bytes(s, p, c.moe, c.num_hidden_layers, C, I, false);
  // The MLM transform: the dense layer's input and output, GeLU's output, the LayerNorm's
  // output (the head's input), mean and 1/std; then the loss.
  a.head = 4 * tensor_bytes(s.R * C, s.b) + 2 * tensor_bytes(s.R, kFloat32) +
           loss_bytes(s, c.vocab_size);
  if (nsp) {
    // The pooler's first tokens (gathered from each rank with sequence parallelism), its
    // tanh output, the two logits per row and their logsumexp, the summed loss.
    a.head += (p.sequence_parallel ? tensor_bytes(s.B * s.n * C, s.b) : 0) +
              tensor_bytes(s.B * C, s.b) + tensor_bytes(2 * s.B, s.b) +
              tensor_bytes(s.B, kFloat32) + 2 * tensor_bytes(1, kFloat32);
  }
  return a;
}

int64_t gpt2_pipeline_stage_bytes(const GPT2Config& c, const ActivationPlan& p, int64_t first,
                                  int64_t last) {
  const Sizes s = sizes_of(p, "GPT-2 pipeline");
  const int64_t C = c.n_embd, I = c.n_inner ? c.n_inner : 4 * c.n_embd, L = c.n_layer;
  TS_CHECK(0 <= first && first < last && last <= L + 3,
           "GPT-2 pipeline activation memory: ", "layers [", first, ", ", last, ") of ", L + 3);
  const int64_t hidden = tensor_bytes(s.R * C, s.b);
  int64_t bytes = 0, blocks = 0;
  for (int64_t i = first; i < last; ++i) {
    if (i == 0)  // (tensor parallel: the local ids and mask); the position ids; the output
      bytes += vocab_parallel_lookup_bytes(s) +
               tensor_bytes(p.sequence_parallel ? s.T / s.n : s.T, kInt64) + hidden;
    else if (i <= L)
      ++blocks;
    else if (i == L + 1)
      bytes += hidden + 2 * tensor_bytes(s.R, kFloat32);  // ln_f's output, mean and 1/std
    else  // the tied head's logits; the loss (vocabulary-parallel: its output the one scalar)
      bytes += loss_bytes(s, c.vocab_size) - (s.n > 1 ? tensor_bytes(1, kFloat32) : 0);
  }
  // A block keeps layer_bytes less its input (counted where it was made: the previous layer's
  // output, or the received value), plus its output: layer_bytes in all.
  if (p.layers_per_checkpoint <= 0)
    return bytes + blocks * layer_bytes(s, C, I, c.n_head,
                                        kernel_bytes(s, c.transformer_kernel, C, I, false) +
                                            fp8_bytes(s, p, C, I, c.n_head, false));
  return bytes + ceil_div(blocks, p.layers_per_checkpoint) * hidden;
}

int64_t bert_pipeline_stage_bytes(const BertConfig& c, bool nsp, const ActivationPlan& p,
                                  int64_t first, int64_t last) {
  const Sizes s = sizes_of(p, "BERT pipeline");
  const int64_t C = c.hidden_size, L = c.num_hidden_layers;
  TS_CHECK(0 <= first && first < last && last <= L + 4,
           "BERT pipeline activation memory: ", "layers [", first, ", ", last, ") of ", L + 4);
  // (Tensor parallel: this rank's vocabulary columns.)
  const int64_t hidden = tensor_bytes(s.R * C, s.b),
                logits = tensor_bytes(s.N * ceil_div(c.vocab_size, s.n), s.b);
  const int64_t stats = 2 * tensor_bytes(s.R, kFloat32), scalar = tensor_bytes(1, kFloat32);
  int64_t bytes = 0, layers = 0;
  for (int64_t i = first; i < last; ++i) {
    if (i == 0) {  // position ids (sequence parallel: this chunk's, and a copy of its token
                   // types); the LayerNorm's input, mean and 1/std; the output
      bytes += vocab_parallel_lookup_bytes(s) +
               tensor_bytes(p.sequence_parallel ? s.T / s.n : s.T, kInt64) +
               (p.sequence_parallel ? tensor_bytes(s.R, kInt64) : 0) + 2 * hidden + stats;
    } else if (i <= L) {
      ++layers;
    } else if (i == L + 1) {  // the MLM transform's dense output, GeLU's, the LayerNorm's
      bytes += 3 * hidden + stats;
      // The pooler's tanh output and the next-sentence logits (sequence parallel: after the
      // first tokens gathered from each rank).
      if (nsp)
        bytes += (p.sequence_parallel ? tensor_bytes(s.B * s.n * C, s.b) : 0) +
                 tensor_bytes(s.B * C, s.b) + tensor_bytes(2 * s.B, s.b);
    } else if (i == L + 2) {  // the decoder's logits: freed by the bias's add unless sent on
      if (i == last - 1) bytes += logits;
    } else {  // the biased logits, each row's logsumexp, two scalars (the loss and its target
              // count, or with data-parallel weights the summed loss and its weighted value)
      bytes += s.n == 1 ? logits + tensor_bytes(s.N, kFloat32) + 2 * scalar
                        : loss_bytes(s, c.vocab_size);
      // The next-sentence loss: each row's logsumexp, its loss and count, and the sum.
      if (nsp) bytes += tensor_bytes(s.B, kFloat32) + 3 * scalar;
    }
  }
  const int64_t I = c.intermediate_size, H = c.num_attention_heads;
  // FP8: a stage's first layer keeps three FP8 copies of the input it received (fp8_bytes
  // counts two beyond the input, which the stage does not count as its own).
  if (p.fp8 && !p.sequence_parallel && 1 <= first && first <= L && p.layers_per_checkpoint <= 0)
    bytes += hidden;
  if (p.layers_per_checkpoint <= 0)
    return bytes + layers * layer_bytes(s, C, I, H,
                                        kernel_bytes(s, c.transformer_kernel, C, I, true) +
                                            fp8_bytes(s, p, C, I, H, true));
  return bytes + ceil_div(layers, p.layers_per_checkpoint) * hidden;
}

}  // namespace tessera::models
