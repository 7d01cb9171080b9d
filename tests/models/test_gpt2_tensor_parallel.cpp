// GPT-2 in tensor parallel on N ranks (this suite runs alone and under mpirun -np 2 and 4)
// reproduces GPT2LMHeadModel on one process, dropout on, a padded vocabulary and sequence
// parallelism included:
// the loss and every gradient (each rank's shard of the whole model's), then three SGD steps'
// losses and the weights they reach, all to 1e-6 relative (the tensor's norm).
#include <doctest/doctest.h>

#include <cmath>

#include "relative_error.h"
#include "tessera/grad_mode.h"
#include "tessera/models/generate.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/tensor_parallel_layout.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

// The whole gradient's part this rank's shard of `name` holds.
Tensor shard_of(const std::string& name, const Tensor& whole, int64_t C, int64_t n, int64_t r,
                int64_t padded_vocab) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  const int64_t cn = C / n;
  if (has("wte.")) {
    const int64_t per = padded_vocab / n;
    Tensor padded = cat({whole, zeros({padded_vocab - whole.size(0), C})}, 0);
    return padded.narrow(0, r * per, per);
  }
  if (has("c_attn."))
    return cat({whole.narrow(0, r * cn, cn), whole.narrow(0, C + r * cn, cn),
                whole.narrow(0, 2 * C + r * cn, cn)},
               0);
  if (has("mlp.c_fc.")) {
    const int64_t per = whole.size(0) / n;
    return whole.narrow(0, r * per, per);
  }
  if (has("c_proj.weight")) {
    const int64_t per = whole.size(1) / n;
    return whole.narrow(1, r * per, per);
  }
  return whole;  // replicated: LayerNorms, wpe, row-parallel biases
}

}  // namespace

TEST_CASE(
    "GPT-2 tensor parallel reproduces one process (dropout, padded vocabulary, sequence "
    "parallelism, SGD steps)") {
  auto group = parallel::world();
  const int64_t n = group->size(), r = group->rank();
  // Tensor-parallel ranks hold the same rows: no data-parallel mask slicing (an engine built
  // by an earlier test case of this process may have set it).
  set_data_parallel_shard(0, 1);
  for (const auto& [vocab, sequence_parallel] :
       {std::pair<int64_t, bool>{96, false}, {97, false}, {97, true}}) {
    const int64_t v = vocab;  // (clang 14: CAPTURE's lambda)
    const bool sp = sequence_parallel;
    CAPTURE(v);
    CAPTURE(sp);
    models::GPT2Config c = models::GPT2Config::named("tiny");  // 4 heads, C 32
    c.vocab_size = v;
    c.dropout = 0.1;
    if (c.n_head % n != 0) return;
    manual_seed(5);
    models::GPT2LMHeadModel whole(c);
    manual_seed(5);
    models::GPT2LMHeadModel tp(c, {group, sp});  // the same initialisation, sharded
    const int64_t padded_vocab = tp.transformer.wte.padded_embeddings;
    CHECK(padded_vocab % n == 0);
    CHECK(padded_vocab - v < n);

    std::vector<int64_t> ids, targets;
    for (int64_t i = 0; i < 32; ++i)
      ids.push_back((i * 37 + 11) % v), targets.push_back((i * 53 + 5) % v);
    models::Batch b;
    b.input_ids = from_vector(ids, {2, 16});
    b.targets = from_vector(targets, {2, 16});
    {
      NoGradGuard no_grad;
      b.targets.select(1, 3).fill_(-100);                          // ignored targets
      b.input_ids.select(1, 0).fill_(static_cast<double>(v - 1));  // the last (padded) rank's row
    }
    auto whole_params = whole.named_parameters();
    auto tp_params = tp.named_parameters();
    REQUIRE(whole_params.size() == tp_params.size());
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      manual_seed(100 + step);  // the same dropout masks on both
      const Tensor la = whole.loss(b);
      manual_seed(100 + step);
      const Tensor lb = tp.loss(b);
      CHECK(rel_diff(lb, la.detach()) < 1e-6);
      whole.zero_grad();
      tp.zero_grad();
      la.backward();
      lb.backward();
      // Every gradient on the same weights; after the SGD steps, the losses and (below) the
      // weights, which carry the steps' float32 rounding differences.
      for (size_t i = 0; i < whole_params.size() && step == 0; ++i) {
        const std::string& name = whole_params[i].first;  // (clang 14: CAPTURE's lambda)
        const Tensor* wt = whole_params[i].second;
        CAPTURE(name);
        REQUIRE(name == tp_params[i].first);
        const Tensor want = shard_of(name, wt->grad(), c.n_embd, n, r, padded_vocab);
        const Tensor got = tp_params[i].second->grad();
        if (name.find("c_attn.bias") == std::string::npos) {
          CHECK(rel_diff(got, want) < 1e-6);
          continue;
        }
        // The attention biases' gradients are sums over every position with heavy cancellation
        // (the key bias's is 0 in exact arithmetic: softmax over keys ignores a shift every key
        // shares), so float32 rounding is a larger share of their small norms: the query and
        // value parts are compared to 2e-6 (measured: up to 1.1e-6 with clang's code), the key
        // part must be rounding noise on both sides. The weights after the SGD steps (below)
        // are held to 1e-6 like everything else.
        const int64_t third = got.size(0) / 3;
        const Tensor q_v_got = cat({got.narrow(0, 0, third), got.narrow(0, 2 * third, third)});
        const Tensor q_v_want = cat({want.narrow(0, 0, third), want.narrow(0, 2 * third, third)});
        CHECK(rel_diff(q_v_got, q_v_want) < 2e-6);

        const double scale = amax(abs(q_v_want)).item();
        CHECK(amax(abs(got.narrow(0, third, third))).item() < 1e-5 * scale);
        CHECK(amax(abs(want.narrow(0, third, third))).item() < 1e-5 * scale);
      }
      NoGradGuard no_grad;  // plain SGD on both
      for (auto& [name, t] : whole_params) t->add_(t->grad(), -0.5);
      for (auto& [name, t] : tp_params) t->add_(t->grad(), -0.5);
    }
    for (size_t i = 0; i < whole_params.size(); ++i) {
      const std::string& name = whole_params[i].first;
      const Tensor* wt = whole_params[i].second;
      CAPTURE(name);
      const Tensor want = shard_of(name, *wt, c.n_embd, n, r, padded_vocab);
      // The attention biases carry their gradients' cancellation (above) into the weights:
      // 2e-6 for them (measured: h.0.attn.c_proj.bias 1.11e-6 with OpenBLAS's AVX-512 kernels,
      // under 1e-6 with its Haswell ones), 1e-6 for everything else.
      const bool attention_bias = name.find(".attn.") != std::string::npos && name.size() > 5 &&
                                  name.substr(name.size() - 5) == ".bias";
      CHECK(rel_diff(*tp_params[i].second, want) < (attention_bias ? 2e-6 : 1e-6));
    }
  }
  if (n > 1) {
    models::GPT2Config bad = models::GPT2Config::named("tiny");
    bad.n_head = 2;
    bad.n_embd = 32;
    if (bad.n_head % n != 0)
      CHECK_THROWS_WITH_AS(models::GPT2LMHeadModel(bad, {group}),
                           doctest::Contains("n_head 2 does not divide"), Error);
  }
}

TEST_CASE("GPT-2 tensor parallel generates one process's tokens (each rank caches its heads)") {
  auto group = parallel::world();
  models::GPT2Config c = models::GPT2Config::named("tiny");  // 4 heads
  c.vocab_size = 97;  // padded on 2 and 4 ranks: the gathered logits drop the padding
  c.dropout = 0.0;
  if (c.n_head % group->size() != 0) return;
  manual_seed(11);
  models::GPT2LMHeadModel whole(c);
  manual_seed(11);
  models::GPT2LMHeadModel tp(c, {group});
  const std::vector<std::vector<int64_t>> prompts{{4, 8, 15, 16}, {23, 42}};
  for (const double temperature : {0.0, 0.8}) {
    CAPTURE(temperature);
    models::GenerateOptions o;
    o.max_new_tokens = 12, o.temperature = temperature, o.top_k = 20, o.seed = 3;
    NoGradGuard no_grad;
    const auto want = models::generate_batch(whole, prompts, o);
    CHECK(models::generate_batch(tp, prompts, o) == want);
    CHECK(models::generate(tp, prompts[0], o) == models::generate(whole, prompts[0], o));
  }
  // The whole logits on every rank: [B, T, vocab], the padding columns gone.
  models::Batch b;
  b.input_ids = from_vector(std::vector<int64_t>{1, 2, 3, 96}, {1, 4});
  NoGradGuard no_grad;
  const Tensor got = tp.logits(b), want = whole.logits(b);
  REQUIRE(got.shape() == want.shape());
  CHECK(rel_diff(got, want) < 1e-6);
}

TEST_CASE("tensor-parallel layout: hand-derived shards (fused blocks, padding) and merges") {
  // [6, 2] of 3 fused blocks (q|k|v) of 2 rows over 2 ranks: rank 0 holds rows 0, 2, 4.
  const Tensor qkv = arange(0, 12, 1, DType::Float32).view({6, 2});
  const parallel::TensorParallelSplit fused{0, 3, 6};
  const Tensor r0 = parallel::shard_of_whole(qkv, fused, 0, 2);
  const Tensor r1 = parallel::shard_of_whole(qkv, fused, 1, 2);
  CHECK(r0.to_vector() == std::vector<double>{0, 1, 4, 5, 8, 9});
  CHECK(r1.to_vector() == std::vector<double>{2, 3, 6, 7, 10, 11});
  CHECK(parallel::whole_from_shards({r0, r1}, fused).to_vector() == qkv.to_vector());
  // 5 rows over 2 ranks: 3 each, the last one zero padding.
  const Tensor rows = arange(1, 6, 1, DType::Float32).view({5, 1});
  const parallel::TensorParallelSplit padded{0, 1, 5};
  const Tensor p1 = parallel::shard_of_whole(rows, padded, 1, 2);
  CHECK(p1.to_vector() == std::vector<double>{4, 5, 0});
  CHECK(parallel::whole_from_shards({parallel::shard_of_whole(rows, padded, 0, 2), p1}, padded)
            .to_vector() == rows.to_vector());
  // Columns (a row-parallel weight): [2, 4] over 4 ranks, column r on rank r.
  const Tensor w = arange(0, 8, 1, DType::Float32).view({2, 4});
  CHECK(parallel::shard_of_whole(w, {1, 1, 4}, 2, 4).to_vector() == std::vector<double>{2, 6});
  CHECK_THROWS_WITH_AS(parallel::shard_of_whole(qkv, {0, 3, 6}, 0, 4),
                       doctest::Contains("3 fused blocks of 2 do not divide among 4 ranks"), Error);
  CHECK_THROWS_WITH_AS(parallel::whole_from_shards({r0, r1.narrow(0, 0, 2)}, fused),
                       doctest::Contains("should have 3 along dim 0 (6 over 2 ranks)"), Error);
  const auto back = parallel::layout_from_json(
      parallel::layout_to_json({{"a.weight", fused}, {"b.weight", padded}}), "test");
  CHECK(back.at("a.weight").stride == 3);
  CHECK(back.at("b.weight").size == 5);
  CHECK_THROWS_WITH_AS(parallel::layout_from_json(nlohmann::json{{"a", {{"dim", -1}}}}, "test"),
                       doctest::Contains("test: 'a'"), Error);
}

TEST_CASE("tensor-parallel layout: GPT-2's shards all-gathered and merged are the whole model") {
  auto group = parallel::world();
  const int n = group->size(), r = group->rank();
  models::GPT2Config c = models::GPT2Config::named("tiny");
  c.vocab_size = 97;  // padded on 2 and 4 ranks
  if (c.n_head % n != 0) return;
  manual_seed(9);
  models::GPT2LMHeadModel whole(c);
  manual_seed(9);
  models::GPT2LMHeadModel tp(c, {group});
  const parallel::TensorParallelLayout layout = parallel::tensor_parallel_layout(tp);
  if (n == 1) {
    CHECK(layout.empty());  // one rank: plain layers, nothing split
  } else {
    // Split: c_attn (stride 3) and c_fc weights and biases, both c_proj weights, wte.
    CHECK(layout.size() == static_cast<size_t>(6 * c.n_layer + 1));
    CHECK(layout.at("transformer.h.0.attn.c_attn.weight").stride == 3);
    CHECK(layout.at("transformer.wte.weight").size == 97);
    CHECK(layout.count("transformer.h.0.attn.c_proj.bias") == 0);  // replicated
  }
  // Every rank's state, gathered to every rank, merges into the whole model's, bit for bit.
  std::vector<std::map<std::string, Tensor>> ranks(static_cast<size_t>(n));
  for (const auto& [name, t] : tp.state_dict()) {
    Tensor all = Tensor::empty(Shape{n * t.numel()}, t.dtype());
    group->all_gather_async(all, t.contiguous().reshape({-1})).wait();
    for (int q = 0; q < n; ++q)
      ranks[static_cast<size_t>(q)][name] = all.narrow(0, q * t.numel(), t.numel()).view(t.shape());
  }
  const auto merged = parallel::merge_states(ranks, layout);
  const auto want = whole.state_dict();
  CHECK(merged.size() == want.size());
  for (const auto& [name, t] : want) {
    const std::string& key = name;  // (clang 14: CAPTURE's lambda)
    CAPTURE(key);
    REQUIRE(merged.count(name));
    CHECK(merged.at(name).to_vector() == t.to_vector());
  }
  // And the whole state sharded again is this rank's.
  const auto mine = parallel::shard_state(want, layout, r, n);
  for (const auto& [name, t] : tp.state_dict()) CHECK(mine.at(name).to_vector() == t.to_vector());
}

TEST_SUITE_END();
