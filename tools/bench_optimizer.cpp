// `tessera bench optimizer`: Tessera's fused Adam update (float32 masters, bf16 model copies
// and gradients: mixed precision's optimizer step) against PyTorch's torch.optim.Adam on the
// same machine in one run (its default for-loop implementation and foreach, float32), with
// the memory-bandwidth bound the update could reach: each parameter moves 28 bytes (master,
// exp_avg and exp_avg_sq read and written, the bf16 gradient read and the bf16 copy written)
// at the rate of a STREAM-like pass measured in the same run. DeepSpeed states 5.1-6.5x over
// torch's Adam for its AVX-512 CPU-Adam; this prints the ratio measured here.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/ops.h"
#include "tessera/optim/optimizer.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

constexpr double kBytesPerParam = 28;         // 3 x (4 read + 4 written) + 2 read + 2 written
constexpr double kTesseraBytes = 16;          // master, exp_avg, exp_avg_sq, bf16 copy and gradient
constexpr int64_t kChunk = int64_t{1} << 24;  // elements per tensor (a model has many)

// "10M", "1.5B", "100000": a positive count of parameters (K, M, B or G suffixes).
int64_t parse_count(const std::string& text) {
  const std::optional<double> n =
      parse_scaled(text, {{'K', 1e3}, {'M', 1e6}, {'B', 1e9}, {'G', 1e9}});
  TS_CHECK(n && std::isfinite(*n) && *n >= 1 && *n <= 1e11, "bench optimizer: --params '", text,
           "' is not a parameter count in [1, 1e11] (e.g. 10M, 100M, 1B or 250000)");
  return static_cast<int64_t>(std::llround(*n));
}

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
double available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// The best of 5 STREAM-style passes b[i] += a[i] over 64M floats on the OpenMP threads, in
// GB/s (8 bytes read, 4 written an element). A read-modify-write, as Adam's updates of its
// master and moments are: a plain copy also reads each written line first (write-allocate)
// without counting it, and understated what the update reaches by a third.
double stream_add_gb_per_s() {
  const int64_t n = int64_t{1} << 26;
  std::vector<float> a(static_cast<size_t>(n), 1.0f), b(static_cast<size_t>(n), 0.0f);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] += a[i];
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  TS_CHECK(b[static_cast<size_t>(n - 1)] == 5.0f, "bench optimizer: the stream pass did not run");
  return 3.0 * 4.0 * static_cast<double>(n) / best / 1e9;
}

// Median ms of Adam's step over n parameters in chunks: float32 masters with bf16 copies
// whose bf16 gradients the step reads, as the engine runs it under mixed precision.
double tessera_adam_ms(int64_t n, int iters) {
  NoGradGuard no_grad;
  Generator gen(0);
  std::vector<Tensor> copies;
  optim::ParamGroup group;
  group.lr = 1e-3;
  for (int64_t s = 0; s < n; s += kChunk) {
    const int64_t len = std::min(kChunk, n - s);
    group.names.push_back("p" + std::to_string(s / kChunk));
    group.params.push_back(randn({len}, DType::Float32, Device::cpu(), &gen));
    copies.push_back(group.params.back().to(DType::BFloat16));
    copies.back().set_grad(randn({len}, DType::BFloat16, Device::cpu(), &gen));
  }
  std::vector<Tensor*> copy_ptrs;
  for (Tensor& c : copies) copy_ptrs.push_back(&c);
  optim::AdamOptions options;
  options.decoupled_weight_decay = false;  // torch.optim.Adam (weight decay 0 either way)
  optim::Adam adam({group}, options);
  adam.set_model_copies({copy_ptrs});
  return median_ms([&] { adam.step(); }, iters);
}

// torch.optim.Adam on float32 parameters in chunks, for-loop and foreach, each only when its
// memory fits; prints one JSON line.
constexpr const char* kTorchScript = R"(
import json, sys, time
try:
    import torch
except Exception as e:
    print(json.dumps({"error": "no torch in " + sys.executable})); sys.exit(0)
n, iters, threads, chunk, avail = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(threads)
out = {"torch": torch.__version__}
for name, foreach, bytes_per in (("for_loop", False, 20), ("foreach", True, 24)):
    if avail and n * bytes_per > 0.9 * avail:
        out[name + "_skipped"] = "needs %.1f GB, %.1f GB available" % (n * bytes_per / 1e9, avail / 1e9)
        continue
    ps = [torch.randn(min(chunk, n - s)) for s in range(0, n, chunk)]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.Adam(ps, lr=1e-3, foreach=foreach)
    opt.step(); opt.step()
    times = []
    for _ in range(iters):
        t = time.perf_counter(); opt.step(); times.append(time.perf_counter() - t)
    out[name + "_ms"] = sorted(times)[len(times) // 2] * 1e3
    del opt, ps
print(json.dumps(out))
)";

nlohmann::json torch_adam(const std::string& python, int64_t n, int iters, int threads) {
  const fs::path script =
      fs::temp_directory_path() / ("tessera-bench-optimizer-" + std::to_string(::getpid()) + ".py");
  std::ofstream(script) << kTorchScript;
  const std::string command =
      io::quoted(python) + " " + io::quoted(script.string()) + " " + std::to_string(n) + " " +
      std::to_string(iters) + " " + std::to_string(threads) + " " + std::to_string(kChunk) + " " +
      std::to_string(static_cast<int64_t>(available_bytes())) + " 2>/dev/null";
  const std::string reply = command_output(command);
  fs::remove(script);
  const auto j = nlohmann::json::parse(reply, nullptr, false);
  return j.is_object() ? j : nlohmann::json{{"error", "no reply from " + python}};
}

void print_table(const nlohmann::ordered_json& out) {
  std::printf("%d threads; STREAM-like b += a: %.1f GB/s; Adam moves %.0f bytes a parameter\n",
              out["threads"].get<int>(), out["stream_add_gb_per_s"].get<double>(), kBytesPerParam);
  std::printf("%12s %12s %9s %9s %16s %12s %9s\n", "params", "tessera ms", "GB/s", "of bound",
              "torch for-loop ms", "foreach ms", "speedup");
  for (const auto& r : out["results"]) {
    const auto ms = [&](const char* k) {
      std::ostringstream s;
      if (r.contains(k))
        s << std::fixed << std::setprecision(1) << r[k].get<double>();
      else
        s << "-";
      return s.str();
    };
    std::printf("%12lld %12s %9.1f %8.0f%% %16s %12s %8sx\n",
                static_cast<long long>(r["params"].get<int64_t>()), ms("tessera_ms").c_str(),
                r["tessera_gb_per_s"].get<double>(), 100 * r["of_bound"].get<double>(),
                ms("torch_for_loop_ms").c_str(), ms("torch_foreach_ms").c_str(),
                ms("speedup").c_str());
    for (const char* k : {"torch_error", "torch_for_loop_skipped", "torch_foreach_skipped"})
      if (r.contains(k)) std::printf("  %s: %s\n", k, r[k].get<std::string>().c_str());
  }
}

}  // namespace

int bench_optimizer(const Args& a) {
  std::vector<int64_t> sizes;
  std::stringstream list(a.get("params", "10M,100M"));
  for (std::string item; std::getline(list, item, ',');) sizes.push_back(parse_count(item));
  TS_CHECK(!sizes.empty(), "bench optimizer: --params is empty");
  const int iters = static_cast<int>(a.get_int("iters", 10));
  TS_CHECK(iters >= 1 && iters <= 1000, "bench optimizer: --iters must be in [1, 1000], got ",
           iters);
  const std::string python = a.get("python", "/usr/bin/python3");
  const int threads = omp_get_max_threads();
  nlohmann::ordered_json out{{"threads", threads}, {"stream_add_gb_per_s", stream_add_gb_per_s()}};
  const double bandwidth = out["stream_add_gb_per_s"].get<double>();
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int64_t n : sizes) {
    const double need = kTesseraBytes * static_cast<double>(n), avail = available_bytes();
    TS_CHECK(avail == 0 || need < 0.9 * avail, "bench optimizer: --params ", n, " needs ",
             need / 1e9, " GB for Tessera's state, ", avail / 1e9, " GB are available");
    nlohmann::ordered_json r{{"params", n}};
    const double ms = tessera_adam_ms(n, iters);
    const double bound_ms = kBytesPerParam * static_cast<double>(n) / (bandwidth * 1e9) * 1e3;
    r["tessera_ms"] = ms;
    r["tessera_gb_per_s"] = kBytesPerParam * static_cast<double>(n) / (ms * 1e6);
    r["bound_ms"] = bound_ms;
    r["of_bound"] = bound_ms / ms;
    const nlohmann::json t = torch_adam(python, n, iters, threads);
    for (const char* k :
         {"error", "torch", "for_loop_ms", "foreach_ms", "for_loop_skipped", "foreach_skipped"})
      if (t.contains(k))
        r[k == std::string("torch") ? "torch_version" : "torch_" + std::string(k)] = t[k];
    if (r.contains("torch_for_loop_ms"))  // torch's default on CPU tensors: the for-loop
      r["speedup"] = r["torch_for_loop_ms"].get<double>() / ms;
    rows.push_back(r);
  }
  out["results"] = rows;
  if (a.has("json"))
    std::cout << out.dump() << "\n";
  else
    print_table(out);
  return 0;
}

}  // namespace tessera::cli
