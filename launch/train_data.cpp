#include "tessera/launch/train_data.h"

#include "tessera/engine/data_efficiency_config.h"
#include "tessera/engine/stop_signals.h"
#include "tessera/io/data_loader.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/token_windows.h"
#include "tessera/models/generate.h"
#include "tessera/models/model_registry.h"
#include "tessera/parallel/process_group.h"

namespace tessera::launch {

namespace {

constexpr uint64_t kValSeed = 424242;

using GptLoader = io::RepeatingLoader<io::TokenWindow, models::Batch>;

// Training drops what does not fill a global batch (every step the same shape, and N ranks
// reading exactly what one process reads); evaluation of a split smaller than one global batch
// reads what there is instead.
std::unique_ptr<GptLoader> gpt_batches(const io::TokenFile& tokens, const io::TrainConfig& cfg,
                                       uint64_t seed, int rank, int world, bool train,
                                       const char* what) {
  auto windows = std::make_shared<io::TokenWindows>(tokens, cfg.model.block_size, what);
  const int64_t global = cfg.micro_batch_size * world;
  const bool drop_last = train || windows->size() >= global;
  io::DataLoader<io::TokenWindow, models::Batch> loader(
      windows, {cfg.micro_batch_size, true, seed, rank, world, drop_last},
      [](std::vector<io::TokenWindow> items) {
        auto [x, y] = io::TokenWindows::collate(items);
        return models::Batch{x, y};
      });
  TS_CHECK(loader.size() > 0, what, " has ", windows->size(), " windows of ",
           cfg.model.block_size + 1, " tokens, fewer than one global batch of ", global,
           "; use more text, or a smaller batch or block_size");
  return std::make_unique<GptLoader>(std::move(loader));
}

// BERT's random masking stream, positioned by its generator state.
class BertBatches : public io::BatchSource<models::Batch> {
 public:
  BertBatches(const io::TokenFile& tokens, const io::TrainConfig& cfg,
              const io::TokenizedCorpus& corpus, uint64_t seed, int rank, int world)
      : sampler_(tokens, cfg.micro_batch_size, cfg.model.block_size, corpus.vocab_size,
                 corpus.special_ids, cfg.data.mask_prob, cfg.data.nsp, seed) {
    sampler_.shard(rank, world);
  }
  models::Batch next() override {
    const io::BertBatch b = sampler_.next();
    return {b.input_ids, b.targets, b.attention_mask, b.token_type_ids, b.next_sentence_label};
  }
  nlohmann::json state() const override {
    const GeneratorState s = sampler_.state();
    return {{"seed", s.seed}, {"offset", s.offset}};
  }
  void set_state(const nlohmann::json& state) override {
    const io::JsonFields f(state, "the checkpoint's BERT data position");
    sampler_.set_state({f.unsigned_integer("seed"), f.unsigned_integer("offset")});
  }

 private:
  io::BertBatchSampler sampler_;
};

}  // namespace

bool masked_lm(const io::TrainConfig& cfg) {
  return models::find_model(cfg.model.type).objective == models::Objective::masked_lm;
}

std::unique_ptr<io::BatchSource<models::Batch>> train_batches(const io::TrainConfig& cfg,
                                                              const io::TokenizedCorpus& corpus,
                                                              int rank, int world) {
  if (masked_lm(cfg))  // (data_sampling's clustering metrics are refused for BERT)
    return std::make_unique<BertBatches>(*corpus.train, cfg, corpus, cfg.train.seed + 1, rank,
                                         world);
  if (engine::data_efficiency_config(cfg).data_sampling.curriculum)
    return data_sampling_batches(cfg, corpus, rank, world);
  return gpt_batches(*corpus.train, cfg, cfg.train.seed + 1, rank, world, true,
                     "data.path's training split");
}

std::unique_ptr<io::BatchSource<models::Batch>> val_batches(const io::TrainConfig& cfg,
                                                            const io::TokenizedCorpus& corpus,
                                                            int rank, int world) {
  if (masked_lm(cfg))
    return std::make_unique<BertBatches>(*corpus.val, cfg, corpus, kValSeed, rank, world);
  return gpt_batches(*corpus.val, cfg, kValSeed, rank, world, false,
                     "data.path's validation split");
}

std::map<std::string, std::string> tokenizer_files(const io::TrainConfig& cfg,
                                                   const io::TokenizedCorpus& corpus) {
  nlohmann::json meta{{"kind", corpus.tokenizer_kind}, {"specials", corpus.specials}};
  std::map<std::string, std::string> files;
  if (corpus.tokenizer_kind == "gpt2" && !cfg.data.tokenizer_file.empty()) {
    files["tokenizer/tokenizer.json"] = io::read_text_file(cfg.data.tokenizer_file);
  } else if (corpus.tokenizer_kind == "gpt2") {
    files["tokenizer/vocab.json"] = io::read_text_file(cfg.data.vocab);
    files["tokenizer/merges.txt"] = io::read_text_file(cfg.data.merges);
  } else if (corpus.tokenizer_kind == "wordpiece") {
    files["tokenizer/vocab.txt"] = io::read_text_file(cfg.data.vocab);
    meta["lower_case"] = cfg.data.lower_case;
  } else {
    meta["chars"] = corpus.chars;
  }
  files["tokenizer/tessera_tokenizer.json"] = meta.dump(1) + "\n";
  return files;
}

std::string sample_text(models::PretrainedModel& model, const io::TrainConfig& cfg,
                        const io::TokenizedCorpus& corpus) {
  TS_CHECK(model.context_length() > 0, "sample_text: ", model.type_name(), " does not generate");
  const int64_t T = cfg.model.block_size;
  models::GenerateOptions o;
  o.temperature = 0.8;
  o.top_k = 40;
  o.seed = cfg.train.seed;
  std::vector<int64_t> ctx = corpus.tokenizer->encode("\n");
  if (ctx.empty()) ctx = {0};
  std::string text;
  for (int64_t left = cfg.train.sample_tokens; left > 0; ++o.seed) {
    o.max_new_tokens = std::min<int64_t>(left, T - static_cast<int64_t>(ctx.size()));
    const auto ids = models::generate(model, ctx, o);
    if (ids.empty()) break;
    text += corpus.tokenizer->decode(ids);
    left -= static_cast<int64_t>(ids.size());
    ctx.insert(ctx.end(), ids.begin(), ids.end());
    if (static_cast<int64_t>(ctx.size()) > T / 2) ctx.erase(ctx.begin(), ctx.end() - T / 2);
  }
  return text;
}

io::TokenizedCorpus shared_corpus(const io::TrainConfig& cfg, parallel::ProcessGroup& world) {
  world.set_timeout(cfg.distributed.timeout());
  const bool bert = masked_lm(cfg);  // (BERT's special tokens)
  io::TokenizedCorpus corpus;
  // SIGINT/SIGTERM (the command's StopSignals) stop a long tokenisation between its chunks.
  if (world.rank() == 0)
    corpus = io::prepare_corpus(cfg.data, bert, true,
                                [] { return engine::stop_signal_received() == 0; });
  world.barrier();
  if (world.rank() != 0) corpus = io::prepare_corpus(cfg.data, bert, false);
  return corpus;
}

}  // namespace tessera::launch
