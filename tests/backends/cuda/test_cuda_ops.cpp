// CUDA kernels at realistic sizes (the op catalog's cases are tiny): multi-chunk reductions,
// vocabulary-wide softmax and cross-entropy, many-row layer_norm, embedding backward with
// repeated indices, multi-block attention, batched and transposed GEMMs, multi-chunk
// optimizer updates, FP8 casts and the FP8 linear. Each runs forward and backward on the GPU at the
// dtype under test and is compared with the same computation in float64 on the CPU. Skips without a
// GPU.
#include <doctest/doctest.h>

#include "skip.h"

#include <cmath>
#include <functional>

#include "tessera/autograd/fp8_linear.h"
#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/nn/fp8_recipe.h"
#include "tessera/optim/optimizer.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

double rel_err(const Tensor& got, const Tensor& ref) {
  const Tensor g = got.detach().to(Device::cpu()).to(DType::Float64);
  const Tensor r = ref.detach().to(Device::cpu()).to(DType::Float64);
  const double denom = norm(r).item();
  return norm(g - r).item() / (denom > 0 ? denom : 1.0);
}

double tolerance(DType dt) {
  return dt == DType::Float64 ? 1e-10 : dt == DType::Float32 ? 2e-5 : 2e-2;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn on float64 CPU inputs and on their `dt` CUDA copies; compares the output and the
// gradient of every floating input under a fixed random projection of the output.
void compare(const std::string& what, const Fn& fn, const std::vector<Tensor>& inputs, DType dt,
             double tol = -1) {
  if (tol < 0) tol = tolerance(dt);
  std::vector<Tensor> ref_in, gpu_in;
  for (const Tensor& t : inputs) {
    const bool fl = is_floating(t.dtype());
    // The reference sees the inputs rounded to dt, so only the arithmetic differs.
    Tensor r = fl ? t.to(dt).to(DType::Float64) : t;
    Tensor g = (fl ? t.to(dt) : t).to(Device::cuda(0));
    if (fl) {
      r.requires_grad_();
      g.requires_grad_();
    }
    ref_in.push_back(r);
    gpu_in.push_back(g);
  }
  const Tensor ref_out = fn(ref_in);
  const Tensor gpu_out = fn(gpu_in);
  REQUIRE(gpu_out.device().is_cuda());
  INFO(what, " at ", dtype_name(dt));
  const double fwd = rel_err(gpu_out, ref_out);
  CHECK_MESSAGE(fwd < tol, "forward relative error ", fwd);
  if (!is_floating(ref_out.dtype()) || !ref_out.requires_grad()) return;
  Generator gen(7);
  const Tensor w = randn(ref_out.shape(), DType::Float64, Device::cpu(), &gen);
  sum(ref_out * w).backward();
  sum(gpu_out * w.to(gpu_out.dtype()).to(Device::cuda(0))).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!ref_in[i].requires_grad()) continue;
    REQUIRE(gpu_in[i].grad().defined());
    const double e = rel_err(gpu_in[i].grad(), ref_in[i].grad());
    CHECK_MESSAGE(e < tol, "gradient of input ", i, " relative error ", e);
  }
}

Tensor normal(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, DType::Float64, Device::cpu(), &g);
}
Tensor indices(const Shape& s, int64_t high, uint64_t seed) {
  Generator g(seed);
  return (rand(s, DType::Float64, Device::cpu(), &g) * static_cast<double>(high)).to(DType::Int64);
}

const DType kDTypes[] = {DType::Float32, DType::BFloat16, DType::Float64};

}  // namespace

TEST_CASE("cuda ops at scale: reductions over many chunks" * test::gpu_required()) {
  for (DType dt : kDTypes) {
    compare(
        "sum of 200003", [](const auto& x) { return sum(x[0]); }, {normal({200003}, 1)}, dt);
    compare(
        "sum dim 0 of [3000,70]", [](const auto& x) { return sum(x[0], {0}); },
        {normal({3000, 70}, 2)}, dt);
    compare(
        "var of [5, 70001]", [](const auto& x) { return var(x[0], {1}, 1); },
        {normal({5, 70001}, 3)}, dt);
    compare(
        "norm of [100000]", [](const auto& x) { return norm(x[0]); }, {normal({100000}, 4)}, dt);
    compare(
        "amax of [7, 40000]", [](const auto& x) { return amax(x[0], {1}); },
        {normal({7, 40000}, 5)}, dt);
  }
  const Tensor x = normal({4, 90000}, 6);
  CHECK(argmax(x.to(Device::cuda(0)), 1).to_int_vector() == argmax(x, 1).to_int_vector());
  // Rows of 16 chunks or more are combined by a block per row instead of a thread per row.
  for (DType dt : kDTypes) {
    compare(
        "sum of 2^20 + 7", [](const auto& x) { return sum(x[0]); }, {normal({1048583}, 8)}, dt);
    compare(
        "var of [3, 600001]", [](const auto& x) { return var(x[0], {1}, 1); },
        {normal({3, 600001}, 9)}, dt);
    compare(
        "norm of [2, 524288]", [](const auto& x) { return norm(x[0], {1}); },
        {normal({2, 524288}, 10)}, dt);
    compare(
        "amin of [2, 700000]", [](const auto& x) { return amin(x[0], {1}); },
        {normal({2, 700000}, 11)}, dt);
  }
  Tensor wide = normal({3, 1000000}, 12);
  wide.narrow(1, 999990, 1).fill_(50.0);  // the maximum sits in the last chunk of each row
  CHECK(argmax(wide.to(Device::cuda(0)), 1).to_int_vector() ==
        std::vector<int64_t>{999990, 999990, 999990});
  // 2^22 float32 values: the sum against float64 on the CPU, and a fixed order (the same
  // bits after other reductions have run in between and the allocator state has changed).
  const Tensor big_host = normal({1 << 22}, 13).to(DType::Float32);
  const Tensor big = big_host.to(Device::cuda(0));
  const double exact = sum(big_host.to(DType::Float64)).item();
  const double first = sum(big).item();
  CHECK(first == doctest::Approx(exact).epsilon(1e-6).scale(2048.0));
  for (int64_t n : {1000, 1 << 20, 3 << 21}) sum(normal({n}, 14).to(Device::cuda(0))).item();
  CHECK(sum(big).item() == first);
}

TEST_CASE("cuda ops at scale: softmax, layer_norm, cross_entropy over wide rows" *
          test::gpu_required()) {
  for (DType dt : kDTypes) {
    compare(
        "softmax [33, 50257]", [](const auto& x) { return softmax(x[0], -1); },
        {normal({33, 50257}, 1)}, dt);
    compare(
        "log_softmax [40, 3001]", [](const auto& x) { return log_softmax(x[0], -1); },
        {normal({40, 3001}, 2)}, dt);
    compare(
        "layer_norm [1000, 768]", [](const auto& x) { return layer_norm(x[0], {768}, x[1], x[2]); },
        {normal({1000, 768}, 3), normal({768}, 4), normal({768}, 5)}, dt);
    compare(
        "cross_entropy [130, 50304]", [](const auto& x) { return cross_entropy(x[0], x[1]); },
        {normal({130, 50304}, 6), indices({130}, 50304, 7)}, dt);
  }
}

TEST_CASE("cuda ops at scale: cross_entropy with -inf and NaN logits behaves as on the CPU" *
          test::gpu_required()) {
  for (DType dt : {DType::Float32, DType::BFloat16}) {
    // Whole 16-byte packs of -inf (a masked vocabulary) and a finite target: finite loss.
    Tensor logits = normal({3, 4099}, 30);
    logits.narrow(1, 0, 2048).fill_(-INFINITY);
    const Tensor targets = from_vector(std::vector<int64_t>{3000, 4098, 2500}, {3});
    compare(
        "cross_entropy with -inf packs", [](const auto& x) { return cross_entropy(x[0], x[1]); },
        {logits, targets}, dt);
    // One NaN logit makes that row's loss, and so the mean, NaN on both devices.
    Tensor with_nan = normal({3, 4099}, 31);
    with_nan.narrow(1, 17, 1).narrow(0, 1, 1).fill_(NAN);
    const double cpu = cross_entropy(with_nan.to(dt), targets).item();
    const double gpu =
        cross_entropy(with_nan.to(dt).to(Device::cuda(0)), targets.to(Device::cuda(0))).item();
    CHECK(std::isnan(cpu));
    CHECK(std::isnan(gpu));
  }
}

TEST_CASE("cuda ops at scale: layer_norm's register path and its fallbacks" *
          test::gpu_required()) {
  // Widths: one pack per lane or less (64, 40), a GPT-2 row (768: 3 bf16 / 6 float32 packs per
  // lane), the widest register rows (1024 backward, 2048 forward), and widths that take the
  // generic kernels (770: not whole packs; 3000: too wide). 4099 rows: the dweight/dbias
  // partials are summed in segments; an odd row count leaves the last warp short.
  for (DType dt : kDTypes) {
    for (int64_t C : {40, 64, 768, 1024, 2048, 770, 3000}) {
      const int64_t N = C <= 1024 ? 4099 : 515;
      compare(
          "layer_norm [" + std::to_string(N) + ", " + std::to_string(C) + "] affine",
          [C](const auto& x) { return layer_norm(x[0], {C}, x[1], x[2]); },
          {normal({N, C}, 20), normal({C}, 21), normal({C}, 22)}, dt);
      compare(
          "layer_norm [" + std::to_string(N) + ", " + std::to_string(C) + "] no weight or bias",
          [C](const auto& x) { return layer_norm(x[0], {C}); }, {normal({N, C}, 23)}, dt);
    }
    // Rows starting one element past a 16-byte boundary take the generic kernels.
    compare(
        "layer_norm of a view one element in",
        [](const auto& x) {
          return layer_norm(x[0].narrow(0, 1, 300 * 768).view({300, 768}), {768}, x[1], x[2]);
        },
        {normal({300 * 768 + 1}, 24), normal({768}, 25), normal({768}, 26)}, dt);
  }
}

TEST_CASE("cuda ops at scale: embedding backward with repeated indices is exact and stable" *
          test::gpu_required()) {
  for (DType dt : kDTypes)
    compare(
        "embedding [500, 64] x 6000", [](const auto& x) { return embedding(x[0], x[1]); },
        {normal({500, 64}, 1), indices({6000}, 500, 2)}, dt);
  // float32: the rows of one index are summed in position order, as on the CPU: same bits,
  // and the same bits on every run.
  const Tensor w = normal({300, 32}, 3).to(DType::Float32), idx = indices({5000}, 300, 4);
  const Tensor g = normal({5000, 32}, 5).to(DType::Float32);
  auto grad_on = [&](Device d) {
    Tensor wd = w.to(d).detach().requires_grad_();
    embedding(wd, idx.to(d)).backward(g.to(d));
    return wd.grad().to(Device::cpu()).to_vector();
  };
  const auto cpu = grad_on(Device::cpu());
  const auto gpu1 = grad_on(Device::cuda(0));
  const auto gpu2 = grad_on(Device::cuda(0));
  CHECK(gpu1 == cpu);
  CHECK(gpu1 == gpu2);
}

TEST_CASE("cuda ops at scale: attention over many blocks, causal and masked" *
          test::gpu_required()) {
  for (DType dt : kDTypes) {
    const double tol = dt == DType::BFloat16 ? 3e-2 : -1;
    compare(
        "attention [2,3,200,64] causal",
        [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); },
        {normal({2, 3, 200, 64}, 1), normal({2, 3, 200, 64}, 2), normal({2, 3, 200, 64}, 3)}, dt,
        tol);
    const Tensor mask = ne(indices({2, 1, 1, 150}, 4, 4), zeros({}, DType::Int64));
    compare(
        "attention q[2,2,70,32] kv[2,2,150,32] padding mask",
        [mask](const auto& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], mask.to(x[0].device()), false);
        },
        {normal({2, 2, 70, 32}, 5), normal({2, 2, 150, 32}, 6), normal({2, 2, 150, 32}, 7)}, dt,
        tol);
    // Dropout on the probabilities: the CPU kernel's mask, drawn on the GPU by the dropout
    // kernel (the CUDA attention kernel does not take dropout yet: softmax, dropout, matmul).
    compare(
        "attention [2,3,40,32] causal, dropout 0.2",
        [](const auto& x) {
          Generator gen(5);
          return scaled_dot_product_attention(x[0], x[1], x[2], {}, true, std::nullopt, 0.2, &gen);
        },
        {normal({2, 3, 40, 32}, 11), normal({2, 3, 40, 32}, 12), normal({2, 3, 40, 32}, 13)}, dt,
        tol);
  }
}

TEST_CASE("cuda ops at scale: fused flash attention (16-bit, head size 64 and 128)" *
          test::gpu_required()) {
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    const double tol = 3e-2;
    compare(
        "flash [2,3,300,64] causal",
        [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); },
        {normal({2, 3, 300, 64}, 1), normal({2, 3, 300, 64}, 2), normal({2, 3, 300, 64}, 3)}, dt,
        tol);
    compare(
        "flash q[1,2,100,128] kv[1,2,260,128] causal",
        [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); },
        {normal({1, 2, 100, 128}, 4), normal({1, 2, 260, 128}, 5), normal({1, 2, 260, 128}, 6)}, dt,
        tol);
    const Tensor mask = ne(indices({2, 1, 1, 130}, 4, 7), zeros({}, DType::Int64));
    compare(
        "flash [2,2,130,64] padding mask",
        [mask](const auto& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], mask.to(x[0].device()), false);
        },
        {normal({2, 2, 130, 64}, 8), normal({2, 2, 130, 64}, 9), normal({2, 2, 130, 64}, 10)}, dt,
        tol);
    // Whole 64 x 64 tiles only (no per-score checks), and causal at an exact multiple of 64.
    compare(
        "flash [1,2,256,64] no mask",
        [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, false); },
        {normal({1, 2, 256, 64}, 11), normal({1, 2, 256, 64}, 12), normal({1, 2, 256, 64}, 13)}, dt,
        tol);
    compare(
        "flash [1,2,256,128] causal",
        [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); },
        {normal({1, 2, 256, 128}, 14), normal({1, 2, 256, 128}, 15), normal({1, 2, 256, 128}, 16)},
        dt, tol);
  }
}

TEST_CASE("cuda ops at scale: block-sparse attention (random layouts, causal, key padding)" *
          test::gpu_required()) {
  // Layouts with about 2/3 of the blocks, a query block with none and one with all; blocks
  // of 16 (half a warp's chunk) and 64 (two chunks), head sizes 64 and 40 / 24.
  auto layout = [](int64_t heads, int64_t n, uint64_t seed) {
    Tensor l = indices({heads, n, n}, 3, seed);
    l.narrow(1, 1, 1).fill_(0.0);
    l.narrow(1, n - 1, 1).fill_(1.0);
    return l;
  };
  const Tensor l16 = layout(3, 16, 20), l64 = layout(2, 4, 21);
  const Tensor mask = ne(indices({2, 256}, 4, 22), zeros({}, DType::Int64));
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    const double tol = is_reduced_float(dt) ? 3e-2 : -1;
    compare(
        "block sparse [2,3,256,64] block 16 causal",
        [l16](const auto& x) { return block_sparse_attention(x[0], x[1], x[2], l16, {}, true); },
        {normal({2, 3, 256, 64}, 23), normal({2, 3, 256, 64}, 24), normal({2, 3, 256, 64}, 25)}, dt,
        tol);
    compare(
        "block sparse [2,2,256,40] v[2,2,256,24] block 64 key padding",
        [l64, mask](const auto& x) {
          return block_sparse_attention(x[0], x[1], x[2], l64, mask.to(x[0].device()), false);
        },
        {normal({2, 2, 256, 40}, 26), normal({2, 2, 256, 40}, 27), normal({2, 2, 256, 24}, 28)}, dt,
        tol);
  }
}

TEST_CASE("cuda ops at scale: GEMMs batched, broadcast and transposed" * test::gpu_required()) {
  for (DType dt : kDTypes) {
    compare(
        "[3,257,129] @ [129,65]", [](const auto& x) { return matmul(x[0], x[1]); },
        {normal({3, 257, 129}, 1), normal({129, 65}, 2)}, dt);
    compare(
        "[130,70]T @ [130,90]", [](const auto& x) { return matmul(x[0].t(), x[1]); },
        {normal({130, 70}, 3), normal({130, 90}, 4)}, dt);
    compare(
        "[4,1,33,40] @ [5,40,17]", [](const auto& x) { return matmul(x[0], x[1]); },
        {normal({4, 1, 33, 40}, 5), normal({5, 40, 17}, 6)}, dt);
  }
}

TEST_CASE("cuda ops at scale: linear with bias (cuBLASLt epilogues, or their fallback)" *
          test::gpu_required()) {
  // float32/bf16 take the BIAS and BGRADB epilogues where cuBLASLt has them; float64 and odd
  // widths may not, and take the unfused kernels: either way the values are the same.
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    compare(
        "linear [2,256,768] w[3072,768] b", [](const auto& x) { return linear(x[0], x[1], x[2]); },
        {normal({2, 256, 768}, 40), normal({3072, 768}, 41) * 0.05, normal({3072}, 42)}, dt,
        dt == DType::Float16 ? 3e-2 : -1);
    compare(
        "linear [77,33] w[19,33] b (odd sizes)",
        [](const auto& x) { return linear(x[0], x[1], x[2]); },
        {normal({77, 33}, 43), normal({19, 33}, 44), normal({19}, 45)}, dt,
        dt == DType::Float16 ? 3e-2 : -1);
  }
  // Bias gradient alone (frozen weight) and weight gradient alone.
  const Device d = Device::cuda(0);
  Tensor x = normal({64, 32}, 46).to(DType::Float32), w = normal({16, 32}, 47).to(DType::Float32),
         b = normal({16}, 48).to(DType::Float32);
  Tensor xg = x.to(d), wg = w.to(d), bg = b.to(d);
  b.requires_grad_(), bg.requires_grad_();
  sum(linear(x, w, b)).backward();
  sum(linear(xg, wg, bg)).backward();
  CHECK(rel_err(bg.grad(), b.grad()) < 1e-6);
}

TEST_CASE("cuda ops at scale: fused AdamW over tensors of many chunks matches the CPU" *
          test::gpu_required()) {
  auto run = [](Device d) {
    std::vector<Tensor> ps{normal({300000}, 1).to(DType::Float32).to(d),
                           normal({70, 31}, 2).to(DType::Float32).to(d)};
    for (Tensor& p : ps) p.requires_grad_();
    optim::Adam opt({{{}, ps, 1e-2, 0.1}}, optim::AdamOptions{0.9, 0.99, 1e-8, true});
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      Tensor loss = zeros({}, DType::Float32, d);
      for (Tensor& p : ps) loss = loss + sum(p * p * p);
      loss.backward();
      opt.step();
    }
    std::vector<Tensor> out;
    for (Tensor& p : ps) out.push_back(p.detach().to(Device::cpu()));
    return out;
  };
  const auto cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
  for (size_t i = 0; i < cpu.size(); ++i) CHECK(rel_err(gpu[i], cpu[i]) < 1e-6);
}

TEST_CASE("cuda: FP8 casts equal the CPU's bit for bit; the FP8 linear matches the CPU's" *
          test::gpu_required()) {
  const Tensor x = normal({1 << 20}, 3) * 40.0;
  for (DType dt : {DType::Float32, DType::BFloat16})
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      Tensor amax_cpu = zeros({1}), amax_gpu = zeros({1}, DType::Float32, Device::cuda(0));
      const Tensor cpu = fp8_cast(x.to(dt), 0.37f, f, &amax_cpu);
      const Tensor gpu = fp8_cast(x.to(dt).to(Device::cuda(0)), 0.37f, f, &amax_gpu);
      CHECK(rel_err(gpu, cpu) == 0.0);
      CHECK(amax_gpu.to(Device::cpu()).item() == amax_cpu.item());
    }
  auto run = [](Device d) {
    auto s = nn::make_fp8_linear_scaling(nn::Fp8Recipe{}, d);
    s->input.scale = 50.0f;
    s->weight.scale = 900.0f;
    s->grad_output.scale = 4096.0f;
    Tensor a = normal({64, 96}, 4).to(DType::Float32).to(d).requires_grad_(true);
    Tensor w = (normal({80, 96}, 5) * 0.1).to(DType::Float32).to(d).requires_grad_(true);
    Tensor b = normal({80}, 6).to(DType::Float32).to(d).requires_grad_(true);
    const Tensor y = fp8_linear(a, w, b, s);
    autograd::backward({y}, {(normal({64, 80}, 7) * 1e-2).to(DType::Float32).to(d)});
    return std::vector<Tensor>{y, a.grad(), w.grad(), b.grad()};
  };
  const auto cpu = run(Device::cpu()), gpu = run(Device::cuda(0));
  for (size_t i = 0; i < cpu.size(); ++i) CHECK(rel_err(gpu[i], cpu[i]) < 1e-6);
}

TEST_CASE("cuda: bad indices and targets are reported by position, not as a device fault" *
          test::gpu_required()) {
  const Device d = Device::cuda(0);
  const Tensor w = randn({10, 4}).to(d);
  const Tensor idx = from_vector(std::vector<double>{1, 2, 12, 3}, {4}).to(DType::Int64).to(d);
  CHECK_THROWS_WITH(embedding(w, idx),
                    doctest::Contains("index 12 at position 2 is out of range for a table of 10"));
  const Tensor logits = randn({3, 5}).to(d);
  const Tensor tgt = from_vector(std::vector<double>{0, 7, 1}, {3}).to(DType::Int64).to(d);
  CHECK_THROWS_WITH(cross_entropy(logits, tgt),
                    doctest::Contains("target 7 at position 1 is out of range for 5 classes"));
  // The device is still usable afterwards.
  CHECK(sum(w).item() == doctest::Approx(sum(w.to(Device::cpu())).item()).epsilon(1e-5));
}
