// The transformer kernel's shared pieces (nn/transformer_kernel.h): attention through explicit
// probabilities against attention written out in float64 loops (bool, additive and causal
// masks); its dropout recomputed in backward giving the same bits; a tensor-parallel rank's
// heads drawing its chunk of one process's dropout masks (forward and the recomputed
// backward); nn::LayerNorm's invertible flag.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "relative_error.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/transformer_kernel.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

using namespace tessera;

namespace {

constexpr int64_t B = 2, H = 4, T = 6, D = 3;

// softmax(q k^T scale + additive) v in float64, causal hiding key j > query i.
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const std::vector<double>& additive, double scale,
                                        bool causal) {
  const auto Q = q.to_vector(), K = k.to_vector(), V = v.to_vector();
  std::vector<double> out(static_cast<size_t>(B * H * T * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t row = (b * H + h) * T;
        std::vector<double> s(static_cast<size_t>(T));
        double top = -1e300;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += Q[(row + i) * D + d] * K[(row + j) * D + d];
          s[j] = dot * scale + additive[static_cast<size_t>(b * T + j)] +
                 (causal && j > i ? -10000.0 : 0.0);
          top = std::max(top, s[j]);
        }
        double z = 0;
        for (double& x : s) z += (x = std::exp(x - top));
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < D; ++d) out[(row + i) * D + d] += s[j] / z * V[(row + j) * D + d];
      }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

struct Inputs {
  Tensor q, k, v;
};

Inputs draw_inputs(uint64_t seed) {
  manual_seed(seed);
  return {randn({B, H, T, D}).requires_grad_(), randn({B, H, T, D}).requires_grad_(),
          randn({B, H, T, D}).requires_grad_()};
}

}  // namespace

TEST_CASE("probability_attention: float64 attention with bool, additive and causal masks") {
  const Inputs in = draw_inputs(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Row 1's last two keys are padding.
  std::vector<double> additive(static_cast<size_t>(B * T), 0.0);
  additive[static_cast<size_t>(T + T - 1)] = additive[static_cast<size_t>(T + T - 2)] = -10000.0;
  std::vector<double> keep(static_cast<size_t>(B * T));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = additive[i] == 0.0;
  const Tensor bool_mask = from_vector(keep, {B, 1, 1, T}).to(DType::Bool);
  const Tensor add_mask = from_vector(additive, {B, 1, 1, T});
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    const auto want = reference_attention(in.q, in.k, in.v, additive, scale, causal);
    for (const Tensor& mask : {bool_mask, add_mask}) {
      const Tensor out =
          nn::probability_attention(in.q, in.k, in.v, mask, scale, causal, 0.0, true, false);
      CHECK(max_abs_diff(out.to_vector(), want) < 1e-5);
    }
  }
}

TEST_CASE("probability_attention: dropout recomputed in backward gives the same bits") {
  for (const bool recompute : {false, true}) {
    CAPTURE(recompute);
    Inputs in = draw_inputs(5);
    Generator plain_gen(11), gen(11);
    const Tensor r = randn({B, H, T, D});
    const Tensor want =
        nn::probability_attention(in.q, in.k, in.v, {}, 0.5, true, 0.4, true, false, &plain_gen);
    sum(want * r).backward();
    const std::vector<Tensor> want_grads{in.q.grad(), in.k.grad(), in.v.grad()};
    Inputs again{in.q.detach().requires_grad_(), in.k.detach().requires_grad_(),
                 in.v.detach().requires_grad_()};
    const Tensor got = nn::probability_attention(again.q, again.k, again.v, {}, 0.5, true, 0.4,
                                                 true, recompute, &gen);
    CHECK(got.to_vector() == want.to_vector());
    CHECK(gen.state().offset == plain_gen.state().offset);  // drawn as far
    sum(got * r).backward();
    CHECK(again.q.grad().to_vector() == want_grads[0].to_vector());
    CHECK(again.k.grad().to_vector() == want_grads[1].to_vector());
    CHECK(again.v.grad().to_vector() == want_grads[2].to_vector());
  }
}

TEST_CASE("probability_attention: a rank's heads draw its chunk of one process's dropout") {
  // One process over all H heads; then each of 2 "tensor-parallel ranks" over its H/2 heads
  // inside a SequenceShardGuard (as the models hold it), backward run outside the guard.
  const Inputs in = draw_inputs(9);
  const Tensor r = randn({B, H, T, D});
  Generator whole_gen(21);
  const Tensor whole =
      nn::probability_attention(in.q, in.k, in.v, {}, 0.5, false, 0.3, true, false, &whole_gen);
  sum(whole * r).backward();
  for (const bool recompute : {false, true})
    for (int rank = 0; rank < 2; ++rank) {
      CAPTURE(recompute);
      CAPTURE(rank);
      const auto part = [&](const Tensor& t) { return t.narrow(1, rank * H / 2, H / 2); };
      Tensor q = part(in.q).detach().requires_grad_(), k = part(in.k).detach().requires_grad_(),
             v = part(in.v).detach().requires_grad_();
      Generator gen(21);
      Tensor out;
      {
        SequenceShardGuard heads(rank, 2);
        out = nn::probability_attention(q, k, v, {}, 0.5, false, 0.3, true, recompute, &gen);
      }
      CHECK(gen.state().offset == whole_gen.state().offset);
      CHECK(rel_diff(out, part(whole)) < 1e-6);
      sum(out * part(r)).backward();
      CHECK(rel_diff(q.grad(), part(in.q.grad())) < 1e-6);
      CHECK(rel_diff(v.grad(), part(in.v.grad())) < 1e-6);
    }
}

TEST_CASE("nn::LayerNorm invertible: the same output, gradients to rounding") {
  manual_seed(4);
  nn::Module root;
  nn::LayerNorm plain(&root, "plain", 8), inverted(&root, "inverted", 8);
  inverted.invertible = true;
  {
    NoGradGuard no_grad;
    const Tensor w = randn({8}) * 0.5 + 1.0, b = randn({8});
    for (nn::LayerNorm* ln : {&plain, &inverted}) ln->weight.copy_(w), ln->bias.copy_(b);
  }
  const Tensor x = randn({3, 5, 8}), r = randn({3, 5, 8});
  Tensor x1 = x.clone().requires_grad_(), x2 = x.clone().requires_grad_();
  const Tensor y1 = plain(x1), y2 = inverted(x2);
  CHECK(y1.to_vector() == y2.to_vector());
  sum(y1 * r).backward();
  sum(y2 * r).backward();
  CHECK(rel_diff(x2.grad(), x1.grad()) < 1e-5);
  CHECK(rel_diff(inverted.weight.grad(), plain.weight.grad()) < 1e-5);
  CHECK(rel_diff(inverted.bias.grad(), plain.bias.grad()) < 1e-5);
}
