// curriculum_learning's batches (train_data.h): each cut to the step's sequence length.
#include "tessera/engine/data_efficiency_config.h"
#include "tessera/launch/train_data.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::launch {

namespace {

class CurriculumBatches : public io::BatchSource<models::Batch> {
 public:
  // `section`: the config section whose schedule sets the length (for messages).
  CurriculumBatches(std::unique_ptr<io::BatchSource<models::Batch>> batches, engine::Engine& engine,
                    int64_t sequence_ranks, std::string section)
      : batches_(std::move(batches)),
        engine_(engine),
        sequence_ranks_(sequence_ranks),
        section_(std::move(section)) {}

  models::Batch next() override {
    models::Batch b = batches_->next();
    const int64_t step = engine_.global_steps();
    const int64_t seqlen = *engine_.curriculum_seqlen(step);
    if (b.input_ids.dim() != 2 || b.input_ids.size(1) <= seqlen) return b;
    TS_CHECK(seqlen % sequence_ranks_ == 0, section_, ": step ", step, " trains sequences of ",
             seqlen, " tokens, which do not split over the ", sequence_ranks_,
             " sequence-parallel ranks (tensor_parallel.autotp_size); make min_difficulty, "
             "max_difficulty and schedule_config.difficulty_step (or each fixed_discrete "
             "difficulty) multiples of it");
    return b.first_positions(seqlen);
  }
  nlohmann::json state() const override { return batches_->state(); }
  void set_state(const nlohmann::json& state) override { batches_->set_state(state); }
  std::optional<int64_t> epoch_batches() const override { return batches_->epoch_batches(); }

 private:
  std::unique_ptr<io::BatchSource<models::Batch>> batches_;
  engine::Engine& engine_;
  int64_t sequence_ranks_;
  std::string section_;
};

}  // namespace

std::unique_ptr<io::BatchSource<models::Batch>> curriculum_batches(
    std::unique_ptr<io::BatchSource<models::Batch>> batches, engine::Engine& engine,
    const io::TrainConfig& cfg) {
  if (!engine.curriculum_seqlen()) return batches;  // (no curriculum_learning: as they are)
  const parallel::TensorParallelConfig& tp = parallel::tensor_parallel_config(cfg);
  // (the legacy section, or the data-efficiency sampler's seqlen_truncate metric)
  const bool legacy = engine::curriculum_learning_config(cfg).enabled;
  return std::make_unique<CurriculumBatches>(
      std::move(batches), engine, tp.sequence_parallel ? tp.autotp_size : 1,
      legacy ? "curriculum_learning"
             : "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics."
               "seqlen_truncate");
}

}  // namespace tessera::launch
