// A checkpoint's engine.json (and the ZeRO layout it may describe), loaded by a small model's
// engine from a checkpoint saved once; each input replaces engine.json.
#include <filesystem>

#include "fuzz_util.h"
#include "tessera/engine/engine.h"
#include "tessera/error.h"
#include "tessera/nn/layers.h"

namespace {

struct Tiny : tessera::nn::Module {
  tessera::nn::Linear fc{this, "fc", 3, 2};
};

struct Fixture {
  Tiny model;
  std::unique_ptr<tessera::engine::Engine> engine;
  std::string dir = tessera::fuzz::scratch_dir() + "/ckpt";
  Fixture() {
    engine = tessera::engine::initialize(
        model, tessera::io::TrainConfig::parse(R"({"train_batch_size": 1})"));
    engine->save_checkpoint(dir, "t");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  const std::string meta = f.dir + "/t/engine.json";
  FILE* out = std::fopen(meta.c_str(), "wb");
  if (!out) std::abort();
  if (size) std::fwrite(data, 1, size, out);
  std::fclose(out);
  try {
    f.engine->load_checkpoint(f.dir, "t");
  } catch (const tessera::Error&) {
  }
  return 0;
}
