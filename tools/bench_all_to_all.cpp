// `mpirun -np N tessera bench all-to-all`: MoE's dispatch exchange (ProcessGroup::all_to_all,
// what parallel::MoE sends its capacity buffers with) against its theory, bytes over the
// bandwidth measured in the same run: for each size, the median time of an all-to-all of that
// many bytes per rank, the time (N - 1) / N of them take at the bandwidth of the largest
// transfer (64 MB per rank, the link's rate once latency no longer counts), and their ratio.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"

namespace tessera::cli {

namespace {

// "64K", "1M", "983040": a byte count in [N x 4, 1 GB] (K, M, G suffixes).
int64_t parse_bytes(const std::string& text, int ranks) {
  const std::optional<double> bytes =
      parse_scaled(text, {{'K', 1024.0}, {'M', 1048576.0}, {'G', 1073741824.0}});
  TS_CHECK(bytes && std::isfinite(*bytes) && *bytes >= 4.0 * ranks && *bytes <= 1073741824.0,
           "bench all-to-all: --sizes '", text, "' is not a byte count in [", 4 * ranks,
           ", 1G] (e.g. 64K, 1M or 983040)");
  return static_cast<int64_t>(*bytes);
}

// Median seconds of `iters` all-to-alls of `bytes` per rank (float32 chunks, one per rank),
// after 2 warm-up exchanges; every rank starts each one together.
double time_all_to_all(parallel::ProcessGroup& group, int64_t bytes, int iters) {
  const int n = group.size();
  const int64_t elements = std::max<int64_t>(1, bytes / 4 / n) * n;
  Tensor in = full({elements}, 1.0), out = Tensor::empty({elements});
  std::vector<double> seconds;
  for (int i = 0; i < iters + 2; ++i) {
    group.barrier();
    const auto start = std::chrono::steady_clock::now();
    group.all_to_all(out, in);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= 2) seconds.push_back(group.all_reduce_scalar(s, parallel::ReduceOp::Max));
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int bench_all_to_all(const Args& a) {
  const auto group = parallel::world();
  const int n = group->size();
  TS_CHECK(n >= 2, "bench all-to-all: run it on 2 or more ranks (mpirun -np N tessera bench ...)");
  const int iters = static_cast<int>(a.get_int("iters", 20));
  TS_CHECK(iters >= 1 && iters <= 1000, "bench all-to-all: --iters must be in [1, 1000], got ",
           iters);
  std::vector<int64_t> sizes;
  std::stringstream list(a.get("sizes", "16K,256K,983040,4M"));
  for (std::string item; std::getline(list, item, ',');) sizes.push_back(parse_bytes(item, n));
  TS_CHECK(!sizes.empty(), "bench all-to-all: --sizes is empty");
  const int64_t peak_bytes = int64_t{64} << 20;
  const double wire = static_cast<double>(n - 1) / n;  // of a rank's bytes, what leaves it
  const double peak_s = time_all_to_all(*group, peak_bytes, std::max(3, iters / 4));
  const double bandwidth = wire * static_cast<double>(peak_bytes) / peak_s;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  if (group->rank() == 0)
    std::printf(
        "%d ranks: link bandwidth %.2f GB/s (a 64 MB all-to-all per rank)\n%12s %12s %12s %8s\n", n,
        bandwidth / 1e9, "bytes/rank", "measured ms", "theory ms", "ratio");
  for (int64_t bytes : sizes) {
    const double measured = time_all_to_all(*group, bytes, iters);
    const double theory = wire * static_cast<double>(bytes) / bandwidth;
    rows.push_back({{"bytes", bytes},
                    {"measured_s", measured},
                    {"theory_s", theory},
                    {"ratio", measured / theory}});
    if (group->rank() == 0)
      std::printf("%12lld %12.3f %12.3f %8.2f\n", static_cast<long long>(bytes), measured * 1e3,
                  theory * 1e3, measured / theory);
  }
  if (a.has("json") && group->rank() == 0)
    std::cout << nlohmann::ordered_json{{"ranks", n},
                                        {"bandwidth_bytes_per_s", bandwidth},
                                        {"sizes", rows}}
                     .dump()
              << "\n";
  return 0;
}

}  // namespace tessera::cli
