// `tessera optimizers`, `tessera schedules`, `tessera pipeline-schedules`, `tessera monitors`,
// `tessera searchers` and `tessera config-keys` [--json | --markdown]: the optimizer, LR
// schedule, pipeline schedule, monitor and searcher registries' entries (every optimizer.type /
// scheduler.type / pipeline.schedule / monitor section a training config and every searcher.name an
// experiment config can name) with what each takes, read from the entries, and every training
// config key as the config reader describes it; the tables in docs/training.md,
// docs/parallelism.md, docs/experiments.md and docs/config.md are --markdown's.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/engine/monitor_registry.h"
#include "tessera/experiment/searcher_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/optim/lr_schedule_registry.h"
#include "tessera/optim/optimizer_registry.h"
#include "tessera/parallel/pipe_schedule_registry.h"

namespace tessera::cli {

namespace {

const char* kSchedulesHelp = R"(usage: tessera schedules [--json | --markdown]

The LR schedules a training config's "scheduler.type" can name (DeepSpeed's), each parameter
of "scheduler.params" with what it must be, its default and what it does: the entries the
config reader checks a scheduler section against and the engine builds the schedule from.
--json: {"schedules": [{"type", "doc", "warmup_type", "params": [{"name", "kind", "default",
"required", "no_effect", "doc"}]}]}
--markdown: the table docs/training.md holds.
)";

const char* kOptimizersHelp = R"(usage: tessera optimizers [--json | --markdown]

The optimizers a training config's "optimizer.type" can name (DeepSpeed's), each parameter of
"optimizer.params" with what it must be, its default and what it does: the entries the config
reader checks an optimizer section against and the engine builds the optimizer from.
--json: {"optimizers": [{"type", "doc", "betas", "zero", "params": [{"name", "kind", "default",
"required", "no_effect", "doc"}]}]}
--markdown: the table docs/training.md holds.
)";

const char* kPipelineSchedulesHelp = R"(usage: tessera pipeline-schedules [--json | --markdown]

The pipeline schedules a training config's "pipeline.schedule" can name, with the model chunks
per stage ("pipeline.virtual_stages") each takes and its default, the stages it needs and its
condition on a step's micro-batches: the entries the config check, the PipelineEngine and
estimate-memory read.
--json: {"pipeline_schedules": [{"type", "doc", "min_virtual_stages", "max_virtual_stages" (0: no limit),
"default_virtual_stages", "min_stages", "micro_batches_multiple_of_stages"}]}
--markdown: the table docs/parallelism.md holds.
)";

const char* kMonitorsHelp = R"(usage: tessera monitors [--json | --markdown]

The monitor sections a training config can enable (DeepSpeed's csv_monitor and tensorboard),
each with DeepSpeed's keys: enabled (false), output_path ("./"), job_name ("DeepSpeedJobName");
rank 0 writes every enabled one to output_path/job_name/.
--json: {"monitors": [{"type", "doc"}]}
--markdown: the table docs/training.md holds.
)";

const char* kSearchersHelp = R"(usage: tessera searchers [--json | --markdown]

The searchers an experiment config's "searcher.name" can name (Determined's, and Optuna's TPE),
each key of its own in the searcher section with what it must be, its default and what it does
(every searcher also reads metric, smaller_is_better and max_length): the entries the
experiment config reader checks a searcher section against and the experiment builds the
searcher from.
--json: {"searchers": [{"type", "doc", "lengths_in_batches", "params": [{"name", "kind",
"range", "default", "required", "doc"}]}]}
--markdown: the table docs/experiments.md holds.
)";

const char* kConfigKeysHelp = R"(usage: tessera config-keys [--json | --markdown]

Every key a training config can state (DeepSpeed's sections, Tessera's own, the registered
sections and monitors), each with its kind, what a value must be and its default: recorded
from the config reader itself as it reads every section. The parameters under
"optimizer.params" and "scheduler.params" are listed by `tessera optimizers` and `tessera
schedules`.
--json: {"config_keys": [{"key", "kind", "expected", "default", "note"}]}
--markdown: the table docs/config.md holds.
)";

enum class Format { Text, Json, Markdown };

// Parses the listing commands' options; nullopt after printing --help.
std::optional<Format> listing_format(int argc, char** argv, const char* name, const char* help) {
  const Args a(argc, argv, 2, {"json", "markdown", "help"}, {});
  if (a.has("help")) {
    std::cout << help;
    return std::nullopt;
  }
  TS_CHECK(a.positional().empty(), name, ": takes no arguments (see --help)");
  TS_CHECK(!(a.has("json") && a.has("markdown")), name, ": --json or --markdown, not both");
  return a.has("json") ? Format::Json : a.has("markdown") ? Format::Markdown : Format::Text;
}

std::string what_it_does(const optim::HyperParam& p) {
  return p.no_effect.empty() ? p.doc : "no effect in Tessera: " + p.no_effect;
}

// Prints an entry's parameters as the format says and returns them as JSON.
nlohmann::json print_params(Format f, const std::string& type,
                            const std::vector<optim::HyperParam>& params) {
  nlohmann::json out = nlohmann::json::array();
  for (const optim::HyperParam& p : params) {
    const std::string kind = optim::hyper_param_kind_text(p);
    const std::string def = optim::hyper_param_default_text(p);
    nlohmann::json d = nullptr;
    if (p.default_value.size() == 1) d = p.default_value[0];
    if (p.kind == optim::HyperParamKind::Choice && !p.default_value.empty()) d = def;
    if (p.default_value.size() > 1) d = p.default_value;
    out.push_back({{"name", p.name},
                   {"kind", kind},
                   {"default", d},
                   {"required", p.required},
                   {"no_effect", p.no_effect},
                   {"doc", p.doc}});
    if (f == Format::Markdown)
      std::cout << "| `" << type << "` | `" << p.name << "` | " << kind << " | " << def << " | "
                << what_it_does(p) << " |\n";
    else if (f == Format::Text)
      std::cout << "  " << p.name << " (" << kind << ", " << def << "): " << what_it_does(p)
                << "\n";
  }
  return out;
}

}  // namespace

int schedules_main(int argc, char** argv) {
  const auto f = listing_format(argc, argv, "schedules", kSchedulesHelp);
  if (!f) return 0;
  nlohmann::json all = nlohmann::json::array();
  if (*f == Format::Markdown)
    std::cout << "| `scheduler.type` | parameter | value | default | what it does |\n"
              << "|---|---|---|---|---|\n";
  for (const std::string& type : optim::registered_lr_schedules()) {
    const optim::LRScheduleEntry& e = optim::find_lr_schedule(type);
    if (*f == Format::Text) std::cout << type << ": " << e.doc << "\n";
    nlohmann::json params = print_params(*f, type, e.params);
    if (*f == Format::Markdown && e.takes_warmup_type)
      std::cout << "| `" << type
                << "` | `warmup_type` | log/linear | log | the warm-up's shape |\n";
    all.push_back(
        {{"type", type}, {"doc", e.doc}, {"warmup_type", e.takes_warmup_type}, {"params", params}});
  }
  if (*f == Format::Json) std::cout << nlohmann::json{{"schedules", all}}.dump() << "\n";
  return 0;
}

int optimizers_main(int argc, char** argv) {
  const auto f = listing_format(argc, argv, "optimizers", kOptimizersHelp);
  if (!f) return 0;
  nlohmann::json all = nlohmann::json::array();
  if (*f == Format::Markdown)
    std::cout << "| `optimizer.type` | parameter | value | default | what it does |\n"
              << "|---|---|---|---|---|\n";
  for (const std::string& type : optim::registered_optimizers()) {
    const optim::OptimizerEntry& e = optim::find_optimizer(type);
    if (*f == Format::Text)
      std::cout << type << ": " << e.doc
                << (e.updates_partitions ? "" : " (not with ZeRO: " + e.no_zero_reason + ")")
                << "\n";
    nlohmann::json params = print_params(*f, type, e.params);
    all.push_back({{"type", type},
                   {"doc", e.doc},
                   {"betas", e.has_betas},
                   {"zero", e.updates_partitions},
                   {"params", params}});
  }
  if (*f == Format::Json) std::cout << nlohmann::json{{"optimizers", all}}.dump() << "\n";
  return 0;
}

int pipeline_schedules_main(int argc, char** argv) {
  const auto f = listing_format(argc, argv, "pipeline-schedules", kPipelineSchedulesHelp);
  if (!f) return 0;
  nlohmann::json all = nlohmann::json::array();
  if (*f == Format::Markdown)
    std::cout << "| `pipeline.schedule` | `virtual_stages` | default | stages | micro-batches "
                 "per step | what it is |\n"
              << "|---|---|---|---|---|---|\n";
  for (const std::string& type : parallel::registered_pipe_schedules()) {
    const parallel::PipeScheduleEntry& e = parallel::find_pipe_schedule(type);
    const std::string range =
        e.max_virtual_stages == 0 ? ">= " + std::to_string(e.min_virtual_stages)
        : e.min_virtual_stages == e.max_virtual_stages
            ? std::to_string(e.min_virtual_stages)
            : std::to_string(e.min_virtual_stages) + " to " + std::to_string(e.max_virtual_stages);
    const std::string micro = e.micro_batches_multiple_of_stages ? "a multiple of stages" : "any";
    if (*f == Format::Markdown)
      std::cout << "| `" << type << "` | " << range << " | " << e.default_virtual_stages
                << " | >= " << e.min_stages << " | " << micro << " | " << e.doc << " |\n";
    else if (*f == Format::Text)
      std::cout << type << ": " << e.doc << "\n  virtual_stages " << range << " (default "
                << e.default_virtual_stages << "), stages >= " << e.min_stages
                << ", micro-batches per step: " << micro << "\n";
    all.push_back({{"type", type},
                   {"doc", e.doc},
                   {"min_virtual_stages", e.min_virtual_stages},
                   {"max_virtual_stages", e.max_virtual_stages},
                   {"default_virtual_stages", e.default_virtual_stages},
                   {"min_stages", e.min_stages},
                   {"micro_batches_multiple_of_stages", e.micro_batches_multiple_of_stages}});
  }
  if (*f == Format::Json) std::cout << nlohmann::json{{"pipeline_schedules", all}}.dump() << "\n";
  return 0;
}

int monitors_main(int argc, char** argv) {
  const auto f = listing_format(argc, argv, "monitors", kMonitorsHelp);
  if (!f) return 0;
  nlohmann::json all = nlohmann::json::array();
  if (*f == Format::Markdown) std::cout << "| section | what it writes |\n|---|---|\n";
  for (const std::string& type : engine::registered_monitors()) {
    const engine::MonitorEntry& e = engine::find_monitor(type);
    if (*f == Format::Markdown) std::cout << "| `" << type << "` | " << e.doc << " |\n";
    if (*f == Format::Text) std::cout << type << ": " << e.doc << "\n";
    all.push_back({{"type", type}, {"doc", e.doc}});
  }
  if (*f == Format::Json) std::cout << nlohmann::json{{"monitors", all}}.dump() << "\n";
  return 0;
}

int searchers_main(int argc, char** argv) {
  const auto f = listing_format(argc, argv, "searchers", kSearchersHelp);
  if (!f) return 0;
  nlohmann::json all = nlohmann::json::array();
  if (*f == Format::Markdown)
    std::cout << "| `searcher.name` | key | value | default | what it does |\n"
              << "|---|---|---|---|---|\n";
  for (const std::string& type : experiment::registered_searchers()) {
    const experiment::SearcherEntry& e = experiment::find_searcher(type);
    const char* batches = e.lengths_in_batches ? " (max_length in batches)" : "";
    if (*f == Format::Text) std::cout << type << ": " << e.doc << batches << "\n";
    if (*f == Format::Markdown && e.params.empty())
      std::cout << "| `" << type << "` | | | | " << e.doc << " |\n";
    nlohmann::json params = nlohmann::json::array();
    for (const trial::SearcherParam& p : e.params) {
      const std::string def = p.required()                  ? "required"
                              : p.default_value.is_null()   ? "unset"
                              : p.default_value.is_string() ? p.default_value.get<std::string>()
                                                            : p.default_value.dump();
      params.push_back({{"name", p.name},
                        {"kind", p.kind_text()},
                        {"range", p.range_text()},
                        {"default", p.default_value},
                        {"required", p.required()},
                        {"doc", p.doc}});
      if (*f == Format::Markdown)
        std::cout << "| `" << type << "` | `" << p.name << "` | " << p.kind_text() << " "
                  << p.range_text() << " | " << def << " | " << p.doc << " |\n";
      else if (*f == Format::Text)
        std::cout << "  " << p.name << " (" << p.kind_text() << " " << p.range_text() << ", " << def
                  << "): " << p.doc << "\n";
    }
    all.push_back({{"type", type},
                   {"doc", e.doc},
                   {"lengths_in_batches", e.lengths_in_batches},
                   {"params", params}});
  }
  if (*f == Format::Json) std::cout << nlohmann::json{{"searchers", all}}.dump() << "\n";
  return 0;
}

int config_keys_main(int argc, char** argv) {
  const auto f = listing_format(argc, argv, "config-keys", kConfigKeysHelp);
  if (!f) return 0;
  nlohmann::json all = nlohmann::json::array();
  if (*f == Format::Markdown)
    std::cout << "| key | value | default | what it does |\n|---|---|---|---|\n";
  for (const io::config::ConfigKey& k : io::TrainConfig::describe_keys()) {
    const std::string value = k.kind + (k.expected.empty() ? "" : ": " + k.expected);
    if (*f == Format::Markdown)
      std::cout << "| `" << k.key << "` | " << value << " | "
                << (k.default_value.empty() ? "" : "`" + k.default_value + "`") << " | " << k.note
                << " |\n";
    if (*f == Format::Text)
      std::cout << k.key << " (" << value
                << (k.default_value.empty() ? "" : ", default " + k.default_value) << ")"
                << (k.note.empty() ? "" : ": " + k.note) << "\n";
    all.push_back({{"key", k.key},
                   {"kind", k.kind},
                   {"expected", k.expected},
                   {"default", k.default_value},
                   {"note", k.note}});
  }
  if (*f == Format::Json) std::cout << nlohmann::json{{"config_keys", all}}.dump() << "\n";
  return 0;
}

}  // namespace tessera::cli
