// `tessera models [--json | --markdown]`: the model registry's entries (every model.type a
// config can name), read from the entries themselves; docs/models.md's table is --markdown's.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/models/model_registry.h"

namespace tessera::cli {

namespace {

const char* kModelsHelp = R"(usage: tessera models [--json | --markdown]

The models a training config's "model.type" can name (the model registry): each one's
objective (causal_lm: next-token windows; masked_lm: BERT's masking stream), whether it runs as
a pipeline, which of the model section's sizing keys it reads (others are warned about as having
no effect), and what it is. Each also runs as the built-in trial builtin:<type>.
--json: {"models": [{"type", "objective", "pipeline", "section_keys", "doc"}...]}
--markdown: the table docs/models.md holds.
)";

std::string joined(const std::vector<std::string>& keys, const std::string& quote) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + quote + k + quote;
  return out;
}

}  // namespace

int models_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "markdown", "help"}, {});
  if (a.has("help")) {
    std::cout << kModelsHelp;
    return 0;
  }
  TS_CHECK(a.positional().empty(), "models: takes no arguments (see --help)");
  nlohmann::json all = nlohmann::json::array();
  if (a.has("markdown"))
    std::cout << "| `model.type` | objective | pipeline | sizing keys it reads | what it is |\n"
              << "|---|---|---|---|---|\n";
  for (const std::string& type : models::registered_model_types()) {
    const models::ModelEntry& e = models::find_model(type);
    const std::string objective =
        e.objective == models::Objective::masked_lm ? "masked_lm" : "causal_lm";
    const bool pipeline = static_cast<bool>(e.pipeline);
    all.push_back({{"type", type},
                   {"objective", objective},
                   {"pipeline", pipeline},
                   {"section_keys", e.section_keys},
                   {"doc", e.doc}});
    if (a.has("markdown"))
      std::cout << "| `" << type << "` | " << objective << " | " << (pipeline ? "yes" : "no")
                << " | " << joined(e.section_keys, "`") << " | " << e.doc << " |\n";
    else if (!a.has("json"))
      std::cout << type << " (" << objective << (pipeline ? ", pipeline" : "") << "): " << e.doc
                << "\n  reads " << joined(e.section_keys, "") << "\n";
  }
  if (a.has("json")) std::cout << nlohmann::json{{"models", all}}.dump() << "\n";
  return 0;
}

}  // namespace tessera::cli
