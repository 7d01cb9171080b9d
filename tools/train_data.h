// `tessera train`'s (and `tessera profile`'s) model, data and extras for the built-in models:
// the model on its device, the corpus's training and validation batches as Trainer sources,
// the tokenizer files saved with checkpoints, and the text sample printed at the end.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "tessera/io/batch_source.h"
#include "tessera/io/token_data.h"
#include "tessera/io/train_config.h"
#include "tessera/models/pretrained.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/pipeline_module.h"
#include "tessera/parallel/process_group.h"

namespace tessera::cli {

// The config's model (seeded by train.seed, from model.init_from when set) on train.device
// (under a launcher, "cuda" is this rank's local GPU).
std::unique_ptr<models::PretrainedModel> build_model(io::TrainConfig& cfg, int64_t vocab);

// The job's data-parallel and tensor-parallel groups (tensor_parallel.autotp_size adjacent
// ranks share a model; tp is null without tensor parallelism; on CUDA both use NCCL).
struct TrainGroups {
  std::shared_ptr<parallel::ProcessGroup> dp, tp;
};
TrainGroups train_groups(const io::TrainConfig& cfg, std::shared_ptr<parallel::ProcessGroup> world);

// The config's GPT-2 or BERT in tensor parallel over `tp` (seeded by train.seed, initialised
// as the whole model would be, or sharded from model.init_from), on train.device.
std::unique_ptr<nn::Module> build_tensor_parallel_model(io::TrainConfig& cfg, int64_t vocab,
                                                        std::shared_ptr<parallel::ProcessGroup> tp);

// The config's activation_checkpointing section as the runtime's options (the section is
// present when cfg.activation_checkpointing.enabled).
parallel::ActivationCheckpointingOptions activation_checkpointing_options(
    const io::TrainConfig& cfg);

// The config's pipeline section as the built-in models' PipelineModule options: stages,
// partition, and checkpoints of activation_checkpoint_interval transformer blocks (with only
// the activation_checkpointing section, of as many as it groups in one process) through the
// section's options (partition_activations over `tp`, 3D's tensor-parallel group).
parallel::PipelineModuleOptions pipeline_module_options(
    const io::TrainConfig& cfg, std::shared_ptr<parallel::ProcessGroup> tp = nullptr);

// The config's activation_checkpointing section set on the built-in model `model` (whole or
// tensor parallel over `tp`, which may be null); null when the config has no such section.
std::shared_ptr<parallel::ActivationCheckpointing> attach_activation_checkpointing(
    nn::Module& model, const io::TrainConfig& cfg, std::shared_ptr<parallel::ProcessGroup> tp);

// The config's corpus on every rank of `world`: rank 0 tokenises it (or finds the cache), the
// others then read its files; the wait is covered by distributed.timeout_s.
io::TokenizedCorpus shared_corpus(const io::TrainConfig& cfg, parallel::ProcessGroup& world);

// GPT: the corpus's non-overlapping windows through a shuffled DataLoader (seed train.seed + 1,
// this rank's slice of every global batch, drop_last). BERT: its masking sampler's stream.
std::unique_ptr<io::BatchSource<models::Batch>> train_batches(const io::TrainConfig& cfg,
                                                              const io::TokenizedCorpus& corpus,
                                                              int rank, int world);
// The validation split, read the same way from a fixed seed: every evaluation sees the same
// batches, at any rank count.
std::unique_ptr<io::BatchSource<models::Batch>> val_batches(const io::TrainConfig& cfg,
                                                            const io::TokenizedCorpus& corpus,
                                                            int rank, int world);
// The tokenizer, saved with every checkpoint so `tessera export` can write it for HF.
std::map<std::string, std::string> tokenizer_files(const io::TrainConfig& cfg,
                                                   const io::TokenizedCorpus& corpus);
// train.sample_tokens of text from the GPT model, sliding the context past block_size.
std::string sample_text(models::PretrainedModel& model, const io::TrainConfig& cfg,
                        const io::TokenizedCorpus& corpus);

}  // namespace tessera::cli
