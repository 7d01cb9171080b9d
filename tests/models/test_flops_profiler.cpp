// The flops profiler against counts derived by hand from each architecture (the rules are in
// tessera/kernel_cost.h): GPT-2 and BERT at two sizes, per-module attribution, the report.
#include <doctest/doctest.h>

#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"
#include "tessera/nn/flops_profiler.h"
#include "tessera/ops.h"

using namespace tessera;

namespace {

struct Counts {
  int64_t flops = 0, macs = 0;
  void product(int64_t rows, int64_t in, int64_t out) {  // a linear layer or matmul
    macs += rows * in * out;
    flops += 2 * rows * in * out;
  }
  void attention(int64_t B, int64_t H, int64_t pairs_per_head, int64_t head_dim) {
    macs += B * H * pairs_per_head * 2 * head_dim;  // scores (q.k) and values (p.v)
    flops += 2 * B * H * pairs_per_head * 2 * head_dim;
  }
};

// Integers in [0, n) spread by a multiplicative step (the values do not change the count).
Tensor ints(const Shape& shape, int64_t n, int64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<int64_t>(i) * 37 + seed) % n;
  return from_vector(v, shape);
}

models::Batch token_batch(int64_t B, int64_t T, int64_t vocab, int64_t seed) {
  models::Batch b;
  b.input_ids = ints({B, T}, vocab, seed);
  b.targets = ints({B, T}, vocab, seed + 1);
  return b;
}

// GPT-2's forward and loss, op by op (models/gpt2.cpp): causal attention scores the
// T(T+1)/2 pairs at or below the diagonal.
Counts gpt2_counts(const models::GPT2Config& c, int64_t B, int64_t T) {
  const int64_t C = c.n_embd, I = c.n_inner ? c.n_inner : 4 * C, V = c.vocab_size, H = c.n_head,
                BT = B * T;
  Counts n;
  n.flops += BT * C;  // wte + wpe
  for (int64_t l = 0; l < c.n_layer; ++l) {
    n.flops += 5 * BT * C;  // ln_1
    n.product(BT, C, 3 * C);
    n.attention(B, H, T * (T + 1) / 2, C / H);
    n.product(BT, C, C);
    n.flops += BT * C;      // residual
    n.flops += 5 * BT * C;  // ln_2
    n.product(BT, C, I);
    n.flops += BT * I;  // gelu
    n.product(BT, I, C);
    n.flops += BT * C;  // residual
  }
  n.flops += 5 * BT * C;  // ln_f
  n.product(BT, C, V);    // tied head
  n.flops += BT * V + 1;  // cross-entropy's softmax, and the mean's division
  return n;
}

// BERT pretraining (models/bert.cpp): full attention (the padding mask saves no work), the
// MLM head, and next-sentence prediction through the pooler.
Counts bert_counts(const models::BertConfig& c, int64_t B, int64_t T) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size,
                H = c.num_attention_heads, BT = B * T;
  Counts n;
  n.flops += 2 * BT * C + 5 * BT * C;  // three embeddings added, LayerNorm
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (int i = 0; i < 3; ++i) n.product(BT, C, C);  // query, key, value
    n.attention(B, H, T * T, C / H);
    n.product(BT, C, C);
    n.flops += BT * C + 5 * BT * C;  // residual, LayerNorm
    n.product(BT, C, I);
    n.flops += BT * I;  // gelu
    n.product(BT, I, C);
    n.flops += BT * C + 5 * BT * C;  // residual, LayerNorm
  }
  n.product(BT, C, C);             // transform.dense
  n.flops += BT * C + 5 * BT * C;  // gelu, LayerNorm
  n.product(BT, C, V);             // decoder (tied; its bias is not counted)
  n.flops += BT * V + 1;           // MLM cross-entropy, mean
  n.product(B, C, C);              // pooler
  n.flops += B * C;                // tanh
  n.product(B, C, 2);              // seq_relationship
  n.flops += B * 2 + 1 + 1;        // NSP cross-entropy, mean, loss sum
  return n;
}

}  // namespace

TEST_CASE("flops profiler: GPT-2 at two sizes equals the analytic count") {
  struct Size {
    int64_t embd, layers, heads, inner, B, T;
    bool bias;
  };
  for (const Size s : {Size{32, 2, 4, 0, 2, 8, true}, Size{48, 3, 6, 80, 3, 12, false}}) {
    models::GPT2Config c;
    c.vocab_size = 61;
    c.n_positions = 16;
    c.n_embd = s.embd;
    c.n_layer = s.layers;
    c.n_head = s.heads;
    c.n_inner = s.inner;
    c.bias = s.bias;
    c.dropout = 0.1;  // dropout is counted as 0, training or not
    manual_seed(3);
    models::GPT2LMHeadModel model(c);
    const nn::ModelProfile p =
        nn::get_model_profile<models::Batch>(model, token_batch(s.B, s.T, c.vocab_size, 4));
    const Counts want = gpt2_counts(c, s.B, s.T);
    CAPTURE(s.embd);
    CHECK(p.macs == want.macs);
    CHECK(p.flops == want.flops);
    CHECK(p.params == model.num_parameters());
    CHECK(p.duration > 0);
  }
}

TEST_CASE("flops profiler: BERT at two sizes equals the analytic count") {
  struct Size {
    int64_t hidden, layers, heads, inner, B, T;
  };
  for (const Size s : {Size{32, 2, 4, 64, 2, 8}, Size{48, 1, 3, 96, 3, 10}}) {
    models::BertConfig c;
    c.vocab_size = 53;
    c.hidden_size = s.hidden;
    c.num_hidden_layers = s.layers;
    c.num_attention_heads = s.heads;
    c.intermediate_size = s.inner;
    c.max_position_embeddings = 16;
    manual_seed(5);
    models::BertForPreTraining model(c, true);
    models::Batch b = token_batch(s.B, s.T, c.vocab_size, 6);
    b.attention_mask = ones({s.B, s.T}, DType::Int64);
    b.attention_mask.narrow(1, s.T - 2, 2).narrow(0, 0, 1).zero_();  // padding in one row
    b.token_type_ids = ints({s.B, s.T}, 2, 7);
    b.next_sentence_label = ints({s.B}, 2, 8);
    const nn::ModelProfile p = nn::get_model_profile<models::Batch>(model, b);
    const Counts want = bert_counts(c, s.B, s.T);
    CAPTURE(s.hidden);
    CHECK(p.macs == want.macs);
    CHECK(p.flops == want.flops);
    CHECK(p.params == model.num_parameters());
  }
}

TEST_CASE("flops profiler: per-module figures and DeepSpeed's report") {
  models::GPT2Config c = models::GPT2Config::named("tiny");
  c.dropout = 0.0;
  manual_seed(1);
  models::GPT2LMHeadModel model(c);
  const int64_t B = 2, T = 8, C = c.n_embd, I = 4 * C, BT = B * T;
  const models::Batch batch = token_batch(B, T, c.vocab_size, 2);
  nn::FlopsProfiler prof(model);
  prof.start_profile();
  {
    NoGradGuard no_grad;
    nn::ModuleScope scope(model);
    model.loss(batch);
  }
  prof.stop_profile();
  // One block's MLP: c_fc, gelu, c_proj. Its parameters: two weights and two biases.
  auto& block = model.transformer.h.at<models::GPT2Block>(0);
  const auto mlp = prof.figures(*block.mlp);
  CHECK(mlp.macs == 2 * BT * C * I);
  CHECK(mlp.flops == 4 * BT * C * I + BT * I);
  CHECK(mlp.params == 2 * C * I + I + C);
  // The head's product and the loss are the model's own kernels: the root holds them.
  const auto all = prof.figures(model);
  CHECK(all.macs == gpt2_counts(c, B, T).macs);
  const auto body = prof.figures(model.transformer);
  CHECK(all.macs - body.macs == BT * C * c.vocab_size);
  // The layers' times add up within their parent's.
  CHECK(prof.figures(model.transformer.h).duration <= body.duration);

  nn::FlopsProfileOptions opt;
  opt.module_depth = 2;
  opt.top_modules = 2;
  const std::string text = prof.model_profile({}, opt);
  CHECK(text.find("-------------------------- DeepSpeed Flops Profiler ------------------------"
                  "--\nProfile Summary at step 1:") != std::string::npos);
  CHECK(text.find("depth 0:\n    params      - {'GPT2LMHeadModel': '") != std::string::npos);
  CHECK(text.find("depth 1:\n    params      - {'GPT2Model': '") != std::string::npos);
  CHECK(text.find("depth 2:") == std::string::npos);  // module_depth 2: depths 0 and 1
  CHECK(text.find("GPT2LMHeadModel(\n  ") != std::string::npos);
  CHECK(text.find("  (transformer): GPT2Model(\n    ") != std::string::npos);
  CHECK(text.find("(c_fc): Linear(") != std::string::npos);
  CHECK(text.find("% Params, ") != std::string::npos);
  // Not started: the figures are zero; after end_profile as well.
  prof.end_profile();
  CHECK(prof.total_flops() == 0);
}
