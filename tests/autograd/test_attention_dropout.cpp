// scaled_dot_product_attention with dropout_p: the fused kernel applies the mask dropout() would
// draw over the [B, H, Tq, Tk] probabilities, so it equals softmax, dropout and matmul as
// separate ops with the same generator state (float64: forward and every gradient), with bool
// and causal masks; it keeps nothing for backward; a head shard draws its chunk of one
// process's masks; and the gradients match finite differences (float64, the same mask each time).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "relative_error.h"
#include "tessera/ops.h"
#include "tessera/rng.h"
#include "tessera/storage.h"

using namespace tessera;

namespace {

constexpr int64_t B = 2, H = 4, T = 5, D = 3;

struct Qkv {
  Tensor q, k, v;
};

Qkv leaves(const Qkv& x) {
  return {x.q.detach().requires_grad_(), x.k.detach().requires_grad_(),
          x.v.detach().requires_grad_()};
}

Qkv draw(uint64_t seed) {
  manual_seed(seed);
  return {randn({B, H, T, D}, DType::Float64), randn({B, H, T, D}, DType::Float64),
          randn({B, H, T, D}, DType::Float64)};
}

// The same attention as separate ops: hidden scores at -inf, softmax, dropout, matmul.
Tensor separate_ops(const Qkv& x, const Tensor& mask, bool causal, double p, Generator& gen) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor s = matmul(x.q, x.k.transpose(-2, -1)) * scale;
  std::vector<double> visible(static_cast<size_t>(B * T * T), 1.0);
  const auto keep = mask.defined() ? mask.to(DType::Float64).to_vector() : std::vector<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        visible[static_cast<size_t>((b * T + i) * T + j)] =
            (causal && j > i) || (!keep.empty() && keep[static_cast<size_t>(b * T + j)] == 0) ? 0
                                                                                              : 1;
  const Tensor seen = from_vector(visible, {B, 1, T, T}).to(DType::Bool);
  s = where(seen, s, full({}, -std::numeric_limits<double>::infinity(), DType::Float64));
  return matmul(dropout(softmax(s, -1), p, true, &gen), x.v);
}

}  // namespace

TEST_CASE("attention dropout: the fused kernel equals separate ops with the same mask") {
  std::vector<double> keep(static_cast<size_t>(B * T), 1.0);
  keep[static_cast<size_t>(T + T - 1)] = 0;  // row 1's last key is padding
  const Tensor mask = from_vector(keep, {B, 1, 1, T}).to(DType::Bool);
  const Qkv x = draw(2);
  const Tensor r = randn({B, H, T, D}, DType::Float64);
  for (const bool causal : {false, true})
    for (const bool masked : {false, true}) {
      CAPTURE(causal);
      CAPTURE(masked);
      const Tensor m = masked ? mask : Tensor();
      Generator ops_gen(17), fused_gen(17);
      Qkv a = leaves(x), b = leaves(x);
      const Tensor want = separate_ops(a, m, causal, 0.3, ops_gen);
      sum(want * r).backward();
      const Tensor got =
          scaled_dot_product_attention(b.q, b.k, b.v, m, causal, std::nullopt, 0.3, &fused_gen);
      CHECK(fused_gen.state().offset == ops_gen.state().offset);  // drawn as far
      CHECK(rel_diff(got, want) < 1e-12);
      sum(got * r).backward();
      CHECK(rel_diff(b.q.grad(), a.q.grad()) < 1e-12);
      CHECK(rel_diff(b.k.grad(), a.k.grad()) < 1e-12);
      CHECK(rel_diff(b.v.grad(), a.v.grad()) < 1e-12);
      // Dropout changed something (not the same as without it).
      CHECK(rel_diff(got, scaled_dot_product_attention(x.q, x.k, x.v, m, causal)) > 1e-3);
    }
}

TEST_CASE("attention dropout: nothing kept for backward beyond the attention's own") {
  manual_seed(3);
  const auto kept = [](double p) {
    Tensor q = randn({B, H, 64, 8}).requires_grad_(), k = randn({B, H, 64, 8}),
           v = randn({B, H, 64, 8});
    Allocator& memory = allocator_for(DeviceType::CPU);
    const int64_t before = memory.stats().allocated;
    const Tensor out = scaled_dot_product_attention(q, k, v, {}, false, std::nullopt, p);
    return memory.stats().allocated - before;
  };
  CHECK(kept(0.2) == kept(0.0));
}

TEST_CASE("attention dropout: a head shard draws its chunk of one process's masks") {
  const Qkv x = draw(4);
  Generator whole_gen(9);
  const Tensor whole =
      scaled_dot_product_attention(x.q, x.k, x.v, {}, true, std::nullopt, 0.4, &whole_gen);
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    const auto part = [&](const Tensor& t) { return t.narrow(1, rank * H / 2, H / 2); };
    Generator gen(9);
    SequenceShardGuard heads(rank, 2);
    const Tensor got = scaled_dot_product_attention(part(x.q), part(x.k), part(x.v), {}, true,
                                                    std::nullopt, 0.4, &gen);
    CHECK(gen.state().offset == whole_gen.state().offset);
    CHECK(rel_diff(got, part(whole)) < 1e-12);
  }
}

TEST_CASE("attention dropout: gradients match finite differences (float64, one mask)") {
  const Qkv x = draw(6);
  const Tensor r = randn({B, H, T, D}, DType::Float64);
  const auto loss = [&](const Qkv& in) {
    Generator gen(33);  // the same mask every evaluation
    return sum(scaled_dot_product_attention(in.q, in.k, in.v, {}, true, std::nullopt, 0.25, &gen) *
               r)
        .item();
  };
  Qkv a = leaves(x);
  Generator gen(33);
  sum(scaled_dot_product_attention(a.q, a.k, a.v, {}, true, std::nullopt, 0.25, &gen) * r)
      .backward();
  const double h = 1e-6;
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    const Tensor& base = which == 0 ? x.q : which == 1 ? x.k : x.v;
    const Tensor grad = which == 0 ? a.q.grad() : which == 1 ? a.k.grad() : a.v.grad();
    const auto g = grad.to_vector();
    const auto values = base.to_vector();
    for (size_t i = 0; i < values.size(); i += 7) {
      auto plus = values, minus = values;
      plus[i] += h, minus[i] -= h;
      Qkv up = x, down = x;
      (which == 0   ? up.q
       : which == 1 ? up.k
                    : up.v) = from_vector(plus, base.shape(), DType::Float64);
      (which == 0   ? down.q
       : which == 1 ? down.k
                    : down.v) = from_vector(minus, base.shape(), DType::Float64);
      const double numeric = (loss(up) - loss(down)) / (2 * h);
      CHECK(std::abs(numeric - g[i]) < 1e-6 * (1 + std::abs(g[i])));
    }
  }
}

TEST_CASE("attention dropout: float32, bfloat16 and float16 draw float64's mask") {
  const Qkv x = draw(8);
  Generator gen64(41);
  const Tensor want =
      scaled_dot_product_attention(x.q, x.k, x.v, {}, true, std::nullopt, 0.3, &gen64);
  for (const DType dt : {DType::Float32, DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(dt));
    Generator gen(41);
    const Tensor got = scaled_dot_product_attention(x.q.to(dt), x.k.to(dt), x.v.to(dt), {}, true,
                                                    std::nullopt, 0.3, &gen);
    CHECK(rel_diff(got.to(DType::Float64), want) < (dt == DType::Float32 ? 1e-6 : 2e-2));
  }
}
