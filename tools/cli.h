// Small argument parser shared by the `tessera` subcommands: positional words, --flag and
// --key value options, with an error naming any option the subcommand does not know.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <memory>

#include "tessera/io/train_config.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/pretrained.h"
#include "tessera/shape.h"

namespace tessera::cli {

class Args {
 public:
  // `flags` take no value; `options` take one. Anything else starting with -- is an error.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags,
       const std::set<std::string>& options);
  bool has(const std::string& name) const { return flags_.count(name) || values_.count(name); }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_number(const std::string& name, double fallback) const;  // finite numbers only
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::set<std::string> flags_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

Shape parse_shape(const std::string& text);  // "512,512,512" or "512x512"
// A number with an optional one-letter suffix ("10M", "64K", "250000"): the number times the
// suffix's factor in `scales` (keyed by the upper-case letter); none when `text` is not one.
std::optional<double> parse_scaled(const std::string& text, const std::map<char, double>& scales);

// Median milliseconds of `iters` calls of f after `warmup` uncounted calls.
double median_ms(const std::function<void()>& f, int iters, int warmup = 2);
// The peak megabytes the device's allocator held during one call of f above what it held
// before.
double peak_mb(Device device, const std::function<void()>& f);

// What a shell command prints on its standard output (empty when it cannot be started): the
// benchmarks' reference runs in Python.
std::string command_output(const std::string& command);

// A checkpoint's tag directory: DIR itself when it holds engine.json, else DIR/TAG or the tag
// DIR/latest names.
std::filesystem::path checkpoint_tag_dir(const std::string& dir, const std::string& tag,
                                         const char* cmd);
// The checkpoint's whole float32 weights under Tessera's names (ZeRO shards put together).
std::map<std::string, Tensor> checkpoint_weights(const std::filesystem::path& tag_dir,
                                                 const char* cmd);
// The built-in model the checkpoint's model config describes (untrained); null for others.
std::unique_ptr<models::PretrainedModel> checkpoint_model(const std::filesystem::path& tag_dir);

// Subcommands: each returns the process exit status.
int kernels_main(int argc, char** argv);
int report_main(int argc, char** argv);
int bench_main(int argc, char** argv);
int eval_main(int argc, char** argv);
int generate_main(int argc, char** argv);
int train_main(int argc, char** argv);
int bench_train(const Args& a);
int bench_tokenizer(const Args& a);           // bench_tokenizer.cpp
int bench_sparse_attention(const Args& a);    // bench_sparse_attention.cpp
int bench_transformer_kernel(const Args& a);  // bench_transformer_kernel.cpp
int bench_optimizer(const Args& a);           // bench_optimizer.cpp
int bench_all_to_all(const Args& a);          // bench_all_to_all.cpp
int zero_to_fp32_main(int argc, char** argv);
int nvme_tune_main(int argc, char** argv);
int estimate_memory_main(int argc, char** argv);
int export_main(int argc, char** argv);
int plot_main(int argc, char** argv);
int profile_main(int argc, char** argv);
int trial_main(int argc, char** argv);
int launch_main(int argc, char** argv);    // launch_command.cpp
int autotune_main(int argc, char** argv);  // autotune_command.cpp
// --store DIR, else $TESSERA_STORE, else ~/.local/share/tessera/experiments (absolute).
std::string experiment_store_dir(const Args& a);
int experiment_main(int argc, char** argv);
int models_main(int argc, char** argv);
int schedules_main(int argc, char** argv);
int optimizers_main(int argc, char** argv);
int pipeline_schedules_main(int argc, char** argv);
int searchers_main(int argc, char** argv);
int monitors_main(int argc, char** argv);
int config_keys_main(int argc, char** argv);

}  // namespace tessera::cli
