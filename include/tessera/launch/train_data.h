// The built-in models' data: the config's corpus on every rank, its training and validation
// batches as Trainer sources, the tokenizer files saved with checkpoints, and the text sample
// printed at the end of a GPT run.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "tessera/engine/engine.h"
#include "tessera/io/batch_source.h"
#include "tessera/io/token_data.h"
#include "tessera/io/train_config.h"
#include "tessera/models/pretrained.h"
#include "tessera/parallel/process_group.h"

namespace tessera::launch {

// The config's corpus on every rank of `world`: rank 0 tokenises it (or finds the cache), the
// others then read its files; the wait is covered by distributed.timeout_s.
io::TokenizedCorpus shared_corpus(const io::TrainConfig& cfg, parallel::ProcessGroup& world);

// Whether the config's model trains on masked-LM batches (its registry entry's objective).
bool masked_lm(const io::TrainConfig& cfg);

// A causal LM: the corpus's non-overlapping windows through a shuffled DataLoader (seed
// train.seed + 1, this rank's slice of every global batch, drop_last). A masked LM (BERT): its
// masking sampler's stream.
std::unique_ptr<io::BatchSource<models::Batch>> train_batches(const io::TrainConfig& cfg,
                                                              const io::TokenizedCorpus& corpus,
                                                              int rank, int world);
// data_efficiency.data_sampling's curriculum (engine/data_sampling_config.h), which a causal
// LM's train_batches follows when it is on: the windows as DeepSpeed's sampler draws them
// (io/curriculum_data_sampler.h; metrics Tessera computes are cached under the token cache's
// metrics/), each step folded into rows of the seqlen_reshape metric's length. (The
// seqlen_truncate metric is the engine's curriculum: curriculum_batches cuts to it, for BERT
// too.)
std::unique_ptr<io::BatchSource<models::Batch>> data_sampling_batches(
    const io::TrainConfig& cfg, const io::TokenizedCorpus& corpus, int rank, int world);
// The validation split, read the same way from a fixed seed: every evaluation sees the same
// batches, at any rank count.
std::unique_ptr<io::BatchSource<models::Batch>> val_batches(const io::TrainConfig& cfg,
                                                            const io::TokenizedCorpus& corpus,
                                                            int rank, int world);
// curriculum_learning (or data_sampling's seqlen_truncate metric): `batches` cut to the
// sequence length the engine's curriculum gives the step each batch is drawn for (the Trainer draws
// a step's micro-batches just before their forwards); `batches` themselves when the engine has no
// curriculum. Errors name the step and the keys when the length does not split over the
// sequence-parallel ranks.
std::unique_ptr<io::BatchSource<models::Batch>> curriculum_batches(
    std::unique_ptr<io::BatchSource<models::Batch>> batches, engine::Engine& engine,
    const io::TrainConfig& cfg);
// The tokenizer, saved with every checkpoint so `tessera export` can write it for HF.
std::map<std::string, std::string> tokenizer_files(const io::TrainConfig& cfg,
                                                   const io::TokenizedCorpus& corpus);
// train.sample_tokens of text from a causal LM (context_length() > 0), sliding the context past
// block_size.
std::string sample_text(models::PretrainedModel& model, const io::TrainConfig& cfg,
                        const io::TokenizedCorpus& corpus);

}  // namespace tessera::launch
