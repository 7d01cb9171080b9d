// Reading a training checkpoint from the command line (zero-to-fp32, export).
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "tessera/engine/checkpoint_state.h"
#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"

namespace tessera::cli {

namespace fs = std::filesystem;

fs::path checkpoint_tag_dir(const std::string& dir, const std::string& tag, const char* cmd) {
  if (fs::exists(fs::path(dir) / "engine.json")) {
    TS_CHECK(tag.empty(), cmd, ": '", dir, "' is a checkpoint's tag directory already; --tag ", tag,
             " names a tag inside a checkpoint directory");
    return dir;
  }
  TS_CHECK(fs::is_directory(dir), cmd, ": '", dir, "' is not a directory");
  return engine::checkpoint_tag_dir(dir, tag);
}

std::map<std::string, Tensor> checkpoint_weights(const fs::path& tag_dir, const char* cmd) {
  engine::WholeCheckpointState c = engine::read_whole_checkpoint(tag_dir.string(), false);
  std::map<std::string, Tensor> weights = std::move(c.weights);
  std::cerr << cmd << ": checkpoint of ";
  if (c.pipeline_stages > 1) std::cerr << c.pipeline_stages << " pipeline stages x ";
  std::cerr << c.data_parallel << " data-parallel rank(s)";
  if (c.tensor_parallel > 1)
    std::cerr << " x " << c.tensor_parallel << " tensor-parallel ranks (shards merged)";
  if (c.zero_stage > 0) std::cerr << ", ZeRO stage " << c.zero_stage;
  std::cerr << ", " << weights.size() << " tensors\n";
  NoGradGuard no_grad;
  for (auto& [k, v] : weights) {
    TS_CHECK(is_floating(v.dtype()), cmd, ": '", k, "' is ", dtype_name(v.dtype()),
             ", not a floating-point weight");
    v = v.to(DType::Float32).contiguous();
  }
  return weights;
}

std::unique_ptr<models::PretrainedModel> checkpoint_model(const fs::path& tag_dir) {
  // Checkpoints before model_config.json kept the same text in config.json.
  for (const char* name : {engine::kModelConfigFile, "config.json"}) {
    const fs::path p = tag_dir / name;
    if (fs::exists(p))
      return models::model_from_hf_config(io::read_text_file(p.string()), p.string());
  }
  return nullptr;
}

}  // namespace tessera::cli
