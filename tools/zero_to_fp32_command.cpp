// `tessera zero-to-fp32 CKPT_DIR OUT.safetensors [--tag TAG]`
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/pretrained.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_checkpoint.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

const char* kZeroToFp32Help =
    R"(usage: tessera zero-to-fp32 CKPT_DIR OUT.safetensors [--tag TAG] [--json]

Rebuilds whole float32 weights from a checkpoint saved at any ZeRO stage and any number of
ranks (each rank's zero_rank<R>.safetensors shards are put back together), and writes them
as one safetensors file with Hugging Face's names and layouts for the built-in GPT-2/BERT
models (Tessera's own names for other models). A checkpoint saved without ZeRO is converted
too. CKPT_DIR is the directory given to --save (TAG defaults to the one `latest` names) or a
tag directory itself. For a whole Hugging Face model directory (config.json, weights and
tokenizer files), use `tessera export`.
)";

}  // namespace

int zero_to_fp32_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"tag"});
  if (a.has("help")) {
    std::cout << kZeroToFp32Help;
    return 0;
  }
  TS_CHECK(a.positional().size() == 2, "zero-to-fp32: expected CKPT_DIR and OUT.safetensors");
  const fs::path dir = checkpoint_tag_dir(a.positional()[0], a.get("tag", ""), "zero-to-fp32");
  const std::string out = a.positional()[1];
  std::map<std::string, Tensor> file = checkpoint_weights(dir, "zero-to-fp32");
  if (auto model = checkpoint_model(dir)) file = models::to_hf_layout(*model, file, dir.string());
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
