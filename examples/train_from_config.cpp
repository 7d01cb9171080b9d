// A training job of the built-in models from a config, assembled as `tessera train` assembles
// it: launch::build reads the layout (whole model, tensor parallel, pipeline, 3D) from the
// config and returns the groups, the model or pipeline stage, the engine and the corpus.
//   c++ train_from_config.cpp $(pkg-config --cflags --libs tessera) -o train_from_config
//   ./train_from_config [CONFIG.json]        (mpirun -np N for a config of N ranks)
// Without a config it writes a small corpus and a character-level GPT config of its own,
// trains 40 steps and checks that the validation loss fell.
#include <tessera/engine/pipeline_trainer.h>
#include <tessera/engine/trainer.h>
#include <tessera/launch/job.h>
#include <tessera/parallel/process_group.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace ts = tessera;

namespace {

const char* kConfig = R"({
  "train_batch_size": 8,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
  "model": {"type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 32},
  "data": {"path": "train_from_config_corpus.txt", "tokenizer": "char"},
  "train": {"steps": 40, "seed": 1, "eval_iters": 4}
})";

// Lines of counting in words: a corpus with structure a small model learns in a few steps.
void write_corpus(const std::string& path) {
  const char* words[] = {"zero", "one", "two", "three", "four", "five", "six", "seven"};
  std::ofstream out(path);
  for (int i = 0; i < 3000; ++i) out << words[i % 8] << " then " << words[(i + 1) % 8] << ".\n";
}

}  // namespace

int main(int argc, char** argv) try {
  auto world = ts::parallel::world();
  ts::io::TrainConfig cfg;
  if (argc > 1) {
    cfg = ts::launch::read_config(argv[1], world->size());
  } else {
    if (world->rank() == 0) write_corpus("train_from_config_corpus.txt");
    world->barrier();
    cfg = ts::io::TrainConfig::parse(kConfig, world->size(), "train_from_config's config");
  }
  const std::unique_ptr<ts::launch::Job> job = ts::launch::build(cfg, world);
  if (world->rank() == 0) std::printf("%s\n", job->summary().c_str());
  auto data = job->train_batches();
  auto options = ts::engine::TrainerOptions::from_config(job->config);
  options.tokens_per_sample = job->config.model.block_size;
  auto eval = [&job] { return job->val_batches(); };
  ts::engine::TrainResult first, last;
  auto fit = [&](int64_t steps) {  // (a Trainer continues from its engine's step)
    options.steps = steps;
    if (job->is_pipeline()) {
      ts::engine::PipelineTrainer<ts::models::Batch> trainer(
          *job->pipeline_engine, *data,
          [&job](const ts::models::Batch& b) { return job->pipe_micro_batch(b); }, options);
      trainer.set_eval_data(eval);
      return trainer.fit();
    }
    ts::engine::Trainer<ts::models::Batch> trainer(*job->engine, *data, options);
    trainer.set_eval_data(eval);
    return trainer.fit();
  };
  first = fit(1);
  last = fit(job->config.train.steps);
  if (world->rank() == 0)
    std::printf("validation loss %.4f after step 1, %.4f after step %lld\n", first.val_loss,
                last.val_loss, static_cast<long long>(last.step));
  return last.val_loss < first.val_loss ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_from_config: %s\n", e.what());
  return 1;
}
