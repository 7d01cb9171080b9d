// data_efficiency.data_sampling's batches (train_data.h): DeepSpeed's curriculum sampler over
// a causal LM's windows, folded to its seqlen_reshape metric's length each step.
#include <filesystem>

#include "tessera/engine/data_efficiency_config.h"
#include "tessera/io/curriculum_data_sampler.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/token_windows.h"
#include "tessera/io/window_metrics.h"
#include "tessera/launch/train_data.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::launch {

namespace {

const std::string kKey = "data_efficiency.data_sampling.curriculum_learning.curriculum_metrics";

// seqlen_reshape: each step's micro-batch folded into rows of the metric's length, every token
// kept (a causal LM's inputs and targets only). (seqlen_truncate is the engine's curriculum.)
class SequenceReshape {
 public:
  SequenceReshape(const engine::CurriculumMetricConfig* metric, const io::TrainConfig& cfg)
      : block_(cfg.model.block_size) {
    if (!metric || metric->name != "seqlen_reshape") return;
    scheduler_.emplace(metric->schedule);
    const parallel::TensorParallelConfig& tp = parallel::tensor_parallel_config(cfg);
    sequence_ranks_ = tp.sequence_parallel ? tp.autotp_size : 1;
    check_lengths(metric->schedule);
  }

  // (curriculum step c sees the schedule's update_difficulty(c), c = step + 1)
  models::Batch apply(models::Batch b, int64_t step) {
    if (!scheduler_) return b;
    const int64_t L = scheduler_->difficulty_for_step(step);
    if (b.input_ids.dim() != 2 || b.input_ids.size(1) <= L) return b;
    TS_CHECK(L % sequence_ranks_ == 0, kKey, ": curriculum step ", step + 1,
             " trains sequences of ", L, " tokens, which do not split over the ", sequence_ranks_,
             " sequence-parallel ranks (tensor_parallel.autotp_size)");
    const int64_t rows = b.input_ids.size(0) * b.input_ids.size(1) / L;
    return {b.input_ids.contiguous().reshape({rows, L}), b.targets.contiguous().reshape({rows, L})};
  }

 private:
  // Every length the schedule reaches must divide block_size (rows of L tokens); checked
  // before training rather than at the step that would fail.
  void check_lengths(const engine::CurriculumLearningConfig& s) const {
    std::vector<int64_t> lengths = s.difficulty;
    if (s.schedule_type != "fixed_discrete") {
      engine::CurriculumScheduler probe(s);
      const int64_t last = std::min<int64_t>(s.total_curriculum_step, 10'000'000);
      for (int64_t t = 1; t <= last + 1; ++t) lengths.push_back(probe.scheduled(t));
    }
    for (int64_t L : lengths) {
      const int64_t capped = std::min(L, s.max_difficulty);
      TS_CHECK(capped < 1 || block_ % capped == 0, kKey, ".seqlen_reshape: the schedule reaches ",
               capped, " tokens, which does not divide model.block_size (", block_,
               "); pick difficulties (difficulty_step) that divide it");
    }
  }

  int64_t block_;
  std::optional<engine::CurriculumScheduler> scheduler_;
  int64_t sequence_ranks_ = 1;
};

io::CurriculumMetric load_metric(const engine::CurriculumMetricConfig& m,
                                 const io::TrainConfig& cfg, const io::TokenizedCorpus& corpus) {
  io::CurriculumMetric out;
  out.name = kKey + "." + m.name;
  out.percentile = m.difficulty_type == "percentile";
  out.max_difficulty = m.schedule.max_difficulty;
  out.single_cluster = m.clustering_type == "single_cluster";
  if (out.single_cluster) return out;
  if (m.index_to_sample_path.empty()) {
    const io::MetricIndex made =
        io::cached_window_metric((std::filesystem::path(corpus.cache_dir) / "metrics").string(),
                                 m.name, *corpus.train, cfg.model.block_size);
    out.index_to_sample = made.index_to_sample;
    out.index_to_metric = made.index_to_metric;
    return out;
  }
  out.index_to_sample =
      io::read_indexed_dataset(m.index_to_sample_path, "'" + out.name + ".index_to_sample_path'");
  if (m.difficulty_type == "value")
    out.index_to_metric =
        io::read_metric_values(m.index_to_metric_path, "'" + out.name + ".index_to_metric_path'");
  return out;
}

// A causal LM's windows in the order the sampler draws them: each step's global batch (micro
// x data ranks x accumulation steps) is computed alike on every rank; micro-batch m of a step
// gives rank r the samples [(m * ranks + r) * micro, ... + micro).
class SampledWindows : public io::BatchSource<models::Batch> {
 public:
  SampledWindows(const io::TrainConfig& cfg, const io::TokenizedCorpus& corpus, int rank, int world)
      : windows_(*corpus.train, cfg.model.block_size, "data.path's training split"),
        micro_(cfg.micro_batch_size),
        rank_(rank),
        world_(world),
        accumulation_(cfg.gradient_accumulation_steps),
        data_sampling_(data_sampling_of(cfg)),
        reshape_(data_sampling().sequence_metric(), cfg),
        sampler_(windows_.size(), metrics(cfg, corpus), micro_ * world * accumulation_,
                 static_cast<uint64_t>(engine::data_efficiency_config(cfg).seed)) {
    const engine::DataSamplingConfig& d = data_sampling();
    limit_ =
        d.num_epochs > INT64_MAX / windows_.size() ? INT64_MAX : d.num_epochs * windows_.size();
    for (const engine::CurriculumMetricConfig& m : d.metrics)
      if (!m.sequence_length()) schedulers_.emplace_back(m.schedule);
    const int64_t global = micro_ * world_ * accumulation_;
    TS_CHECK(limit_ == INT64_MAX || cfg.train.steps <= limit_ / global,
             "data_efficiency.data_sampling.num_epochs is ", d.num_epochs, ": ", cfg.train.steps,
             " steps (train.steps) of ", global, " samples read more than its ", limit_, " (",
             windows_.size(), " training windows per epoch); raise num_epochs");
  }

  models::Batch next() override {
    if (pending_.empty()) draw();
    const int64_t step = sampler_.step() - 1;
    std::vector<io::TokenWindow> items;
    const size_t at = static_cast<size_t>(rank_ * micro_);
    for (size_t i = at; i < at + static_cast<size_t>(micro_); ++i)
      items.push_back(windows_.get(pending_[i]));
    pending_.erase(pending_.begin(), pending_.begin() + micro_ * world_);
    auto [x, y] = io::TokenWindows::collate(items);
    return reshape_.apply(models::Batch{x, y}, step);
  }
  nlohmann::json state() const override {
    return {{"sampler", sampler_.state()}, {"pending", pending_}};
  }
  void set_state(const nlohmann::json& state) override {
    const io::JsonFields f(state, "the checkpoint's data_sampling position");
    TS_CHECK(state.contains("sampler") && state.contains("pending") && state["pending"].is_array(),
             "the checkpoint's data position is not data_sampling's (was it saved without "
             "data_efficiency.data_sampling?)");
    sampler_.set_state(state["sampler"]);
    pending_.clear();
    for (const auto& id : state["pending"]) {
      TS_CHECK(
          id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < windows_.size(),
          "the checkpoint's data_sampling position names window ", id.dump(), " of ",
          windows_.size());
      pending_.push_back(id.get<int64_t>());
    }
    TS_CHECK(pending_.size() % static_cast<size_t>(micro_ * world_) == 0,
             "the checkpoint's data_sampling position holds ", pending_.size(),
             " pending samples, not whole micro-batches of ", micro_ * world_,
             " (another batch size or rank count?)");
  }
  std::optional<int64_t> epoch_batches() const override {
    return std::max<int64_t>(1, windows_.size() / (micro_ * world_));
  }

 private:
  static const engine::DataSamplingConfig& data_sampling_of(const io::TrainConfig& cfg) {
    return engine::data_efficiency_config(cfg).data_sampling;
  }
  const engine::DataSamplingConfig& data_sampling() const { return data_sampling_; }
  static std::vector<io::CurriculumMetric> metrics(const io::TrainConfig& cfg,
                                                   const io::TokenizedCorpus& corpus) {
    std::vector<io::CurriculumMetric> out;
    for (const engine::CurriculumMetricConfig& m : data_sampling_of(cfg).metrics)
      if (!m.sequence_length()) out.push_back(load_metric(m, cfg, corpus));
    // (the sequence-length metric only sets lengths: a sampler without clustering metrics
    // reads all windows as one cluster)
    if (out.empty()) out.push_back(io::CurriculumMetric{kKey, false, true, 0, {}, {}});
    return out;
  }

  void draw() {
    const int64_t step = sampler_.step();  // the draw is curriculum step step + 1
    const int64_t global = micro_ * world_ * accumulation_;
    TS_CHECK(limit_ == INT64_MAX || (limit_ >= global && step <= (limit_ - global) / global),
             "data_efficiency.data_sampling.num_epochs is ", data_sampling().num_epochs, ": its ",
             limit_, " samples are used up at curriculum step ", step + 1,
             "; raise num_epochs or train fewer steps");
    std::vector<int64_t> difficulties;
    for (auto& s : schedulers_) difficulties.push_back(s.difficulty_for_step(step));
    if (difficulties.empty()) difficulties.push_back(0);  // (the all-windows cluster)
    pending_ = sampler_.next_global_batch(difficulties);
  }

  io::TokenWindows windows_;
  int64_t micro_;
  int rank_, world_;
  int64_t accumulation_;
  engine::DataSamplingConfig data_sampling_;  // (a copy: the source may outlive the config)
  SequenceReshape reshape_;
  io::CurriculumDataSampler sampler_;
  std::vector<engine::CurriculumScheduler> schedulers_;
  std::vector<int64_t> pending_;
  int64_t limit_ = 0;
};

}  // namespace

std::unique_ptr<io::BatchSource<models::Batch>> data_sampling_batches(
    const io::TrainConfig& cfg, const io::TokenizedCorpus& corpus, int rank, int world) {
  return std::make_unique<SampledWindows>(cfg, corpus, rank, world);
}

}  // namespace tessera::launch
