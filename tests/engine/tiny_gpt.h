// A tiny GPT-2 and its engine for the engine tests: micro-batch k is drawn from a generator
// seeded by k, so runs that split, resume or interleave their steps see the same data.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"

namespace tessera::test {

struct TinyGpt {
  std::unique_ptr<models::GPT2LMHeadModel> model;
  std::unique_ptr<engine::Engine> engine;

  // weights_file: a safetensors file the model starts from instead of its random init.
  explicit TinyGpt(const std::string& config, uint64_t seed = 5, double dropout = 0.0,
                   const std::string& weights_file = "") {
    manual_seed(seed);
    auto c = models::GPT2Config::named("tiny");
    c.dropout = dropout;
    model = std::make_unique<models::GPT2LMHeadModel>(c);
    if (!weights_file.empty()) {
      NoGradGuard no_grad;
      model->load_state_dict(io::load_safetensors(weights_file));
    }
    engine = engine::initialize(*model, io::TrainConfig::parse(config));
  }
  // Micro-batch k: `rows` sequences of 8 random ids and targets.
  static models::Batch batch(int64_t k, int64_t rows = 2) {
    Generator g(1000 + static_cast<uint64_t>(k));
    const Tensor x = (rand({rows, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    const Tensor y = (rand({rows, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    return models::Batch{x, y};
  }
  // engine.forward on micro-batch k.
  Tensor loss(int64_t k, int64_t rows = 2) { return engine->forward(batch(k, rows)); }
  // forward, backward and step on micro-batch k; returns its loss.
  double train_step(int64_t k, int64_t rows = 2) {
    const Tensor l = loss(k, rows);
    engine->backward(l);
    engine->step();
    return l.item();
  }
  std::map<std::string, std::vector<double>> weights() const {
    std::map<std::string, std::vector<double>> out;
    for (auto& [name, t] : model->state_dict()) out[name] = t.to_vector();
    return out;
  }
  std::vector<double> grads() const {
    std::vector<double> out;
    for (auto& [name, t] : model->named_parameters())
      for (double v : t->grad().to_vector()) out.push_back(v);
    return out;
  }
};

}  // namespace tessera::test
