// A DeepSpeedTrial in C++: a small GPT-2 trained through the engine (DeepSpeed's config,
// gradient accumulation, checkpoints), with the engine config driven by hyperparameters the way
// Determined's overwrite_deepspeed_config does it.
//   c++ trial_deepspeed_gpt.cpp $(pkg-config --cflags --libs tessera) -o trial_gpt
//   ./trial_gpt trial_deepspeed_gpt.yaml
// The data is a token sequence with a pattern (token k is (k*k + k/16) mod 16): the model
// learns to predict it. The experiment's hyperparameters "optimizer.params.lr" and
// "gradient_accumulation_steps" override the base config below.
#include <tessera/models/gpt2.h>
#include <tessera/tessera.h>
#include <tessera/trial/deepspeed_config.h>
#include <tessera/trial/run.h>

#include <vector>

namespace ts = tessera;
namespace trial = tessera::trial;

constexpr int64_t kContext = 32, kVocab = 16;

// Window i of the sequence: kContext + 1 tokens (inputs and the next-token targets).
std::shared_ptr<ts::io::Dataset<std::vector<int64_t>>> windows(int64_t count, int64_t offset) {
  return std::make_shared<ts::io::FunctionDataset<std::vector<int64_t>>>(
      count, [offset](int64_t i) {
        std::vector<int64_t> w;
        for (int64_t k = offset + i; k < offset + i + kContext + 1; ++k)
          w.push_back((k * k + k / 16) % kVocab);
        return w;
      });
}

ts::models::Batch collate(std::vector<std::vector<int64_t>> rows) {
  std::vector<int64_t> inputs, targets;
  for (const auto& r : rows) {
    inputs.insert(inputs.end(), r.begin(), r.end() - 1);
    targets.insert(targets.end(), r.begin() + 1, r.end());
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  ts::models::Batch b;
  b.input_ids = ts::from_vector(inputs, {n, kContext});
  b.targets = ts::from_vector(targets, {n, kContext});
  return b;
}

const char* kBaseConfig = R"({
  "train_batch_size": 16, "train_micro_batch_size_per_gpu": 8,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}}
})";

class GptTrial : public trial::DeepSpeedTrial<ts::models::Batch> {
 public:
  explicit GptTrial(trial::DeepSpeedTrialContext& c) : DeepSpeedTrial(c) {
    ts::models::GPT2Config g = ts::models::GPT2Config::named("tiny");
    g.vocab_size = kVocab;
    g.n_positions = kContext;
    model = std::make_shared<ts::models::GPT2LMHeadModel>(g);
    // Hyperparameters named like config keys override the base config (train_batch_size is
    // left to DeepSpeed's batch rule: micro * accumulation * data-parallel ranks).
    nlohmann::json config = trial::overwrite_deepspeed_config(
        nlohmann::json::parse(kBaseConfig), trial::overrides_from_hparams(c.get_hparams()));
    if (config.contains("gradient_accumulation_steps")) config.erase("train_batch_size");
    engine = c.wrap_model_engine(ts::engine::initialize(
        *model, ts::io::TrainConfig::parse(config.dump(), c.get_data_parallel_world_size())));
  }

  trial::DataLoader<ts::models::Batch> build_training_data_loader() override {
    return {windows(4096, 0),
            {.batch_size = context.get_train_micro_batch_size_per_gpu(), .shuffle = true},
            collate};
  }
  trial::DataLoader<ts::models::Batch> build_validation_data_loader() override {
    return {
        windows(64, 100000), {.batch_size = context.get_train_micro_batch_size_per_gpu()}, collate};
  }

  // Called gradient_accumulation_steps times per batch: one micro-batch each.
  trial::BatchMetrics train_batch(trial::DataLoaderIterator<ts::models::Batch>& it, int64_t,
                                  int64_t) override {
    const ts::Tensor loss = engine->forward(it.next());
    engine->backward(loss);
    engine->step();
    return {{"loss", loss}, {"lr", engine->get_lr()[0]}};
  }

  trial::BatchMetrics evaluate_batch(trial::DataLoaderIterator<ts::models::Batch>& it,
                                     int64_t) override {
    return {{"validation_loss", engine->forward(it.next())}};
  }

 private:
  std::shared_ptr<ts::models::GPT2LMHeadModel> model;  // declared first: the engine uses it
  std::shared_ptr<ts::engine::Engine> engine;
};

int main(int argc, char** argv) {
  return trial::run<GptTrial>(argc, argv);
}
