// BERT in tensor parallel on N ranks (this suite runs alone and under mpirun -np 2 and 4)
// reproduces BertForPreTraining on one process: dropout on, attention mask, token types,
// next-sentence head, ignored MLM targets, a padded vocabulary (99 tokens) and sequence
// parallelism (with and without) included. The
// loss and every gradient (each rank's shard of the whole model's, cut by hand below, not
// through the layout code under test), then three SGD steps' losses and weights. In float64
// all of it to 1e-12 relative: the same computation, only summed in another order. In float32
// the losses to 1e-6; gradients and weights to 5e-6, since float32 rounding of the N-way
// partial sums is amplified in tensors whose gradient is a small sum of cancelling terms
// (measured at 4 ranks: the pooler bias 1.4e-6, after the SGD steps 3.1e-6; everything else
// within 1.1e-6).
#include <doctest/doctest.h>

#include <cmath>

#include "relative_error.h"
#include "tessera/grad_mode.h"
#include "tessera/models/bert.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

// This rank's part of the whole tensor `whole` named `name`.
Tensor shard_of(const std::string& name, const Tensor& whole, int64_t n, int64_t r) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  auto rows = [&](const Tensor& t) {  // rows split, the last padded with zeros
    const int64_t per = (t.size(0) + n - 1) / n;
    Shape pad_shape = t.shape();
    pad_shape[0] = per * n - t.size(0);
    const Tensor padded = pad_shape[0] > 0 ? cat({t, zeros(pad_shape)}, 0) : t;
    return padded.narrow(0, r * per, per);
  };
  if (has("word_embeddings.") || name == "cls.predictions.bias" || has("self.query.") ||
      has("self.key.") || has("self.value.") || has("intermediate.dense."))
    return rows(whole);
  if (has("attention.output.dense.weight") ||
      (has("layer.") && has(".output.dense.weight") && !has("attention.")))
    return whole.narrow(1, r * whole.size(1) / n, whole.size(1) / n);
  return whole;  // replicated
}

}  // namespace

TEST_CASE(
    "BERT tensor parallel reproduces one process (dropout, mask, NSP, padded vocabulary, "
    "sequence parallelism)") {
  auto group = parallel::world();
  const int64_t n = group->size(), r = group->rank();
  set_data_parallel_shard(0, 1);  // (an earlier engine in this process may have set it)
  models::BertConfig c = models::BertConfig::named("tiny");  // 4 heads, 99 tokens
  c.hidden_dropout_prob = 0.1;
  if (c.num_attention_heads % n != 0) return;
  for (const auto& [dt, sequence_parallel] : {std::pair<DType, bool>{DType::Float64, false},
                                              {DType::Float32, false},
                                              {DType::Float64, true},
                                              {DType::Float32, true}}) {
    const DType dtype = dt;  // (clang 14: CAPTURE's lambda)
    const bool sp = sequence_parallel;
    CAPTURE(dtype_name(dtype));
    CAPTURE(sp);
    const double loss_tol = dtype == DType::Float64 ? 1e-12 : 1e-6;
    const double tol = dtype == DType::Float64 ? 1e-12 : 5e-6;
    manual_seed(7);
    models::BertForPreTraining whole(c, /*with_nsp=*/true);
    manual_seed(7);
    models::BertForPreTraining tp(c, true, {group, sp});
    whole.to(dtype);
    tp.to(dtype);
    CHECK(tp.bert.embeddings.word_embeddings.padded_embeddings == (n == 1 ? 99 : 100));

    std::vector<int64_t> ids, targets, types, mask;
    for (int64_t i = 0; i < 24; ++i) {
      ids.push_back((i * 37 + 11) % 99);
      targets.push_back(i % 3 == 0 ? (i * 53 + 5) % 99 : -100);
      types.push_back(i % 12 >= 6 ? 1 : 0);
      mask.push_back(i % 12 >= 10 ? 0 : 1);
    }
    ids[1] = 98;  // the padded rank's last real row
    targets[3] = 98;
    models::Batch b;
    b.input_ids = from_vector(ids, {2, 12});
    b.targets = from_vector(targets, {2, 12});
    b.token_type_ids = from_vector(types, {2, 12});
    b.attention_mask = from_vector(mask, {2, 12});
    b.next_sentence_label = from_vector(std::vector<int64_t>{1, 0}, {2});
    auto whole_params = whole.named_parameters();
    auto tp_params = tp.named_parameters();
    REQUIRE(whole_params.size() == tp_params.size());
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      manual_seed(100 + step);
      const Tensor la = whole.loss(b);
      manual_seed(100 + step);
      const Tensor lb = tp.loss(b);
      CHECK(rel_diff(lb, la.detach()) < loss_tol);
      whole.zero_grad();
      tp.zero_grad();
      la.backward();
      lb.backward();
      for (size_t i = 0; i < whole_params.size() && step == 0; ++i) {
        const std::string& name = whole_params[i].first;
        CAPTURE(name);
        REQUIRE(name == tp_params[i].first);
        const Tensor want = shard_of(name, whole_params[i].second->grad(), n, r);
        if (name.find("self.key.bias") != std::string::npos) {
          // 0 in exact arithmetic (softmax over keys ignores a shift every key shares): both
          // sides must be rounding noise next to the query bias's gradient.
          const double scale = amax(abs(whole.named_parameters()[i - 2].second->grad())).item();
          CHECK(amax(abs(tp_params[i].second->grad())).item() < 1e-5 * scale);
          CHECK(amax(abs(want)).item() < 1e-5 * scale);
          continue;
        }
        CHECK(rel_diff(tp_params[i].second->grad(), want) < tol);
      }
      NoGradGuard no_grad;  // plain SGD on both
      for (auto& [name, t] : whole_params) t->add_(t->grad(), -0.5);
      for (auto& [name, t] : tp_params) t->add_(t->grad(), -0.5);
    }
    for (size_t i = 0; i < whole_params.size(); ++i) {
      const std::string& name = whole_params[i].first;
      CAPTURE(name);
      const Tensor want = shard_of(name, *whole_params[i].second, n, r);
      if (name.find("self.key.bias") != std::string::npos)  // (zero plus rounding noise steps)
        CHECK(amax(abs(*tp_params[i].second - want)).item() < 1e-6);
      else
        CHECK(rel_diff(*tp_params[i].second, want) < tol);
    }
    // The splits its layers give (one rank: plain layers, nothing split): per layer query,
    // key, value and intermediate weights and biases by rows, both output denses' weights by
    // columns; the word embedding and the MLM bias by the vocabulary.
    const auto built = parallel::tensor_parallel_layout(tp);
    CHECK(built.size() == (n == 1 ? 0 : static_cast<size_t>(10 * c.num_hidden_layers + 2)));
    if (n > 1) {
      const std::string l = "bert.encoder.layer.1.";
      CHECK(built.at(l + "attention.self.key.bias").dim == 0);
      CHECK(built.at(l + "attention.output.dense.weight").dim == 1);
      CHECK(built.at(l + "output.dense.weight").size == c.intermediate_size);
      CHECK(built.at("cls.predictions.bias").size == 99);
      CHECK(built.at("bert.embeddings.word_embeddings.weight").size == 99);
      CHECK(built.count(l + "output.dense.bias") == 0);  // replicated
    }
  }
  if (n > 1) {
    models::BertConfig bad = c;
    bad.intermediate_size = 66;
    if (bad.intermediate_size % n != 0)
      CHECK_THROWS_WITH_AS(models::BertForPreTraining(bad, true, {group}),
                           doctest::Contains("intermediate_size 66 does not divide"), Error);
  }
}

TEST_SUITE_END();
