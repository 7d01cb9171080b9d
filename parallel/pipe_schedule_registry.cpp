#include "tessera/parallel/pipe_schedule_registry.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/named_registry.h"
#include "tessera/parallel/pipeline_config.h"

namespace tessera::parallel {

namespace {

std::vector<PipeScheduleEntry> builtin_pipe_schedules() {
  PipeScheduleEntry one_f_one_b{
      .type = "1f1b",
      .doc = "DeepSpeed's TrainSchedule: one forward, one backward in the steady state",
      .build = [](int64_t m, int64_t s, int64_t id, int64_t) {
        return std::unique_ptr<PipeSchedule>(std::make_unique<TrainSchedule>(m, s, id));
      }};
  PipeScheduleEntry zb_h1{
      .type = "zb-h1",
      .doc =
          "zero-bubble H1: each backward in two halves, the weight half filling 1F1B's bubble "
          "at 1F1B's activation memory",
      .build = [](int64_t m, int64_t s, int64_t id, int64_t) {
        return std::unique_ptr<PipeSchedule>(std::make_unique<ZeroBubbleH1Schedule>(m, s, id));
      }};
  PipeScheduleEntry interleaved{
      .type = "interleaved",
      .doc =
          "Megatron's interleaved 1F1B over virtual_stages model chunks per stage (a smaller "
          "bubble)",
      .min_virtual_stages = 2,
      .max_virtual_stages = 0,
      .default_virtual_stages = 2,
      .min_stages = 2,
      .micro_batches_multiple_of_stages = true,
      .build = [](int64_t m, int64_t s, int64_t id, int64_t virtual_stages) {
        return std::unique_ptr<PipeSchedule>(
            std::make_unique<InterleavedSchedule>(m, s, id, virtual_stages));
      }};
  return {one_f_one_b, zb_h1, interleaved};
}

NamedRegistry<PipeScheduleEntry>& pipe_schedule_registry() {
  static NamedRegistry<PipeScheduleEntry> r("pipeline schedule", builtin_pipe_schedules());
  return r;
}

}  // namespace

const PipeScheduleEntry& find_pipe_schedule(const std::string& type) {
  return pipe_schedule_registry().find(type);
}
bool has_pipe_schedule(const std::string& type) {
  return pipe_schedule_registry().has(type);
}
std::vector<std::string> registered_pipe_schedules() {
  return pipe_schedule_registry().types();
}
std::string registered_pipe_schedule_list() {
  return pipe_schedule_registry().list();
}
void register_pipe_schedule(PipeScheduleEntry entry) {
  TS_CHECK(entry.min_virtual_stages >= 1 && entry.min_stages >= 1 &&
               entry.takes_virtual_stages(entry.default_virtual_stages),
           "parallel::register_pipe_schedule: '", entry.type,
           "' needs min_virtual_stages and min_stages >= 1 and a default_virtual_stages it takes");
  pipe_schedule_registry().add(std::move(entry), "parallel::register_pipe_schedule");
}

std::string virtual_stage_pipe_schedules_text() {
  std::vector<std::string> types;
  for (const std::string& t : registered_pipe_schedules())
    if (find_pipe_schedule(t).takes_virtual_stages(2)) types.push_back(t);
  if (types.empty()) return "no registered schedule";
  std::string out = types.size() == 1 ? "the " : "one of the ";
  for (size_t i = 0; i < types.size(); ++i) out += (i ? ", " : "") + types[i];
  return out + (types.size() == 1 ? " schedule" : " schedules");
}

std::unique_ptr<PipeSchedule> train_schedule(const std::string& name, int64_t micro_batches,
                                             int64_t stages, int64_t stage_id,
                                             int64_t virtual_stages) {
  return find_pipe_schedule(name).build(micro_batches, stages, stage_id, virtual_stages);
}

int64_t pipeline_virtual_stages(const io::TrainConfig& cfg) {
  const PipelineConfig& p = pipeline_config(cfg);
  return p.virtual_stages > 0 ? p.virtual_stages
                              : find_pipe_schedule(p.schedule).default_virtual_stages;
}

void check_pipeline_schedule(io::TrainConfig& cfg) {
  PipelineConfig& p = pipeline_config(cfg);
  const std::string& source = cfg.source;
  TS_CHECK(has_pipe_schedule(p.schedule), source, ": 'pipeline.schedule' is \"", p.schedule,
           "\", expected one of ", registered_pipe_schedule_list());
  const PipeScheduleEntry& e = find_pipe_schedule(p.schedule);
  if (p.virtual_stages == 0) p.virtual_stages = e.default_virtual_stages;
  TS_CHECK(e.takes_virtual_stages(p.virtual_stages), source, ": 'pipeline.virtual_stages' is ",
           p.virtual_stages, ": ",
           e.takes_virtual_stages(2)
               ? "the " + e.type + " schedule needs " + std::to_string(e.min_virtual_stages) +
                     " or more model chunks per stage"
               : "model chunks per stage need " + virtual_stage_pipe_schedules_text());
  TS_CHECK(p.stages >= e.min_stages, source, ": 'pipeline.schedule' \"", e.type, "\" needs ",
           "'stages' >= ", e.min_stages);
  TS_CHECK(!e.micro_batches_multiple_of_stages || cfg.gradient_accumulation_steps % p.stages == 0,
           source, ": 'pipeline.schedule' \"", e.type, "\" needs gradient_accumulation_steps (",
           cfg.gradient_accumulation_steps, ", the micro-batches of a step) to be a multiple of ",
           "pipeline.stages (", p.stages, "), as Megatron's");
}

namespace {
const io::DescribeConfigKey kPipelineScheduleKey{
    "pipeline.schedule", [] { return "one of " + registered_pipe_schedule_list(); }};
}  // namespace

}  // namespace tessera::parallel
