// `tessera nvme-tune DIR [--size MB] [--quick] [--json]`: DeepSpeed's ds_nvme_tune.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "tessera/io/async_file_io.h"
#include "tessera/io/files.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_swapper.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

const char* kNvmeTuneHelp =
    R"(usage: tessera nvme-tune DIR [--size MB] [--quick] [--json]

DeepSpeed's ds_nvme_tune: times reads and writes of a --size MB file (default 256) in DIR
(the offload_optimizer.nvme_path you mean to use) for each shape of the "aio" section
(block_size, queue_depth, thread_count, single_submit, overlap_events), prints each shape's
GB/s, and then the best "aio" section to paste into the config, with its read and write GB/s.
The best shape then drives Tessera's optimizer swapper over the same bytes, and its GB/s are
printed as a fraction of the raw best (the swapper's own copies and bookkeeping cost the
rest). --quick sweeps 8 shapes instead of 72. The file is unlinked when created: nothing is
left behind, whatever stops the command.
)";

struct Result {
  io::AioConfig aio;
  double read_gbps = 0, write_gbps = 0;
  bool direct = false;  // O_DIRECT (else the filesystem refused it: tmpfs, ...)
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result measure(const fs::path& dir, const io::AioConfig& aio, io::AlignedBuffer& buf, int n) {
  io::AsyncFileIO io(aio);
  const int f = io.open_scratch(
      dir / ("tessera-nvme-tune-" + std::to_string(::getpid()) + "-" + std::to_string(n)));
  Result r{aio};
  r.direct = io.direct(f);
  const double gb = static_cast<double>(buf.size()) / 1e9;
  auto t0 = std::chrono::steady_clock::now();
  io.wait(io.submit(io::AsyncFileIO::Op::write, f, 0, buf.data(), buf.size()));
  r.write_gbps = gb / seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  io.wait(io.submit(io::AsyncFileIO::Op::read, f, 0, buf.data(), buf.size()));
  r.read_gbps = gb / seconds_since(t0);
  return r;
}

std::vector<io::AioConfig> shapes(bool quick) {
  std::vector<io::AioConfig> out;
  const std::vector<int64_t> blocks =
      quick ? std::vector<int64_t>{262144, 1048576} : std::vector<int64_t>{131072, 262144, 1048576};
  const std::vector<int64_t> depths =
      quick ? std::vector<int64_t>{8, 32} : std::vector<int64_t>{4, 8, 32};
  const std::vector<int64_t> threads =
      quick ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 2};
  for (int64_t b : blocks)
    for (int64_t q : depths)
      for (int64_t t : threads)
        for (bool single : quick ? std::vector<bool>{false} : std::vector<bool>{false, true})
          for (bool overlap : quick ? std::vector<bool>{true} : std::vector<bool>{true, false}) {
            io::AioConfig c;
            c.block_size = b;
            c.queue_depth = q;
            c.thread_count = t;
            c.single_submit = single;
            c.overlap_events = overlap;
            out.push_back(c);
          }
  return out;
}

nlohmann::ordered_json aio_json(const io::AioConfig& c) {
  return {{"block_size", c.block_size},
          {"queue_depth", c.queue_depth},
          {"thread_count", c.thread_count},
          {"single_submit", c.single_submit},
          {"overlap_events", c.overlap_events}};
}

// The optimizer swapper with `aio`: the same bytes as 16 state tensors, written out and read
// back as training moves them (pipelined; 4 buffers of one tensor each, so reads run up to 4
// tensors ahead).
Result swapper_rate(const fs::path& dir, const io::AioConfig& aio, int64_t bytes) {
  parallel::NvmeOffloadOptions o;
  o.nvme_path = dir.string();
  o.aio = aio;
  o.pipeline_read = o.pipeline_write = true;
  const int64_t per = std::max<int64_t>(1024, bytes / 4 / 16);
  o.buffer_numel = per;
  auto swapper = std::make_shared<parallel::TensorSwapper>(o, "nvme-tune");
  std::vector<optim::StateTensor> state;
  for (int i = 0; i < 16; ++i) state.push_back({"t" + std::to_string(i), zeros({per})});
  const double gb = static_cast<double>(16 * per * 4) / 1e9;
  Result r{aio};
  auto t0 = std::chrono::steady_clock::now();
  swapper->release(state);
  swapper->finish();
  r.write_gbps = gb / seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < state.size(); ++i) {
    swapper->prefetch({state.begin() + static_cast<std::ptrdiff_t>(i) + 1, state.end()});
    swapper->acquire({state[i]});
  }
  r.read_gbps = gb / seconds_since(t0);
  swapper->finish();
  return r;
}

}  // namespace

int nvme_tune_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help", "quick"}, {"size"});
  if (a.has("help")) {
    std::cout << kNvmeTuneHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "nvme-tune: expected one directory (the nvme_path to tune)");
  const fs::path dir = a.positional()[0];
  io::check_writable_directory(dir.string(), "nvme-tune DIR");
  const int64_t mb = a.get_int("size", 256);
  TS_CHECK(mb >= 1 && mb <= 65536, "nvme-tune: --size must be in [1, 65536] MB, got ", mb);
  io::AlignedBuffer buf(mb << 20);
  for (int64_t i = 0; i < buf.size(); i += 4096) static_cast<char*>(buf.data())[i] = 1;
  const std::vector<io::AioConfig> sweep = shapes(a.has("quick"));
  std::fprintf(stderr, "%-10s %6s %7s %6s %7s %10s %10s\n", "block", "depth", "threads", "single",
               "overlap", "read GB/s", "write GB/s");
  Result best;
  double best_sum = -1;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < sweep.size(); ++i) {
    const Result r = measure(dir, sweep[i], buf, static_cast<int>(i));
    std::fprintf(
        stderr, "%-10lld %6lld %7lld %6s %7s %10.2f %10.2f   [%zu/%zu]\n",
        static_cast<long long>(r.aio.block_size), static_cast<long long>(r.aio.queue_depth),
        static_cast<long long>(r.aio.thread_count), r.aio.single_submit ? "yes" : "no",
        r.aio.overlap_events ? "yes" : "no", r.read_gbps, r.write_gbps, i + 1, sweep.size());
    rows.push_back(
        {{"aio", aio_json(r.aio)}, {"read_gbps", r.read_gbps}, {"write_gbps", r.write_gbps}});
    if (r.read_gbps + r.write_gbps > best_sum) {
      best_sum = r.read_gbps + r.write_gbps;
      best = r;
    }
  }
  const Result swap = swapper_rate(dir, best.aio, buf.size());
  const double read_ratio = swap.read_gbps / best.read_gbps,
               write_ratio = swap.write_gbps / best.write_gbps;
  if (!best.direct)
    std::cerr << "note: " << dir.string()
              << " refuses O_DIRECT (tmpfs?): these figures are the page cache's, not a disk's\n";
  std::cout << "best \"aio\" section (read " << best.read_gbps << " GB/s, write " << best.write_gbps
            << " GB/s):\n"
            << nlohmann::ordered_json{{"aio", aio_json(best.aio)}}.dump(2) << "\n";
  std::printf(
      "optimizer swapper with it: read %.2f GB/s (%.0f%% of raw), write %.2f GB/s (%.0f%%)\n",
      swap.read_gbps, 100 * read_ratio, swap.write_gbps, 100 * write_ratio);
  if (a.has("json"))
    std::cout << nlohmann::ordered_json{{"aio", aio_json(best.aio)},
                                        {"read_gbps", best.read_gbps},
                                        {"write_gbps", best.write_gbps},
                                        {"swapper_read_gbps", swap.read_gbps},
                                        {"swapper_write_gbps", swap.write_gbps},
                                        {"swapper_read_ratio", read_ratio},
                                        {"swapper_write_ratio", write_ratio},
                                        {"direct", best.direct},
                                        {"results", rows}}
                     .dump()
              << "\n";
  return 0;
}

}  // namespace tessera::cli
