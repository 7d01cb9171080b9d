// What the launch tests share: a small corpus every rank of the job reads, and each step's
// loss of a config's job built through launch::build (whole, tensor parallel or a pipeline).
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared_temp_dir.h"
#include "tessera/launch/job.h"

namespace tessera::test {

// A corpus all ranks of the job share (named after rank 0's process id), removed at the end.
struct SharedCorpus {
  std::shared_ptr<parallel::ProcessGroup> world = parallel::world();
  std::filesystem::path dir;
  explicit SharedCorpus(const std::string& name) : dir(shared_temp_dir(name)) {
    if (world->rank() == 0) {
      std::filesystem::create_directories(dir);
      std::ofstream f(dir / "corpus.txt");
      for (int i = 0; i < 60; ++i) f << "an mlp reads one token at a time, " << i * 7 << "\n";
    }
    world->barrier();
  }
  SharedCorpus(const SharedCorpus&) = delete;
  ~SharedCorpus() {
    world->barrier();
    if (world->rank() == 0) std::filesystem::remove_all(dir);
  }
  nlohmann::json data() const {
    return {{"path", (dir / "corpus.txt").string()},
            {"tokenizer", "char"},
            {"cache_dir", (dir / "cache").string()}};
  }
};

// Each step's loss (the mean over the global batch) of the config's job over `group`.
inline std::vector<double> train_losses(const nlohmann::json& config,
                                        std::shared_ptr<parallel::ProcessGroup> group, int steps) {
  auto job = launch::build(launch::parse_config(config.dump(), group->size(), "test"), group);
  const auto batches = job->train_batches();
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    if (job->is_pipeline()) {
      losses.push_back(job->pipeline_engine->train_batch(
          [&] { return job->pipe_micro_batch(batches->next()); }));
      continue;
    }
    double sum = 0;
    const int64_t micro = job->config.gradient_accumulation_steps;
    for (int64_t m = 0; m < micro; ++m) {
      const Tensor loss = job->engine->forward(batches->next());
      sum += loss.item();
      job->engine->backward(loss);
      job->engine->step();
    }
    losses.push_back(job->groups.data->all_reduce_scalar(sum / micro) / job->data_size());
  }
  return losses;
}

}  // namespace tessera::test
