// The pipeline schedule registry: every "pipeline.schedule" a config can name (1F1B,
// ZB-H1, interleaved, and any a program registers), each an entry holding what it takes
// (virtual stages: model chunks per stage; stages; micro-batches) and its factory. The config check
// (`check_pipeline_schedule`, run by io's config reader), the PipelineEngine, the memory
// estimate and `tessera pipeline-schedules` / docs/parallelism.md's table read the same entry.
//
//   auto schedule = parallel::find_pipe_schedule("zb-h1").build(8, 4, stage_id, 1);
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/train_config.h"
#include "tessera/parallel/pipe_schedule.h"

namespace tessera::parallel {

struct PipeScheduleEntry {
  std::string type;  // pipeline.schedule
  std::string doc;
  // pipeline.virtual_stages (model chunks per stage): the range it takes (max 0: no limit) and
  // the default when the config leaves it out.
  int64_t min_virtual_stages = 1, max_virtual_stages = 1, default_virtual_stages = 1;
  int64_t min_stages = 1;
  // Megatron's interleaved condition: a step's micro-batches a multiple of the stages.
  bool micro_batches_multiple_of_stages = false;
  // Stage `stage_id`'s instruction stream for a step of `micro_batches`.
  std::function<std::unique_ptr<PipeSchedule>(int64_t micro_batches, int64_t stages,
                                              int64_t stage_id, int64_t virtual_stages)>
      build;
  bool takes_virtual_stages(int64_t v) const {
    return v >= min_virtual_stages && (max_virtual_stages == 0 || v <= max_virtual_stages);
  }
};

// The entry of `type`; an unknown one is an error listing the registered types.
const PipeScheduleEntry& find_pipe_schedule(const std::string& type);
bool has_pipe_schedule(const std::string& type);
std::vector<std::string> registered_pipe_schedules();  // in registration order
std::string registered_pipe_schedule_list();           // "1f1b, zb-h1, interleaved"
void register_pipe_schedule(PipeScheduleEntry entry);  // a type registered twice is an error
// "the interleaved schedule": the schedules that take more than one model chunk per stage.
std::string virtual_stage_pipe_schedules_text();

// Checks a config's pipeline section against its schedule's entry (errors name the key and
// the file) and gives pipeline.virtual_stages the schedule's default when it was left out.
// It is the pipeline section's check (pipeline_config.h): io's config reader runs it on every
// file.
void check_pipeline_schedule(io::TrainConfig& cfg);
// pipeline.virtual_stages, or its schedule's default when left out (0).
int64_t pipeline_virtual_stages(const io::TrainConfig& cfg);

}  // namespace tessera::parallel
