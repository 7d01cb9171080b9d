#include "tessera/error.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/trial/deepspeed_config.h"
#include "tessera/trial/trial.h"

namespace tessera::trial {

DeepSpeedTrialContext::DeepSpeedTrialContext(TrialInfo info) : TrialContext(std::move(info)) {
  mpu_.data_parallel_rank = distributed.rank;
  mpu_.data_parallel_world_size = distributed.size;
}

std::shared_ptr<engine::Engine> DeepSpeedTrialContext::wrap_model_engine(
    std::shared_ptr<engine::Engine> engine) {
  TS_CHECK(engine, "context.wrap_model_engine: no engine");
  TS_CHECK(engine->world_size() == mpu_.data_parallel_world_size,
           "context.wrap_model_engine: the engine's data-parallel group has ", engine->world_size(),
           " ranks, the trial ", mpu_.data_parallel_world_size,
           " data-parallel slots (set_mpu for model parallelism)");
  TS_CHECK(info_.config.aggregation_frequency == 1, "optimizations.aggregation_frequency is ",
           info_.config.aggregation_frequency,
           ": a DeepSpeedTrial accumulates gradients with the engine's "
           "gradient_accumulation_steps instead");
  engines_.push_back(std::move(engine));
  return engines_.back();
}

void DeepSpeedTrialContext::set_mpu(ModelParallelUnit mpu) {
  TS_CHECK(mpu.data_parallel_world_size >= 1 && mpu.data_parallel_rank >= 0 &&
               mpu.data_parallel_rank < mpu.data_parallel_world_size,
           "context.set_mpu: data-parallel rank ", mpu.data_parallel_rank, " of ",
           mpu.data_parallel_world_size);
  mpu_ = mpu;
}

int64_t DeepSpeedTrialContext::get_train_micro_batch_size_per_gpu() const {
  TS_CHECK(!engines_.empty(),
           "context.get_train_micro_batch_size_per_gpu: wrap an engine first "
           "(context.wrap_model_engine)");
  return engines_.front()->config().micro_batch_size;
}

int64_t DeepSpeedTrialContext::get_num_micro_batches_per_slot() const {
  TS_CHECK(!engines_.empty(),
           "context.get_num_micro_batches_per_slot: wrap an engine first "
           "(context.wrap_model_engine)");
  return engines_.front()->config().gradient_accumulation_steps;
}

int64_t DeepSpeedTrialContext::engine_global_batch_size() const {
  return engines_.empty() ? 0 : engines_.front()->config().train_batch_size;
}

io::TrainConfig DeepSpeedTrialContext::deepspeed_config(const std::string& base_path,
                                                        const nlohmann::json& overrides) const {
  io::TrainConfig c =
      io::TrainConfig::parse(overwrite_deepspeed_config(base_path, overrides).dump(),
                             mpu_.data_parallel_world_size, base_path);
  TS_CHECK(parallel::pipeline_config(c).stages == 1, base_path, ": pipeline.stages ",
           parallel::pipeline_config(c).stages,
           ": DeepSpeedTrial's engines do not run pipelines yet (tessera train does)");
  return c;
}

}  // namespace tessera::trial
