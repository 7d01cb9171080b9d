// A complete program against the installed library:
//   c++ hello_tessera.cpp $(pkg-config --cflags --libs tessera) -o hello_tessera
// Fits y = 3x - 1 with plain gradient descent on Tessera tensors.
#include <tessera/tessera.h>

#include <cstdio>

namespace ts = tessera;

int main() {
  ts::manual_seed(0);
  const ts::Tensor x = ts::randn({64, 1});
  const ts::Tensor y = x * 3.0 - 1.0;
  ts::Tensor w = ts::zeros({1, 1}).requires_grad_();
  ts::Tensor b = ts::zeros({1}).requires_grad_();
  for (int step = 0; step < 200; ++step) {
    const ts::Tensor loss = ts::mean(ts::pow(ts::matmul(x, w) + b - y, 2.0));
    w.set_grad({});
    b.set_grad({});
    loss.backward();
    ts::NoGradGuard no_grad;  // parameter updates are not part of the graph
    w.add_(w.grad(), -0.1);
    b.add_(b.grad(), -0.1);
  }
  std::printf("w = %.4f (expected 3), b = %.4f (expected -1)\n", w.item(), b.item());
  return (std::abs(w.item() - 3.0) < 1e-3 && std::abs(b.item() + 1.0) < 1e-3) ? 0 : 1;
}
