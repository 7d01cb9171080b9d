// `tessera eval MODEL_DIR --batch BATCH.json [--grads] [--json]`
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/models/pretrained.h"
#include "tessera/ops.h"

namespace tessera::cli {

namespace {

const char* kEvalHelp = R"(usage: tessera eval MODEL_DIR --batch BATCH.json [--grads] [--json]

Loads a Hugging Face model directory (config.json + model.safetensors; GPT-2 or BERT) and a
batch file, runs forward in float32 on CPU, and prints the loss.

BATCH.json: {"input_ids": [[...], ...], "targets": [[...], ...]} with targets aligned to
input_ids position by position (already shifted for GPT-2; -100 = no loss there, as HF's MLM
labels). Optional: "attention_mask", "token_type_ids", "next_sentence_label" (BERT).

--grads   also run backward and print each parameter's gradient L2 norm, named as in the
          safetensors file (a tied LM head contributes to the embedding's gradient)
--json    last line: {"loss": L[, "grad_norms": {"name": norm, ...}]}
)";

}  // namespace

int eval_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help", "grads"}, {"batch"});
  if (a.has("help")) {
    std::cout << kEvalHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "eval: expected one MODEL_DIR (see --help)");
  TS_CHECK(a.has("batch"), "eval: --batch BATCH.json is required");
  std::map<std::string, std::string> file_key;
  auto model = models::load_pretrained(a.positional()[0], &file_key);
  const models::Batch batch = models::read_batch_json(a.get("batch", ""));
  const bool grads = a.has("grads");
  GradModeGuard grad_mode(grads);
  const Tensor loss = model->loss(batch);
  const double L = loss.item();
  TS_CHECK(std::isfinite(L), "eval: the loss is not finite (", L, ")");
  nlohmann::json out{{"loss", L}};
  if (grads) {
    loss.backward();
    nlohmann::json norms = nlohmann::json::object();
    for (auto& [name, t] : model->named_parameters()) {
      const Tensor g = t->grad();
      norms[file_key.count(name) ? file_key[name] : name] = g.defined() ? norm(g).item() : 0.0;
    }
    out["grad_norms"] = norms;
  }
  if (a.has("json")) {
    std::cout << out.dump() << "\n";
  } else {
    std::cout << model->type_name() << " (" << model->num_parameters() << " parameters), batch "
              << shape_str(batch.input_ids.shape()) << "\nloss: " << std::setprecision(9) << L
              << "\n";
    if (grads)
      for (auto& [name, v] : out["grad_norms"].items())
        std::cout << "  " << name << "  " << v.get<double>() << "\n";
  }
  return 0;
}

}  // namespace tessera::cli
