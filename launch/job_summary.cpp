// The start-up line of a built job: what was assembled, so a wrong layout shows before the
// first step.
#include <omp.h>

#include <sstream>

#include "tessera/launch/job.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::launch {

namespace {

void describe_pipeline(std::ostream& out, const Job& job) {
  const io::TrainConfig& cfg = job.config;
  const parallel::PipelineModule& model = *job.pipeline_module;
  const parallel::PipelineConfig& pipe = parallel::pipeline_config(cfg);
  const int64_t tp = parallel::tensor_parallel_config(cfg).autotp_size, v = model.virtual_stages();
  const auto& b = model.bounds();
  out << cfg.model.type << " pipeline: " << pipe.stages << " stages x " << job.data_size()
      << " data-parallel"
      << (tp > 1 ? " x " + std::to_string(tp) + " tensor-parallel" : std::string()) << ", "
      << pipe.schedule << " schedule, layers per "
      << (v > 1 ? "part (stage s holds parts s, s + stages, ...):" : "stage:");
  for (size_t s = 0; s + 1 < b.size(); ++s) out << " " << b[s + 1] - b[s];
  out << " (partition " << pipe.partition << ")";
  if (const int64_t k = model.options().activation_checkpoint_interval; k > 0)
    out << ", activation checkpoints of " << k << " layer" << (k > 1 ? "s" : "");
  out << ", vocab " << job.corpus.vocab_size;
  if (tp > 1 && job.corpus.vocab_size % tp != 0)  // (Megatron's padding: no probability)
    out << " (padded to " << (job.corpus.vocab_size + tp - 1) / tp * tp << " over " << tp
        << " tensor-parallel ranks)";
  out << ", block " << cfg.model.block_size << ", batch " << cfg.train_batch_size << " ("
      << cfg.micro_batch_size << " x " << cfg.gradient_accumulation_steps << " micro-batches), "
      << job.pipeline_engine->optimizer().name() << ", " << cfg.train.steps << " steps";
}

void describe_model(std::ostream& out, Job& job) {
  const io::TrainConfig& cfg = job.config;
  const auto& tp = job.groups.tensor;
  const int world = job.groups.world->size();
  nn::Module& model = job.model();
  out << model.type_name() << ": " << model.num_parameters()
      << (tp ? " parameters on each of " + std::to_string(tp->size()) + " tensor-parallel ranks"
             : std::string(" parameters"))
      << ", vocab " << job.corpus.vocab_size << ", block " << cfg.model.block_size << ", batch "
      << cfg.train_batch_size << " (" << cfg.micro_batch_size << " x "
      << cfg.gradient_accumulation_steps << " accumulation), " << job.engine->optimizer().name()
      << ", " << cfg.train.steps << " steps"
      << (world > 1 ? ", " + std::to_string(world) + " ranks" : "")
      << (tp ? " (" + std::to_string(job.data_size()) + " data-parallel)" : std::string())
      << (job.engine->zero_stage() > 0 ? ", ZeRO stage " + std::to_string(job.engine->zero_stage())
                                       : "");
}

}  // namespace

std::string Job::summary() {
  std::ostringstream out;
  if (pipeline_engine)
    describe_pipeline(out, *this);
  else
    describe_model(out, *this);
  out << ", " << omp_get_max_threads() << " thread(s) per rank";
  return out.str();
}

}  // namespace tessera::launch
