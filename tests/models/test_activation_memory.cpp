// estimate-memory's activation count for GPT-2 124M, against the count by hand (the engine's
// measure is checked against it in tests/tools/activation_checkpointing.sh).
#include <doctest/doctest.h>

#include "tessera/models/activation_memory.h"

using namespace tessera;
using namespace tessera::models;

namespace {
// GPT-2 124M: L 12, C 768, H 12, V 50257, micro-batch 8 x 1024, float32. Every tensor below is
// a multiple of 64 bytes, so the blocks add nothing.
constexpr int64_t L = 12, C = 768, H = 12, V = 50257, B = 8, T = 1024, N = B * T;
}  // namespace

TEST_CASE("GPT-2 124M activations on one process: the hand count") {
  ActivationPlan p;
  p.batch = B;
  p.sequence = T;
  // Per layer 17 N C + 4 N + N H floats; ln_f 2 N C + 2 N; logits N V + logsumexp N; position
  // ids 8 T bytes; the loss and the target count, 64 bytes each.
  const int64_t hand =
      4 * (L * (17 * N * C + 4 * N + N * H) + 2 * N * C + 2 * N + N * V + N) + 8 * T + 128;
  CHECK(gpt2_activation_bytes(GPT2Config::named("gpt2"), p).total() == hand);
  // 6.8 GB, a quarter of it the logits: why checkpointing and tensor parallelism matter.
  CHECK(hand == 6'837'379'200);
}

TEST_CASE("GPT-2 124M activations at tp 4 with sequence parallelism and checkpointing") {
  ActivationPlan p;
  p.batch = B;
  p.sequence = T;
  p.tensor_parallel = 4;
  const int64_t R = N / 4, Vt = (V + 3) / 4;
  // tp 4: the replicated region whole, the split one a quarter; the merged heads a copy (3
  // heads per rank); the vocabulary-parallel loss keeps its softmax shard, each row's target
  // column (int64) and weight; the embedding its local ids (int64) and out-of-shard mask.
  const int64_t layer = 4 * (4 * N * C + (5 * N * C + 8 * N * C) / 4 + 4 * N + N * H / 4);
  const int64_t head = 4 * (2 * N * C + 2 * N) + 4 * N * Vt + 8 * N + 4 * N + 128;
  const int64_t embeddings = 8 * N + N + 8 * T;
  CHECK(gpt2_activation_bytes(GPT2Config::named("gpt2"), p).total() ==
        L * layer + head + embeddings);
  p.sequence_parallel = true;
  const int64_t sp_layer = 4 * (4 * R * C + (5 * N * C + 8 * N * C) / 4 + 4 * R + N * H / 4);
  const int64_t sp_head = 4 * (2 * R * C + 2 * R) + 4 * N * Vt + 8 * N + 4 * N + 128;
  CHECK(gpt2_activation_bytes(GPT2Config::named("gpt2"), p).total() ==
        L * sp_layer + sp_head + 8 * N + N + 8 * T / 4);
  // Checkpointing every 2 layers: 6 inputs of R x C, whatever partition_activations says
  // (sequence-parallel inputs are chunks already).
  p.layers_per_checkpoint = 2;
  p.partition_activations = true;
  CHECK(gpt2_activation_bytes(GPT2Config::named("gpt2"), p).layers == 6 * 4 * R * C);
  p.sequence_parallel = false;
  CHECK(gpt2_activation_bytes(GPT2Config::named("gpt2"), p).layers == 6 * 4 * N * C / 4);
}

TEST_CASE("activation memory: a sequence that does not divide is an error") {
  ActivationPlan p;
  p.sequence = 10;
  p.tensor_parallel = 4;
  p.sequence_parallel = true;
  CHECK_THROWS_WITH(gpt2_activation_bytes(GPT2Config::named("tiny"), p),
                    doctest::Contains("a sequence of 10 tokens does not divide among 4 ranks"));
}

TEST_CASE("BERT-base with the transformer kernel: each option's bytes per layer, by hand") {
  // BERT-base (L 12, C 768, I 3072, H 12) at B 8, T 128, float32; N = B T = 1024 tokens.
  constexpr int64_t BL = 12, BC = 768, BI = 3072, BB = 8, BT = 128, BN = BB * BT;
  ActivationPlan p;
  p.batch = BB;
  p.sequence = BT;
  BertConfig c = BertConfig::named("bert-base");
  c.max_position_embeddings = BT;
  const auto layers = [&](const std::optional<nn::TransformerKernelOptions>& k) {
    c.transformer_kernel = k;
    return bert_activation_bytes(c, false, p).layers;
  };
  const int64_t plain = layers(std::nullopt);
  nn::TransformerKernelOptions k;
  const int64_t joined = layers(k);
  CHECK(joined - plain == BL * 3 * BC * BC * 4);  // q|k|v joined: the weight kept by its GEMM
  k.normalize_invertible = true;
  CHECK(joined - layers(k) == BL * 2 * BN * BC * 4);  // 6.3 MB a layer
  k = {};
  k.gelu_checkpoint = true;
  CHECK(joined - layers(k) == BL * BN * BI * 4);  // 12.6 MB a layer
  // Attention dropout: the fused attention keeps no probabilities, with or without
  // attn_dropout_checkpoint.
  k = {};
  k.attn_dropout_ratio = 0.1;
  CHECK(layers(k) == joined);
  k.attn_dropout_checkpoint = true;
  CHECK(layers(k) == joined);
}
