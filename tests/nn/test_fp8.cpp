// FP8 training's pieces against tests/fixtures/fp8_reference.json
// (tests/fixtures/generate_fp8_fixtures.py: FP8 numbers listed from their bit patterns,
// Transformer Engine's DelayedScaling update as its PyTorch code runs it, the FP8 linear in
// float64): the casts (every dtype, NaN and infinities by hand, amax, thread counts), the
// recipe's scales step by step, fp8_linear's output and gradients, and the layers' hook.
#include <doctest/doctest.h>

#include <omp.h>

#include <cfloat>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "relative_error.h"
#include "tessera/autograd/fp8_linear.h"
#include "tessera/fp8.h"
#include "tessera/nn/fp8_recipe.h"
#include "tessera/parallel/fp8_layers.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream f(TESSERA_SOURCE_ROOT "/tests/fixtures/fp8_reference.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

Fp8Format format_of(const nlohmann::json& name) {
  return name.get<std::string>() == "E4M3" ? Fp8Format::E4M3 : Fp8Format::E5M2;
}

Tensor values(const nlohmann::json& v, Shape shape, DType dtype = DType::Float32) {
  return from_vector(v.get<std::vector<double>>(), std::move(shape)).to(dtype);
}

double worst_relative(const Tensor& got, const nlohmann::json& want) {
  const std::vector<double> g = got.to(DType::Float64).contiguous().to_vector();
  const auto w = want.get<std::vector<double>>();
  REQUIRE(g.size() == w.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - w[i]) / std::max(std::abs(w[i]), 1e-30));
  return worst;
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

}  // namespace

TEST_CASE("fp8::round: the FP8 numbers of the reference, every case, bit for bit") {
  int64_t checked = 0;
  for (const auto& c : reference()["casts"]) {
    const Fp8Format f = format_of(c["format"]);
    const auto scale = c["scale"].get<float>();
    const auto xs = c["x"].get<std::vector<double>>(), ys = c["y"].get<std::vector<double>>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const float got = fp8::round(static_cast<float>(xs[i]) * scale, f);
      INFO(c["format"], " scale ", scale, " x ", xs[i]);
      CHECK(got == static_cast<float>(ys[i]));
      CHECK(std::signbit(got) == std::signbit(ys[i]));
      ++checked;
    }
  }
  CHECK(checked > 1600);
  // By hand: saturation of infinities, NaN kept, the largest numbers and smallest subnormals.
  CHECK(fp8::round(INFINITY, Fp8Format::E4M3) == 448.0f);
  CHECK(fp8::round(-INFINITY, Fp8Format::E5M2) == -57344.0f);
  CHECK(std::isnan(fp8::round(NAN, Fp8Format::E4M3)));
  CHECK(fp8::round(0x1p-9f, Fp8Format::E4M3) == 0x1p-9f);
  CHECK(fp8::round(0x1p-10f, Fp8Format::E4M3) == 0.0f);  // a tie: to the even code 0
  CHECK(fp8::round(0x1.8p-10f, Fp8Format::E4M3) == 0x1p-9f);
  CHECK(fp8::round(0x1p-16f, Fp8Format::E5M2) == 0x1p-16f);
  CHECK(fp8::round(464.0f, Fp8Format::E4M3) == 448.0f);
  CHECK(fp8::round(1.0625f, Fp8Format::E4M3) == 1.0f);   // a tie between 1 and 1.125
  CHECK(fp8::round(1.1875f, Fp8Format::E4M3) == 1.25f);  // a tie between 1.125 and 1.25
}

TEST_CASE("fp8_cast: the kernel's numbers in every floating dtype, its amax, any thread count") {
  const auto& c = reference()["casts"][2];
  const auto xs = c["x"].get<std::vector<double>>();
  const Tensor x = values(c["x"], {static_cast<int64_t>(xs.size())});
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    const Tensor in = x.to(d);
    Tensor amax = zeros({1});
    const Tensor y = fp8_cast(in, c["scale"].get<float>(), format_of(c["format"]), &amax);
    CHECK(y.dtype() == d);
    // (16-bit inputs round x first; the reference's own x is float32.)
    if (d == DType::Float32 || d == DType::Float64) CHECK(worst_relative(y, c["y"]) == 0.0);
    double top = 0;
    for (double v : in.to(DType::Float64).to_vector()) top = std::max(top, std::abs(v));
    CHECK(amax.item() == static_cast<double>(static_cast<float>(top)));
  }
  // A running maximum: a smaller tensor leaves it; a NaN sticks.
  Tensor amax = full({1}, 5.0);
  fp8_cast(from_vector({1.0, -3.0, 2.0}, {3}), 1.0f, Fp8Format::E4M3, &amax);
  CHECK(amax.item() == 5.0);
  fp8_cast(from_vector({1.0, -7.0, 2.0}, {3}), 1.0f, Fp8Format::E4M3, &amax);
  CHECK(amax.item() == 7.0);
  fp8_cast(from_vector({1.0, NAN, 2.0}, {3}), 1.0f, Fp8Format::E4M3, &amax);
  CHECK(std::isnan(amax.item()));
  // Threads split the elements; the values and the amax do not move.
  const Tensor big = randn({100000}) * 30.0;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor a1 = zeros({1});
  const Tensor y1 = fp8_cast(big, 3.0f, Fp8Format::E5M2, &a1);
  omp_set_num_threads(std::max(2, threads));
  Tensor a2 = zeros({1});
  const Tensor y2 = fp8_cast(big, 3.0f, Fp8Format::E5M2, &a2);
  omp_set_num_threads(threads);
  CHECK(equal(y1, y2));
  CHECK(a1.item() == a2.item());
  CHECK_THROWS_WITH_AS(fp8_cast(x, 0.0f, Fp8Format::E4M3), doctest::Contains("scale"), Error);
  CHECK_THROWS_WITH_AS(fp8_cast(from_vector({1.0}, {1}).to(DType::Int64), 1.0f, Fp8Format::E4M3),
                       doctest::Contains("fp8_cast"), Error);
}

TEST_CASE("Fp8Recipe: Transformer Engine's delayed scaling, step by step") {
  for (const auto& c : reference()["recipe"]) {
    nn::Fp8Recipe r;
    r.margin = c["margin"];
    r.amax_history_len = c["amax_history_len"];
    r.amax_compute_algo = c["amax_compute_algo"] == "max" ? nn::AmaxComputeAlgo::Max
                                                          : nn::AmaxComputeAlgo::MostRecent;
    const Fp8Format f = format_of(c["format"]);
    Fp8TensorScaling t;
    const auto amaxes = c["amaxes"].get<std::vector<double>>();
    const auto scales = c["scales"].get<std::vector<double>>();
    for (size_t i = 0; i < amaxes.size(); ++i) {
      r.update(t, static_cast<float>(amaxes[i]), f, true);
      INFO(c["format"], " margin ", r.margin, " history ", r.amax_history_len, " step ", i);
      CHECK(t.scale == static_cast<float>(scales[i]));
      CHECK(static_cast<int64_t>(t.history.size()) <= r.amax_history_len);
    }
  }
  // interval: the history moves every step, the scale only when asked.
  nn::Fp8Recipe r;
  Fp8TensorScaling t;
  r.update(t, 2.0f, Fp8Format::E4M3, false);
  CHECK(t.scale == 1.0f);
  r.update(t, 4.0f, Fp8Format::E4M3, true);
  CHECK(t.scale == 448.0f / 4.0f);
  CHECK(t.history == std::vector<float>{4.0f, 2.0f});
  // A NaN in the window keeps the scale while it stays there.
  r.amax_history_len = 2;
  r.update(t, NAN, Fp8Format::E4M3, true);
  CHECK(t.scale == 112.0f);
  r.update(t, 1.0f, Fp8Format::E4M3, true);
  CHECK(t.scale == 112.0f);
  r.update(t, 1.0f, Fp8Format::E4M3, true);
  CHECK(t.scale == 448.0f);
}

TEST_CASE("fp8_linear: output and every gradient against the float64 reference") {
  for (const auto& c : reference()["linear"]) {
    auto s = std::make_shared<Fp8LinearScaling>();
    s->forward_format = format_of(c["forward_format"]);
    s->backward_format = format_of(c["backward_format"]);
    const auto sc = c["scales"].get<std::vector<float>>();
    s->input.scale = sc[0];
    s->weight.scale = sc[1];
    s->grad_output.scale = sc[2];
    for (Fp8TensorScaling* t : {&s->input, &s->weight, &s->grad_output}) t->amax = zeros({1});
    Tensor x = values(c["x"], {5, 8}).requires_grad_(true);
    Tensor w = values(c["w"], {6, 8}).requires_grad_(true);
    Tensor b = values(c["b"], {6}).requires_grad_(true);
    const Tensor y = fp8_linear(x, w, b, s);
    CHECK(worst_relative(y, c["y"]) < 1e-6);  // (float32 accumulation and rounding)
    autograd::backward({y}, {values(c["g"], {5, 6})});
    CHECK(worst_relative(x.grad(), c["dx"]) < 1e-6);
    CHECK(worst_relative(w.grad(), c["dw"]) < 1e-6);
    CHECK(worst_relative(b.grad(), c["db"]) < 1e-6);
    const auto amax = c["amax"].get<std::vector<double>>();
    CHECK(s->input.amax.item() == amax[0]);
    CHECK(s->weight.amax.item() == amax[1]);
    CHECK(s->grad_output.amax.item() == amax[2]);
  }
  // A 3-D input gives the 2-D input's rows; under NoGradGuard nothing is recorded.
  auto s = nn::make_fp8_linear_scaling(nn::Fp8Recipe{}, Device::cpu());
  const Tensor x = randn({2, 3, 8}), w = randn({4, 8});
  const Tensor flat = fp8_linear(x.reshape({6, 8}), w, {}, s);
  s->input.amax.zero_();
  s->weight.amax.zero_();
  {
    NoGradGuard no_grad;
    CHECK(equal(fp8_linear(x, w, {}, s).reshape({6, 4}), flat));
  }
  CHECK(s->input.amax.item() == 0.0);
  CHECK_THROWS_WITH_AS(fp8_linear(x, randn({4, 7}), {}, s), doctest::Contains("does not match"),
                       Error);
}

TEST_CASE("enable_fp8: the column- and row-parallel linears run through FP8, others do not") {
  struct Net : nn::Module {
    parallel::ColumnParallelLinear up{this, "up", 8, 16, nullptr};
    parallel::RowParallelLinear down{this, "down", 16, 8, nullptr};
    nn::Linear head{this, "head", 8, 2};
  } net;
  const Tensor x = randn({4, 8});
  const Tensor before = net.down(net.up(x));
  const parallel::Fp8Layers layers = parallel::enable_fp8(net, nn::Fp8Recipe{}, Device::cpu());
  REQUIRE(layers.size() == 2);
  CHECK(layers[0].first == "up");
  CHECK(layers[1].first == "down");
  const Tensor after = net.down(net.up(x));
  const Tensor by_hand = fp8_linear(fp8_linear(x, net.up.weight, net.up.bias, layers[0].second),
                                    net.down.weight, net.down.bias, layers[1].second);
  CHECK(equal(after, by_hand));
  CHECK_FALSE(equal(after, before));  // (scale 1: a real rounding of the values)
  CHECK(rel_diff(after, before) < 0.1);
  CHECK_THROWS_WITH_AS(net.down.forward_of_gelu(x, GeluApprox::Tanh, true),
                       doctest::Contains("FP8"), Error);
}
