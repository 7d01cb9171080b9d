// `tessera bench train --preset tiny|small|gpt2`: the training step of
// ../shared/reference/gpt_bench.py (tied embeddings, pre-LN blocks without biases, causal
// attention, tanh-GELU MLP, cross-entropy, AdamW lr 1e-3 betas (0.9, 0.99) wd 0.1, clip 1.0).
#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/optim/optimizer.h"
#include "tools/cli.h"

namespace tessera::cli {

int bench_train(const Args& a) {
  struct Preset {
    int64_t vocab, block, layers, heads, dim, batch;
  };
  const std::string name = a.get("preset", "tiny");
  Preset p;
  if (name == "tiny")
    p = {65, 64, 4, 4, 128, 12};
  else if (name == "small")
    p = {65, 256, 6, 6, 384, 8};
  else if (name == "gpt2")
    p = {50304, 64, 12, 12, 768, 4};
  else
    fail("bench train: unknown preset '", name, "' (tiny, small or gpt2)");
  const int64_t steps = a.get_int("iters", 10);
  manual_seed(0);
  models::GPT2Config c;
  c.vocab_size = p.vocab, c.n_positions = p.block, c.n_layer = p.layers, c.n_head = p.heads,
  c.n_embd = p.dim;
  c.bias = false;
  c.dropout = 0.0;
  models::GPT2LMHeadModel model(c);
  // Weight decay on every parameter, as gpt_bench.py's single AdamW group does.
  std::vector<optim::ParamGroup> groups{{{}, model.parameters(), 1e-3, 0.1}};
  optim::Adam opt(groups, optim::AdamOptions{0.9, 0.99, 1e-8, true});
  Generator gen(1);
  const Tensor x =
      (rand({p.batch, p.block}, DType::Float32, Device::cpu(), &gen) * static_cast<double>(p.vocab))
          .to(DType::Int64);
  const Tensor y =
      (rand({p.batch, p.block}, DType::Float32, Device::cpu(), &gen) * static_cast<double>(p.vocab))
          .to(DType::Int64);
  auto step = [&] {
    const Tensor loss = model.loss({x, y});
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double tps = static_cast<double>(p.batch * p.block) / med * 1e3;
  const nlohmann::json j{{"preset", name},
                         {"params", model.num_parameters()},
                         {"ms_per_step", med},
                         {"tokens_per_s", tps}};
  if (a.has("json"))
    std::cout << j.dump() << "\n";
  else
    std::cout << "bench train " << name << ": " << model.num_parameters() << " parameters, " << med
              << " ms/step, " << static_cast<int64_t>(tps) << " tokens/s\n";
  return 0;
}

}  // namespace tessera::cli
