// A model written against Tessera's C++ API: parameters are found by name, no registry.
//   c++ mlp.cpp $(pkg-config --cflags --libs tessera) -o mlp && ./mlp
// Learns XOR-like labels of 2-D points with a two-layer MLP and plain SGD.
#include <tessera/nn/layers.h>
#include <tessera/tessera.h>

#include <cstdio>

namespace ts = tessera;

struct MLP : ts::nn::Module {
  ts::nn::Linear fc1{this, "fc1", 2, 32};
  ts::nn::Linear fc2{this, "fc2", 32, 2};
  ts::Tensor forward(const ts::Tensor& x) { return fc2(ts::relu(fc1(x))); }
};

int main() {
  ts::manual_seed(0);
  MLP model;
  std::printf("%s", model.summary().c_str());
  const ts::Tensor x = ts::rand({256, 2}) * 2.0 - 1.0;
  // label 1 where the coordinates have the same sign
  const ts::Tensor same = ts::eq(ts::gt(x.select(1, 0), ts::scalar_tensor(0)),
                                 ts::gt(x.select(1, 1), ts::scalar_tensor(0)));
  const ts::Tensor y = same.to(ts::DType::Int64);
  double loss_value = 0;
  for (int step = 0; step < 300; ++step) {
    model.zero_grad();
    const ts::Tensor loss = ts::cross_entropy(model.forward(x), y);
    loss.backward();
    ts::NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters()) p->add_(p->grad(), -0.5);
    loss_value = loss.item();
    if (step % 100 == 0) std::printf("step %3d  loss %.4f\n", step, loss_value);
  }
  const double accuracy =
      ts::mean(ts::eq(ts::argmax(model.forward(x), 1), y).to(ts::DType::Float32)).item();
  std::printf("final loss %.4f, accuracy %.3f\n", loss_value, accuracy);
  return accuracy > 0.9 ? 0 : 1;
}
