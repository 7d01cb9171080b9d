// ZeRO-Infinity's NVMe offload of the optimizer state (parallel/tensor_swapper.h) and
// the asynchronous file I/O under it (io/async_file_io.h): bytes written come back equal
// whatever the aio shape; failures (an injected EIO, a read past the file's end, a missing
// directory) are errors naming the file and the offset; an optimizer whose state is swapped
// sub-group by sub-group makes bit for bit the updates of one that keeps it in memory, its
// state reads back outside a step, and a failed write loses nothing.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "tessera/io/async_file_io.h"
#include "tessera/io/train_config.h"
#include "tessera/ops.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/tensor_swapper.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace swap_test {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("tessera-swap-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

void fill(io::AlignedBuffer& b, uint32_t seed) {
  std::mt19937 g(seed);
  auto* p = static_cast<unsigned char*>(b.data());
  for (int64_t i = 0; i < b.size(); ++i) p[i] = static_cast<unsigned char>(g());
}

}  // namespace swap_test

using namespace swap_test;

TEST_CASE("AsyncFileIO: writes read back equal at every aio shape, with io_uring or without") {
  TempDir dir;
  int n = 0;
  for (bool blocking : {false, true})
    for (int64_t threads : {1, 3})
      for (bool single : {false, true})
        for (bool overlap : {false, true}) {
          io::AioConfig c;
          c.block_size = 65536;
          c.queue_depth = 4;
          c.thread_count = threads;
          c.single_submit = single;
          c.overlap_events = overlap;
          io::AsyncFileIO::use_blocking_io_for_testing(blocking);
          io::AsyncFileIO aio(c);
          io::AsyncFileIO::use_blocking_io_for_testing(false);
          const int f = aio.open_scratch(dir.path / ("f" + std::to_string(n++)));
          CHECK(fs::is_empty(dir.path));  // unlinked at once
          io::AlignedBuffer a(3 * 1024 * 1024 + 4096), b(1 << 20), back(a.size());
          fill(a, 1);
          fill(b, 2);
          const auto ta = aio.submit(io::AsyncFileIO::Op::write, f, 0, a.data(), a.size());
          const auto tb = aio.submit(io::AsyncFileIO::Op::write, f, a.size(), b.data(), b.size());
          aio.wait(tb);
          aio.wait(ta);
          aio.wait(aio.submit(io::AsyncFileIO::Op::read, f, 0, back.data(), back.size()));
          CHECK(std::memcmp(back.data(), a.data(), static_cast<size_t>(a.size())) == 0);
          aio.wait(aio.submit(io::AsyncFileIO::Op::read, f, a.size(), back.data(), b.size()));
          CHECK(std::memcmp(back.data(), b.data(), static_cast<size_t>(b.size())) == 0);
        }
}

TEST_CASE("AsyncFileIO: failures name the file, the offset and the cause") {
  for (bool blocking : {false, true}) {
    TempDir dir;
    io::AioConfig c;
    c.block_size = 8192;
    io::AsyncFileIO::use_blocking_io_for_testing(blocking);
    io::AsyncFileIO aio(c);
    io::AsyncFileIO::use_blocking_io_for_testing(false);
    const fs::path path = dir.path / "swap";
    const int f = aio.open_scratch(path);
    io::AlignedBuffer buf(32768);
    fill(buf, 3);
    // An I/O error on the piece that covers byte 20000: the transfer fails, naming it; once.
    io::AsyncFileIO::inject_fault_for_testing(io::AsyncFileIO::Op::write, 20000, EIO);
    const std::string eio = error_of(
        [&] { aio.wait(aio.submit(io::AsyncFileIO::Op::write, f, 0, buf.data(), buf.size())); });
    CHECK(eio.find("write of 8192 bytes at offset 16384 of swap file '" + path.string() + "'") !=
          std::string::npos);
    CHECK(eio.find(std::strerror(EIO)) != std::string::npos);
    aio.wait(aio.submit(io::AsyncFileIO::Op::write, f, 0, buf.data(), buf.size()));
    // A read past the file's end (a file truncated under the swapper): a short read, named.
    io::AlignedBuffer big(65536);
    const std::string short_read = error_of(
        [&] { aio.wait(aio.submit(io::AsyncFileIO::Op::read, f, 0, big.data(), big.size())); });
    CHECK(short_read.find("short read at offset 32768 of swap file '" + path.string()) !=
          std::string::npos);
    // Unaligned O_DIRECT transfers are refused before any I/O.
    if (aio.direct(f))
      CHECK(error_of([&] {
              aio.submit(io::AsyncFileIO::Op::read, f, 100, buf.data(), 4096);
            }).find("not aligned") != std::string::npos);
    // A directory that does not exist; a file that exists.
    CHECK(error_of([&] {
            aio.open_scratch(dir.path / "missing" / "swap");
          }).find("cannot create swap file '" + (dir.path / "missing" / "swap").string()) !=
          std::string::npos);
    const fs::path taken = dir.path / "taken";
    { std::ofstream(taken) << "x"; }
    CHECK(error_of([&] { aio.open_scratch(taken); }).find("File exists") != std::string::npos);
  }
}

TEST_CASE("aio section: DeepSpeed's keys and defaults, bad values named") {
  auto parse = [](const std::string& aio) {
    return io::TrainConfig::parse(R"({"train_batch_size": 8, "aio": )" + aio + "}", 1, "c.json");
  };
  const io::AioConfig d = io::aio_config(parse("{}"));
  CHECK(d.block_size == 1048576);
  CHECK(d.queue_depth == 8);
  CHECK(d.thread_count == 1);
  CHECK_FALSE(d.single_submit);
  CHECK(d.overlap_events);
  const io::AioConfig c = io::aio_config(parse(
      R"({"block_size": 262144, "queue_depth": 32, "thread_count": 4, "single_submit": true, "overlap_events": false})"));
  CHECK(c.block_size == 262144);
  CHECK(c.queue_depth == 32);
  CHECK(c.thread_count == 4);
  CHECK(c.single_submit);
  CHECK_FALSE(c.overlap_events);
  CHECK(error_of([&] { parse(R"({"block_size": 1000})"); }).find("'aio.block_size'") !=
        std::string::npos);
  CHECK(error_of([&] { parse(R"({"queue_depth": 0})"); }).find("'aio.queue_depth'") !=
        std::string::npos);
  CHECK(error_of([&] { parse(R"({"thread_count": 1000})"); }).find("'aio.thread_count'") !=
        std::string::npos);
}

namespace swap_test {

// Three parameters with gradients, updated by AdamW `steps` times; with `swap`, their state
// goes through a TensorSwapper in sub-groups of 3000 elements.
struct SwapRun {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
  std::shared_ptr<parallel::TensorSwapper> swapper;
};

SwapRun make_run(const fs::path* swap_dir, bool pipeline) {
  SwapRun r;
  manual_seed(5);
  for (int64_t n : {2500, 1200, 4100}) r.params.push_back(randn({n}));
  optim::ParamGroup g;
  g.names = {"a", "b", "c"};
  g.params = r.params;
  g.lr = 1e-2;
  g.weight_decay = 0.1;
  r.opt = std::make_unique<optim::Adam>(std::vector<optim::ParamGroup>{g});
  if (swap_dir) {
    parallel::NvmeOffloadOptions o;
    o.nvme_path = swap_dir->string();
    o.sub_group_size = 3000;
    o.buffer_count = 2;
    o.pipeline_read = o.pipeline_write = pipeline;
    r.swapper = std::make_shared<parallel::TensorSwapper>(o, "test");
    r.opt->set_state_stager(r.swapper);
  }
  return r;
}

void step(SwapRun& r, int k) {
  manual_seed(100 + k);
  for (Tensor& p : r.params) p.set_grad(randn(p.shape()));
  r.opt->step();
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector() == b.to_vector();
}

}  // namespace swap_test

TEST_CASE("TensorSwapper: swapped sub-groups update bit for bit as in memory") {
  TempDir dir;
  for (bool pipeline : {false, true}) {
    SwapRun ref = make_run(nullptr, false), nv = make_run(&dir.path, pipeline);
    for (int k = 0; k < 4; ++k) {
      step(ref, k);
      step(nv, k);
    }
    for (size_t i = 0; i < ref.params.size(); ++i) CHECK(equal(ref.params[i], nv.params[i]));
    // Between steps no moment is in memory; read outside a step, each comes back equal.
    const auto state = nv.opt->state_dict();
    for (const auto& [k, v] : state)
      if (k != "step") CHECK_FALSE(v.storage()->resident());
    const parallel::SwapStats s = nv.swapper->stats();
    CHECK(s.disk_bytes == 2 * (12288 + 8192 + 20480));  // a page-aligned region a slot
    if (!pipeline) {
      CHECK(s.bytes_written == 4 * s.disk_bytes);
      CHECK(s.bytes_read == 3 * s.disk_bytes);  // (the first step makes the state)
      CHECK(s.bytes_from_buffers == 0);
    } else {
      // The last step's writes may still be in flight; each step reads the state back from
      // the file where its write had completed when the step before ended, else from that
      // write's buffer (all of it fits the staging here).
      CHECK(s.bytes_written >= 3 * s.disk_bytes);
      CHECK(s.bytes_written <= 4 * s.disk_bytes);
      CHECK(s.bytes_read + s.bytes_from_buffers == 3 * s.disk_bytes);
    }
    for (const auto& [k, v] : ref.opt->state_dict()) CHECK(equal(v, state.at(k)));
    nv.swapper->swap_out(state);
    for (const auto& [k, v] : state)
      if (k != "step") CHECK_FALSE(v.storage()->resident());
    step(ref, 9);
    step(nv, 9);
    for (size_t i = 0; i < ref.params.size(); ++i) CHECK(equal(ref.params[i], nv.params[i]));
  }
}

TEST_CASE("TensorSwapper: pipelined across steps, state read and loaded between steps") {
  // With pipeline_read and pipeline_write a step ends with writes in flight and the next
  // step's state read ahead (from the file, or from those writes' buffers). Reading the state
  // then, or loading other state (new tensors under the same keys, as a checkpoint's load
  // does), must give the steps that follow the values an in-memory optimizer has.
  TempDir dir;
  for (int64_t buffers : {1, 8}) {  // (a little staging, and room for all of the state)
    SwapRun ref = make_run(nullptr, false), nv = make_run(&dir.path, true);
    if (buffers == 1) {
      parallel::NvmeOffloadOptions o;
      o.nvme_path = dir.path.string();
      o.sub_group_size = 3000;
      o.buffer_count = 1;
      o.buffer_numel = 3000;
      o.pipeline_read = o.pipeline_write = true;
      nv.swapper = std::make_shared<parallel::TensorSwapper>(o, "test-small");
      nv.opt->set_state_stager(nv.swapper);
    }
    for (int k = 0; k < 3; ++k) {
      step(ref, k);
      step(nv, k);
    }
    for (const auto& [k, v] : ref.opt->state_dict()) CHECK(equal(v, nv.opt->state_dict().at(k)));
    nv.swapper->swap_out(nv.opt->state_dict());
    step(ref, 3);
    step(nv, 3);
    std::map<std::string, Tensor> loaded;
    for (const auto& [k, v] : ref.opt->state_dict())
      loaded[k] = k == "step" ? v.clone() : v * 0.5;  // (new tensors)
    ref.opt->load_state_dict(loaded);
    std::map<std::string, Tensor> copy;
    for (const auto& [k, v] : loaded) copy[k] = v.clone();
    nv.opt->load_state_dict(copy);
    nv.swapper->swap_out(nv.opt->state_dict());
    for (int k = 4; k < 7; ++k) {
      step(ref, k);
      step(nv, k);
    }
    for (size_t i = 0; i < ref.params.size(); ++i) CHECK(equal(ref.params[i], nv.params[i]));
    for (const auto& [k, v] : ref.opt->state_dict()) CHECK(equal(v, nv.opt->state_dict().at(k)));
  }
}

TEST_CASE("TensorSwapper: a failed write loses nothing; a failed read is named") {
  TempDir dir;
  SwapRun ref = make_run(nullptr, false), nv = make_run(&dir.path, false);
  step(ref, 0);
  step(nv, 0);
  // The second step's first write fails: the step stops with the error, and the tensor whose
  // write failed keeps its bytes in memory.
  io::AsyncFileIO::inject_fault_for_testing(io::AsyncFileIO::Op::write, 0, ENOSPC);
  const std::string e = error_of([&] { step(nv, 1); });
  CHECK(e.find("of swap file '" + nv.swapper->path() + "' failed: " + std::strerror(ENOSPC)) !=
        std::string::npos);
  const Tensor a_avg = nv.opt->state_dict().at("a.exp_avg");
  CHECK(a_avg.storage()->resident());
  step(ref, 1);
  CHECK(equal(a_avg, ref.opt->state_dict().at("a.exp_avg")));
  // A failed read stops the step before any update, naming the file and offset.
  nv.swapper->swap_out(nv.opt->state_dict());
  io::AsyncFileIO::inject_fault_for_testing(io::AsyncFileIO::Op::read, 0, EIO);
  const std::string r = error_of([&] { step(nv, 2); });
  CHECK(r.find("read of 12288 bytes at offset 0 of swap file") != std::string::npos);
  CHECK(r.find(std::strerror(EIO)) != std::string::npos);
}

TEST_CASE("TensorSwapper: a bad nvme_path is named") {
  parallel::NvmeOffloadOptions o;
  o.nvme_path = "/proc/version/x";
  CHECK(error_of([&] {
          parallel::TensorSwapper s(o, "t");
        }).find("zero_optimization.offload_optimizer.nvme_path") != std::string::npos);
}
