#include <doctest/doctest.h>

#include "tessera/grad_mode.h"
#include "tessera/nn/layers.h"
#include "tessera/testing.h"

using namespace tessera;

namespace {
struct Net : nn::Module {
  nn::Linear fc1{this, "fc1", 4, 8};
  nn::LayerNorm norm{this, "norm", 8};
  nn::Linear fc2{this, "fc2", 8, 2, nn::LinearOptions().with_bias(false)};
  nn::Parameter scale{this, "scale", ones({2})};
  nn::ModuleList blocks{this, "blocks"};
  Net() {
    blocks.emplace_back<nn::Linear>(2, 2);
    blocks.emplace_back<nn::Dropout>(0.5);
  }
  Tensor forward(const Tensor& x) { return fc2(norm(relu(fc1(x)))) * scale.get(); }
};
}  // namespace

TEST_CASE("parameters are discovered by dotted name in registration order") {
  Net net;
  std::vector<std::string> names;
  for (auto& [n, t] : net.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "norm.weight",
                                          "norm.bias", "fc2.weight", "blocks.0.weight",
                                          "blocks.0.bias"});
  CHECK(net.num_parameters() == 2 + 4 * 8 + 8 + 8 + 8 + 16 + 4 + 2);
  CHECK(net.summary().find("fc1.weight") != std::string::npos);
  for (auto& [n, t] : net.named_parameters()) CHECK(t->requires_grad());
}

TEST_CASE("state_dict round trip and clear errors for missing, unexpected and mis-shaped keys") {
  Net a, b;
  b.load_state_dict(a.state_dict());
  CHECK(b.fc1.weight.to_vector() == a.fc1.weight.to_vector());
  auto sd = a.state_dict();
  sd.erase("fc1.bias");
  sd["extra"] = zeros({1});
  CHECK_THROWS_WITH_AS(b.load_state_dict(sd), doctest::Contains("missing keys (1): fc1.bias"),
                       Error);
  CHECK_THROWS_WITH_AS(b.load_state_dict(sd), doctest::Contains("unexpected keys (1): extra"),
                       Error);
  b.load_state_dict(sd, /*strict=*/false);
  auto bad = a.state_dict();
  bad["fc2.weight"] = zeros({3, 3});
  CHECK_THROWS_WITH_AS(b.load_state_dict(bad), doctest::Contains("'fc2.weight' has shape [3, 3]"),
                       Error);
}

TEST_CASE("train/eval mode reaches every submodule; dropout is off in eval") {
  Net net;
  net.eval();
  CHECK_FALSE(net.blocks[1].is_training());
  const Tensor x = randn({3, 2});
  CHECK(net.blocks.at<nn::Dropout>(1)(x).same(x));
  net.train();
  CHECK(net.blocks[1].is_training());
}

TEST_CASE("to(dtype) converts parameters and keeps them trainable") {
  Net net;
  net.to(DType::Float64);
  CHECK(net.fc1.weight.dtype() == DType::Float64);
  CHECK(net.fc1.weight.requires_grad());
  const Tensor y = net.forward(randn({5, 4}, DType::Float64));
  sum(y).backward();
  CHECK(net.fc1.weight.grad().defined());
}

TEST_CASE("Linear and MultiHeadAttention gradients pass finite differences") {
  nn::Module root;
  nn::Linear lin(&root, "lin", 3, 2);
  nn::MultiHeadAttention mha(&root, "mha", 8, 2);
  root.to(DType::Float64);
  const Tensor x = randn({2, 3}, DType::Float64).requires_grad_();
  TS_CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return lin(in[0]); },
                     std::vector<Tensor>{x});
  const Tensor h = randn({2, 4, 8}, DType::Float64).requires_grad_();
  const Tensor pad = from_vector({1, 1, 1, 0, 1, 1, 0, 0}, {2, 4}, DType::Bool);
  TS_CHECK_GRADCHECK([&](const std::vector<Tensor>& in) { return mha.forward(in[0], pad, true); },
                     std::vector<Tensor>{h});
}

TEST_CASE("Linear computes x W^T + b") {
  nn::Module root;
  nn::Linear lin(&root, "lin", 2, 1);
  NoGradGuard g;
  lin.weight.copy_(from_vector({2.0, -1.0}, {1, 2}));
  lin.bias.copy_(from_vector({0.5}, {1}));
  CHECK(lin(from_vector({3.0, 4.0}, {1, 2})).item() == 2.5);
  CHECK_THROWS_WITH_AS(lin(zeros({1, 3})), doctest::Contains("expected input [..., 2]"), Error);
}

TEST_CASE("Sequential applies its modules in order, named 0, 1, 2") {
  nn::Module root;
  nn::Sequential seq(&root, "seq");
  auto& a = seq.emplace_back<nn::Linear>(3, 4);
  seq.emplace_back<nn::GELU>();
  auto& b = seq.emplace_back<nn::Linear>(4, 2);
  CHECK(seq.size() == 3);
  std::vector<std::string> names;
  for (auto& [n, t] : root.named_parameters()) names.push_back(n);
  CHECK(names ==
        std::vector<std::string>{"seq.0.weight", "seq.0.bias", "seq.2.weight", "seq.2.bias"});
  const Tensor x = randn({5, 3});
  CHECK(seq(x).to_vector() == b(gelu(a(x))).to_vector());
}
