// PipelineEngine's dropout alignment: each stage draws its masks at the generator offsets one
// process running the whole model on the same micro-batches reaches, learnt on the first
// training batch.
#include "tessera/engine/pipeline_engine.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::engine {

using parallel::PipeValue;

// The generator offset of this stage's first draw for `micro_batch` in `chunk`, as one process
// would reach it: the batch's start, the micro-batches before, the parts before.
void PipelineEngine::position_rng(int64_t micro_batch, int64_t chunk) {
  if (micro_batch > 0)
    TS_CHECK(rng_per_micro_batch_ >= 0, "PipelineEngine: dropout offsets not learnt yet");
  const int64_t before = micro_batch * std::max<int64_t>(rng_per_micro_batch_, 0);
  const int64_t parts_before = rng_before_chunk_[static_cast<size_t>(chunk)];
  default_generator().set_state(
      {rng_base_.seed, rng_base_.offset + static_cast<uint64_t>(before + parts_before)});
}

// With chunks, on the first training batch: micro-batch 0's forward through every part in
// order (train mode, nothing recorded) counts each part's draws; then every stage knows where
// each of its chunks' draws start. (The chained count of one chunk per stage cannot serve: a
// stage's later micro-batches of chunk 0 run before its chunk 1 has seen micro-batch 0.) The
// first stage keeps the micro-batch it loaded for the schedule's own load.
void PipelineEngine::count_chunk_draws(const PipeDataIterator& data) {
  NoGradGuard no_grad;
  const int64_t v = module_.virtual_stages();
  std::vector<int64_t> mine(static_cast<size_t>(v));
  for (int64_t c = 0; c < v; ++c) {
    PipeValue x;
    if (first_part(c)) {
      loaded_first_ = load(data);
      x = loaded_first_->inputs;
    } else {
      x = recv(previous_stage(), true, c);
    }
    const uint64_t from = default_generator().state().offset;
    PipeValue y = module_.forward(x, c);
    mine[static_cast<size_t>(c)] = static_cast<int64_t>(default_generator().state().offset - from);
    if (!last_part(c)) send(y, next_stage(), true, c);
  }
  learn_draw_offsets(mine);
}

// Every part's draws per micro-batch (this stage's chunks' are `mine`), gathered: where each
// of this stage's chunks starts drawing, and the whole pipeline's count.
void PipelineEngine::learn_draw_offsets(const std::vector<int64_t>& mine) {
  rng_calibrating_ = false;
  const int64_t v = module_.virtual_stages(), p = module_.num_stages();
  Tensor all = zeros({p * v}, DType::Int64, Device::cpu());
  pipe_->all_gather_async(all, from_vector(mine, {v}, DType::Int64)).wait();
  const int64_t* counts = all.data<int64_t>();  // stage-major: stage q's chunks
  rng_per_micro_batch_ = 0;
  rng_before_chunk_.assign(static_cast<size_t>(v), 0);
  for (int64_t part = 0; part < p * v; ++part) {
    const int64_t count = counts[(part % p) * v + part / p];
    for (int64_t c = 0; c < v; ++c)
      if (part < module_.part_of(c)) rng_before_chunk_[static_cast<size_t>(c)] += count;
    rng_per_micro_batch_ += count;
  }
}

// On the first training batch, after this stage's forward of micro-batch 0 has gone on: the
// stages' counts, so each knows where its draws start (every stage reaches this before any
// needs another stage's later messages, so the collective cannot deadlock).
void PipelineEngine::calibrate_rng() {
  learn_draw_offsets({rng_this_stage_});
}

}  // namespace tessera::engine
