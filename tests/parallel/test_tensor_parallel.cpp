// Tensor-parallel layers on N ranks reproduce one process (1e-6 relative, float32): a
// column-parallel -> GELU -> row-parallel block against the whole layers' forward and
// gradients, and the scatter/gather functions' round trip and gradients.
#include <doctest/doctest.h>

#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/nn/layers.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/vocab_parallel.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {
void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  CAPTURE(what);
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector(), w = want.to_vector();
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  CHECK(worst / scale < 1e-6);
}

struct Whole : nn::Module {
  nn::Linear fc1{this, "fc1", 8, 16}, fc2{this, "fc2", 16, 8};
};
struct Sharded : nn::Module {
  Sharded(std::shared_ptr<parallel::ProcessGroup> g)
      : fc1(this, "fc1", 8, 16, g, /*gather_output=*/false),
        fc2(this, "fc2", 16, 8, g, /*input_is_parallel=*/true) {}
  parallel::ColumnParallelLinear fc1;
  parallel::RowParallelLinear fc2;
};
}  // namespace

TEST_CASE("tensor parallel: column -> row parallel block equals the whole layers") {
  auto group = parallel::world();
  const int n = group->size(), r = group->rank();
  if (16 % n != 0) return;
  manual_seed(11);  // the same whole layers and data on every rank
  Whole whole;
  const Tensor x0 = randn({3, 5, 8});
  const Tensor v = randn({3, 5, 8});  // loss = sum(y * v)
  Sharded tp(group);
  tp.fc1.load_from_full(whole.fc1.weight, whole.fc1.bias);
  tp.fc2.load_from_full(whole.fc2.weight, whole.fc2.bias);

  Tensor xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
  const Tensor ya = whole.fc2(gelu(whole.fc1(xa)));
  const Tensor yb = tp.fc2(gelu(tp.fc1(xb)));
  check_close(yb, ya, "output");
  sum(ya * v).backward();
  sum(yb * v).backward();
  check_close(xb.grad(), xa.grad(), "input gradient");
  const int64_t h = 16 / n;
  check_close(tp.fc1.weight.grad(), whole.fc1.weight.grad().narrow(0, r * h, h), "fc1 weight");
  check_close(tp.fc1.bias.grad(), whole.fc1.bias.grad().narrow(0, r * h, h), "fc1 bias");
  check_close(tp.fc2.weight.grad(), whole.fc2.weight.grad().narrow(1, r * h, h), "fc2 weight");
  check_close(tp.fc2.bias.grad(), whole.fc2.bias.grad(), "fc2 bias (replicated)");
  CHECK(tp.fc1.weight.shape() == Shape{h, 8});
  CHECK(tp.fc2.weight.shape() == Shape{8, h});
}

TEST_CASE("tensor parallel: gathered output, split input, scatter/gather round trip") {
  auto group = parallel::world();
  const int n = group->size();
  if (16 % n != 0) return;
  manual_seed(12);
  Whole whole;
  const Tensor x0 = randn({4, 8}), v = randn({4, 16});
  nn::Module holder;
  parallel::ColumnParallelLinear col(&holder, "col", 8, 16, group, /*gather_output=*/true);
  col.load_from_full(whole.fc1.weight, whole.fc1.bias);
  Tensor xa = x0.clone().requires_grad_(true), xb = x0.clone().requires_grad_(true);
  const Tensor ya = whole.fc1(xa), yb = col(xb);
  check_close(yb, ya, "gathered column output");
  sum(ya * v).backward();
  sum(yb * v).backward();
  check_close(xb.grad(), xa.grad(), "input gradient through the gather");
  // A row-parallel layer splitting a whole input itself.
  parallel::RowParallelLinear row(&holder, "row", 16, 8, group, /*input_is_parallel=*/false);
  row.load_from_full(whole.fc2.weight, whole.fc2.bias);
  const Tensor h0 = randn({4, 16});
  Tensor ha = h0.clone().requires_grad_(true), hb = h0.clone().requires_grad_(true);
  const Tensor w8 = randn({4, 8});
  sum(whole.fc2(ha) * w8).backward();
  const Tensor zb = row(hb);
  check_close(zb, whole.fc2(h0), "row output");
  sum(zb * w8).backward();
  check_close(hb.grad(), ha.grad(), "input gradient through the scatter");
  // Round trip, and its gradient (identity).
  Tensor t = randn({2, 3, 16}).requires_grad_(true);
  const Tensor back = parallel::gather_from_tensor_parallel_region(
      parallel::scatter_to_tensor_parallel_region(t, *group), *group);
  check_close(back, t, "scatter then gather");
  sum(back * back).backward();
  check_close(t.grad(), t * 2.0, "its gradient");
  if (n > 1)
    CHECK_THROWS_WITH_AS(parallel::ColumnParallelLinear(&holder, "bad", 8, 8 * n + 1, group),
                         doctest::Contains("do not divide"), Error);
}

TEST_CASE(
    "tensor parallel: vocab-parallel embedding and tied-head cross-entropy equal one process") {
  auto group = parallel::world();
  const int n = group->size(), r = group->rank();
  const int64_t vocab = 11, dim = 6;  // padded to 12 on 2 and 4 ranks
  manual_seed(21);
  nn::Module holder;
  nn::Embedding whole(&holder, "whole", vocab, dim);
  parallel::VocabParallelEmbedding tp(&holder, "tp", vocab, dim, group);
  tp.load_from_full(whole.weight);
  CHECK(tp.padded_embeddings == (n == 1 ? 11 : 12));
  const Tensor ids = from_vector(std::vector<int64_t>{0, 10, 5, 6, 3, 3, 9, 1}, {2, 4});
  // Ignored targets and targets in every rank's range.
  const Tensor targets = from_vector(std::vector<int64_t>{1, -100, 7, 10, 0, 4, -100, 8}, {2, 4});
  Tensor proj = randn({dim, dim}).requires_grad_(true);  // between the embedding and the head

  // One process: embedding -> tanh(x proj) -> tied head -> cross-entropy.
  const Tensor ha = tanh(matmul(whole(ids), proj));
  const Tensor la = cross_entropy(linear(ha, whole.weight), targets);
  la.backward();
  const Tensor proj_grad = proj.grad().clone();
  proj.set_grad(Tensor());
  // N ranks: the same through the vocabulary-parallel pair (only this rank's logit columns).
  const Tensor hb = tanh(matmul(tp(ids), proj));
  check_close(hb, ha.detach(), "embedding output");
  const Tensor lb = parallel::vocab_parallel_cross_entropy(parallel::vocab_parallel_logits(hb, tp),
                                                           targets, *group);
  check_close(lb, la.detach(), "loss");
  lb.backward();
  const int64_t per = tp.vocab_per_rank;
  // Rank r's rows of the whole gradient, the padding row's (zero) included.
  const Tensor padded_grad =
      cat({whole.weight.grad(), zeros({tp.padded_embeddings - vocab, dim})}, 0);
  check_close(tp.weight.grad(), padded_grad.narrow(0, r * per, per),
              "tied weight gradient (lookup + head)");
  check_close(proj.grad(), proj_grad, "gradient before the head (all-reduced by the head)");
  // All targets ignored: NaN loss and zero gradients, as torch.
  const Tensor none = full({2, 4}, -100, DType::Int64);
  Tensor logits = randn({2, 4, per}).requires_grad_(true);
  const Tensor l0 = parallel::vocab_parallel_cross_entropy(logits, none, *group);
  CHECK(std::isnan(l0.item()));
  l0.backward();
  CHECK(amax(abs(logits.grad())).item() == 0.0);
  if (r == n - 1 && tp.padded_embeddings > vocab) {  // the padding column takes no probability
    const Tensor lg = parallel::vocab_parallel_logits(hb, tp);
    CHECK(std::isinf(sum(lg.narrow(2, per - 1, 1)).item()));
  }
}

TEST_CASE("sequence parallel: a pre-LayerNorm MLP block on sequence shards equals one process") {
  // x -> LayerNorm -> column (all-gathers the sequence) -> GELU -> row (reduce-scatters it)
  // -> + x, with everything outside the two GEMMs on 1/N of the sequence.
  auto group = parallel::world();
  const int n = group->size(), r = group->rank();
  const int64_t B = 2, T = 12, C = 8, H = 16;
  if (T % n != 0 || H % n != 0) return;
  manual_seed(31);
  nn::Module holder;
  nn::LayerNorm ln_whole(&holder, "ln_whole", C);
  nn::Linear fc1(&holder, "fc1", C, H), fc2(&holder, "fc2", H, C);
  nn::LayerNorm ln(&holder, "ln", C);
  {
    NoGradGuard no_grad;  // a LayerNorm that is not the identity
    ln_whole.weight.copy_(randn({C}) * 0.3 + 1.0);
    ln_whole.bias.copy_(randn({C}) * 0.1);
    ln.weight.copy_(ln_whole.weight);
    ln.bias.copy_(ln_whole.bias);
  }
  parallel::ColumnParallelLinear col(&holder, "col", C, H, group, /*gather_output=*/false,
                                     /*bias=*/true, /*sequence_parallel=*/true);
  parallel::RowParallelLinear row(&holder, "row", H, C, group, /*input_is_parallel=*/true,
                                  /*bias=*/true, /*sequence_parallel=*/true);
  col.load_from_full(fc1.weight, fc1.bias);
  row.load_from_full(fc2.weight, fc2.bias);
  const Tensor x0 = randn({B, T, C}), v = randn({B, T, C});

  Tensor xa = x0.clone().requires_grad_(true);
  const Tensor ya = fc2(gelu(fc1(ln_whole(xa)))) + xa;
  sum(ya * v).backward();

  Tensor xb = x0.clone().requires_grad_(true);
  const Tensor shard = parallel::scatter_to_sequence_parallel_region(xb, *group);
  const int64_t t = T / n;
  CHECK(shard.shape() == Shape{B, t, C});
  const Tensor yb = row(gelu(col(ln(shard)))) + shard;  // this rank's chunk of the sequence
  check_close(yb, ya.detach().narrow(1, r * t, t), "output chunk");
  sum(yb * v.narrow(1, r * t, t)).backward();
  check_close(xb.grad(), xa.grad(), "input gradient (all-gathered)");
  const int64_t h = H / n;
  check_close(col.weight.grad(), fc1.weight.grad().narrow(0, r * h, h), "column weight");
  check_close(row.weight.grad(), fc2.weight.grad().narrow(1, r * h, h), "row weight");
  // The row layer's bias arrives whole (sequence_parallel_weight); the LayerNorm, applied to
  // the chunk directly, holds partial gradients, summed over the ranks here.
  check_close(row.bias.grad(), fc2.bias.grad(), "row bias");
  parallel::allreduce_sequence_parallel_grads({ln.weight, ln.bias}, *group);
  check_close(ln.weight.grad(), ln_whole.weight.grad(), "LayerNorm weight");
  check_close(ln.bias.grad(), ln_whole.bias.grad(), "LayerNorm bias");
  // Round trips and their gradients.
  Tensor s = randn({2, T, 3}).requires_grad_(true);
  const Tensor back = parallel::gather_from_sequence_parallel_region(
      parallel::scatter_to_sequence_parallel_region(s, *group), *group);
  check_close(back, s, "scatter then gather along the sequence");
  if (n > 1) {
    CHECK_THROWS_WITH_AS(
        parallel::scatter_to_sequence_parallel_region(randn({2, T + 1, 3}), *group),
        doctest::Contains("does not divide"), Error);
    CHECK_THROWS_WITH_AS(
        parallel::RowParallelLinear(&holder, "bad", H, C, group, false, true, true),
        doctest::Contains("needs input_is_parallel"), Error);
  }
}

TEST_SUITE_END();
