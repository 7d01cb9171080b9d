// `tessera eval MODEL_DIR --batch BATCH.json [--grads] [--json]`
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/models/pretrained.h"
#include "tessera/ops.h"
#include "tools/cli.h"

namespace tessera::cli {

namespace {

const char* kHelp = R"(usage: tessera eval MODEL_DIR --batch BATCH.json [--grads] [--json]

Loads a Hugging Face model directory (config.json + model.safetensors; GPT-2 or BERT) and a
batch file, runs forward in float32 on CPU, and prints the loss.

BATCH.json: {"input_ids": [[...], ...], "targets": [[...], ...]} with targets aligned to
input_ids position by position (already shifted for GPT-2; -100 = no loss there, as HF's MLM
labels). Optional: "attention_mask", "token_type_ids", "next_sentence_label" (BERT).

--grads   also run backward and print each parameter's gradient L2 norm, named as in the
          safetensors file (a tied LM head contributes to the embedding's gradient)
--json    last line: {"loss": L[, "grad_norms": {"name": norm, ...}]}
)";

Tensor int_matrix(const nlohmann::json& j, const std::string& key, const std::string& path) {
  TS_CHECK(j[key].is_array() && !j[key].empty() && j[key][0].is_array(), "'", path, "': \"", key,
           "\" must be a non-empty list of lists of integers");
  const int64_t rows = static_cast<int64_t>(j[key].size()),
                cols = static_cast<int64_t>(j[key][0].size());
  std::vector<int64_t> v;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& row = j[key][r];
    TS_CHECK(row.is_array() && static_cast<int64_t>(row.size()) == cols, "'", path, "': \"", key,
             "\" row ", r, " has ", row.size(), " entries, expected ", cols);
    for (const auto& x : row) {
      TS_CHECK(x.is_number_integer(), "'", path, "': \"", key, "\" row ", r,
               " holds a non-integer");
      v.push_back(x.get<int64_t>());
    }
  }
  return from_vector(v, {rows, cols});
}

}  // namespace

models::Batch read_batch_json(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'", path, "': invalid JSON: ", e.what());
  }
  TS_CHECK(j.is_object() && j.contains("input_ids"), "'", path,
           "': expected an object with \"input_ids\"");
  models::Batch b;
  b.input_ids = int_matrix(j, "input_ids", path);
  if (j.contains("targets")) b.targets = int_matrix(j, "targets", path);
  if (j.contains("attention_mask")) b.attention_mask = int_matrix(j, "attention_mask", path);
  if (j.contains("token_type_ids")) b.token_type_ids = int_matrix(j, "token_type_ids", path);
  if (j.contains("next_sentence_label")) {
    const auto& nsp = j["next_sentence_label"];
    TS_CHECK(nsp.is_array() && static_cast<int64_t>(nsp.size()) == b.input_ids.shape()[0], "'",
             path, "': \"next_sentence_label\" must be a list of ", b.input_ids.shape()[0],
             " integers (one per row)");
    std::vector<int64_t> labels;
    for (const auto& x : nsp) {
      TS_CHECK(x.is_number_integer(), "'", path,
               "': \"next_sentence_label\" holds a non-integer: ", x.dump());
      labels.push_back(x.get<int64_t>());
    }
    b.next_sentence_label = from_vector(labels, {static_cast<int64_t>(labels.size())});
  }
  for (const Tensor* t : {&b.targets, &b.attention_mask, &b.token_type_ids})
    TS_CHECK(!t->defined() || t->shape() == b.input_ids.shape(), "'", path,
             "': every per-token field must be ", shape_str(b.input_ids.shape()),
             " like input_ids, got ", shape_str(t->shape()));
  return b;
}

int eval_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help", "grads"}, {"batch"});
  if (a.has("help")) {
    std::cout << kHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "eval: expected one MODEL_DIR (see --help)");
  TS_CHECK(a.has("batch"), "eval: --batch BATCH.json is required");
  std::map<std::string, std::string> file_key;
  auto model = models::load_pretrained(a.positional()[0], &file_key);
  const models::Batch batch = read_batch_json(a.get("batch", ""));
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
