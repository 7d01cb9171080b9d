// The same seed gives the same bits whatever OMP_NUM_THREADS is: kernels at 1, 2 and 3
// threads (sizes well past their parallel grains, so the work really is split differently),
// and 20 training steps of a GPT-2 with dropout through the engine (5 under the sanitizers).
#include <doctest/doctest.h>
#include <omp.h>

#include <functional>
#include <vector>

#include "skip.h"
#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"

using namespace tessera;

namespace {

using Bits = std::vector<std::vector<double>>;  // every value, as the double it converts to

// Runs `f` at 1, 2 and 3 threads and checks every run's values against the first, exactly.
void same_at_every_thread_count(const char* what, const std::function<Bits()>& f) {
  const int saved = omp_get_max_threads();
  std::vector<Bits> runs;
  for (int n : {1, 2, 3}) {
    omp_set_num_threads(n);
    runs.push_back(f());
  }
  omp_set_num_threads(saved);
  for (size_t r = 1; r < runs.size(); ++r) {
    REQUIRE(runs[r].size() == runs[0].size());
    for (size_t t = 0; t < runs[0].size(); ++t) {
      size_t differ = 0;
      for (size_t i = 0; i < runs[0][t].size(); ++i) differ += runs[r][t][i] != runs[0][t][i];
      CHECK_MESSAGE(differ == 0, std::string(what)
                                     << ": tensor " << t << " at " << r + 1
                                     << " threads: " << differ << " of " << runs[0][t].size()
                                     << " values differ from 1 thread");
    }
  }
}

// Forward output and every input's gradient of sum(out * v).
Bits forward_backward(const std::function<Tensor(const std::vector<Tensor>&)>& op,
                      std::vector<Tensor> inputs) {
  for (Tensor& t : inputs)
    if (is_floating(t.dtype())) t = t.detach().requires_grad_(true);
  const Tensor y = op(inputs);
  Generator g(5);
  sum(y * randn(y.shape(), y.dtype(), Device::cpu(), &g)).backward();
  Bits out{y.to_vector()};
  for (const Tensor& t : inputs)
    if (t.requires_grad()) out.push_back(t.grad().to_vector());
  return out;
}

Tensor normal(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, DType::Float32, Device::cpu(), &g);
}

}  // namespace

TEST_CASE("kernels give the same bits at 1, 2 and 3 threads") {
  same_at_every_thread_count("matmul [4,300,257] @ [257,129]", [] {
    return forward_backward([](auto& x) { return matmul(x[0], x[1]); },
                            {normal({4, 300, 257}, 1), normal({257, 129}, 2)});
  });
  same_at_every_thread_count("causal attention [4,4,256,64]", [] {
    return forward_backward(
        [](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); },
        {normal({4, 4, 256, 64}, 3), normal({4, 4, 256, 64}, 4), normal({4, 4, 256, 64}, 5)});
  });
  same_at_every_thread_count("layer_norm [4096,256]", [] {
    return forward_backward([](auto& x) { return layer_norm(x[0], {256}, x[1], x[2]); },
                            {normal({4096, 256}, 6), normal({256}, 7), normal({256}, 8)});
  });
  same_at_every_thread_count("cross_entropy [4096,1000]", [] {
    Generator g(9);
    const Tensor targets =
        (rand({4096}, DType::Float32, Device::cpu(), &g) * 1000.0).to(DType::Int64);
    return forward_backward([&](auto& x) { return cross_entropy(x[0], targets); },
                            {normal({4096, 1000}, 10)});
  });
}

TEST_CASE("20 training steps (dropout, AdamW, clipping) give the same bits at 1, 2 and 3 threads") {
  same_at_every_thread_count("GPT-2 training", [] {
    manual_seed(11);
    auto c = models::GPT2Config::named("tiny");
    c.dropout = 0.1;
    c.n_embd = 128;
    models::GPT2LMHeadModel model(c);
    auto engine = engine::initialize(model, io::TrainConfig::parse(R"({"train_batch_size": 8,
        "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": {"lr": 0.003,
        "weight_decay": 0.1}}})"));
    Bits out{{}};
    for (int k = 0; k < (test::sanitized() ? 5 : 20); ++k) {
      Generator g(100 + static_cast<uint64_t>(k));
      const Tensor x = (rand({8, 32}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
      const Tensor loss = engine->forward(models::Batch{x, x});
      engine->backward(loss);
      engine->step();
      out[0].push_back(loss.item());
    }
    for (auto& [n, t] : model.named_parameters()) out.push_back(t->to_vector());
    return out;
  });
}
