// Trains a GPT-2 of about 3.4M parameters (40 MB of checkpoint) for STEPS steps, then saves
// TAG into DIR over and over until it is killed: the process the kill-mid-save tests
// (tests/engine/test_training.cpp) kill while a save is in progress. A separate program
// rather than fork(): OpenMP's thread pool does not survive fork.
//   checkpoint-writer DIR TAG STEPS
#include <cstdlib>
#include <iostream>

#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"

using namespace tessera;

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: checkpoint-writer DIR TAG STEPS\n";
    return 2;
  }
  manual_seed(9);
  auto c = models::GPT2Config::named("tiny");
  c.n_embd = 256;
  c.n_layer = 4;
  c.n_head = 4;
  models::GPT2LMHeadModel model(c);
  auto engine = engine::initialize(
      model, io::TrainConfig::parse(R"({"train_batch_size": 2, "optimizer": {"type": "AdamW"}})"));
  for (int k = 0; k < std::atoi(argv[3]); ++k) {
    Generator g(77 + static_cast<uint64_t>(k));
    const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    engine->backward(engine->forward(models::Batch{x, x}));
    engine->step();
  }
  for (;;) engine->save_checkpoint(argv[1], argv[2]);
}
