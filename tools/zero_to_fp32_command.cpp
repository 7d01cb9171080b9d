// `tessera zero-to-fp32 CKPT_DIR OUT.safetensors [--tag TAG]`
#include <filesystem>
#include <iostream>

#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/pretrained.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_checkpoint.h"
#include "tools/cli.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

const char* kHelp = R"(usage: tessera zero-to-fp32 CKPT_DIR OUT.safetensors [--tag TAG] [--json]

Rebuilds whole float32 weights from a checkpoint saved at any ZeRO stage and any number of
ranks (each rank's zero_rank<R>.safetensors shards are put back together), and writes them
as one safetensors file with Hugging Face's names and layouts for the built-in GPT-2/BERT
models (Tessera's own names for other models). A checkpoint saved without ZeRO is converted
too. CKPT_DIR is the directory given to --save (TAG defaults to the one `latest` names) or a
tag directory itself. With the config.json beside it (copied from the checkpoint), the
output directory loads with `tessera eval`/`generate` and Hugging Face's from_pretrained.
)";

}  // namespace

int zero_to_fp32_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"tag"});
  if (a.has("help")) {
    std::cout << kHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 2, "zero-to-fp32: expected CKPT_DIR and OUT.safetensors");
  fs::path dir = a.positional()[0];
  const std::string out = a.positional()[1];
  if (!fs::exists(dir / "engine.json")) {
    std::string tag = a.get("tag", "");
    if (tag.empty()) {
      TS_CHECK(fs::exists(dir / "latest"), "zero-to-fp32: '", dir.string(),
               "' has neither engine.json nor a 'latest' file: not a checkpoint directory");
      tag = io::read_text_file((dir / "latest").string());
      while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
    }
    dir /= tag;
  }
  std::map<std::string, Tensor> weights;
  if (fs::exists(dir / parallel::zero_shard_file(0))) {
    parallel::ConsolidatedState c = parallel::consolidate_zero_checkpoint(dir.string());
    weights = std::move(c.masters);
    std::cerr << "zero-to-fp32: ZeRO stage " << c.stage << " checkpoint of " << c.world_size
              << " ranks, " << weights.size() << " parameters\n";
  } else {
    weights = io::load_safetensors((dir / "model.safetensors").string());
    std::cerr << "zero-to-fp32: checkpoint without ZeRO, " << weights.size() << " tensors\n";
  }
  NoGradGuard no_grad;
  for (auto& [k, v] : weights) v = v.to(DType::Float32).contiguous();
  std::map<std::string, Tensor> file = weights;
  if (fs::exists(dir / "config.json")) {
    auto model = models::model_from_hf_config(io::read_text_file((dir / "config.json").string()),
                                              (dir / "config.json").string());
    file = models::to_hf_layout(*model, weights, "zero-to-fp32: the checkpoint");
  }
  int64_t count = 0;
  for (const auto& [k, v] : file) count += v.numel();
  io::save_safetensors(out, file, {{"format", "pt"}});
  std::cerr << "wrote " << out << ": " << file.size() << " tensors, " << count
            << " float32 values\n";
  if (a.has("json"))
    std::cout << "{\"output\": " << nlohmann::json(out).dump() << ", \"tensors\": " << file.size()
              << ", \"values\": " << count << "}\n";
  return 0;
}

}  // namespace tessera::cli
