// The NCCL process group on CUDA tensors, one GPU per rank (run by mpirun at 1, 2 and 4
// processes; skipped, with the reason, when this machine has fewer GPUs than ranks, or no NCCL).
// Expected values are closed forms in the rank; the engine over NCCL is compared with one CPU
// process training on the whole global batch.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>

#include "skip.h"
#include "tessera/cuda.h"
#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using namespace tessera::parallel;

namespace {

// One GPU per rank and a build with NCCL, decided before MPI starts (from the launcher's
// environment), so the cases are skipped, not passed, where they cannot run.
doctest::skip nccl_gpus_required() {
  const int ranks = test::launched_world_size();
  if (!nccl_compiled()) return test::skip_if(true, "this build has no NCCL");
  const int gpus = cuda_device_count();
  const std::string why = cuda_unavailable_reason();
  return test::skip_if(gpus < ranks, "NCCL needs one GPU per rank: " + std::to_string(gpus) +
                                         " visible for " + std::to_string(ranks) + " rank(s)" +
                                         (why.empty() ? "" : " (" + why + ")"));
}

Device my_gpu() {
  return Device::cuda(local_device_index());
}

// Rank r's tensor on the GPU: element i = r * 100 + i.
Tensor gpu_ramp(int64_t n, int r, DType d = DType::Float32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = r * 100.0 + static_cast<double>(i);
  return from_vector(v, {n}).to(d).to(my_gpu());
}

std::vector<double> host(const Tensor& t) {
  return t.to(Device::cpu()).to(DType::Float64).to_vector();
}

}  // namespace

TEST_CASE("NCCL: all_reduce, reduce_scatter, all_gather, broadcast, send/recv, barrier" *
          nccl_gpus_required()) {
  auto g = make_nccl_group(world(), my_gpu());
  const int n = g->size(), r = g->rank();
  CHECK(g->backend() == "nccl");
  const double rank_sum = n * (n - 1) / 2.0;
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const double eps = d == DType::BFloat16 ? 1e-2 : 1e-12;
    Tensor s = gpu_ramp(5, r, d), a = gpu_ramp(5, r, d), m = gpu_ramp(5, r, d);
    g->all_reduce(s, ReduceOp::Sum);
    g->all_reduce(a, ReduceOp::Avg);
    g->all_reduce(m, ReduceOp::Max);
    for (int64_t i = 0; i < 5; ++i) {
      const auto k = static_cast<size_t>(i);
      CHECK(host(s)[k] == doctest::Approx(100 * rank_sum + n * i).epsilon(eps));
      CHECK(host(a)[k] == doctest::Approx((100 * rank_sum + n * i) / n).epsilon(eps));
      CHECK(host(m)[k] == doctest::Approx(100.0 * (n - 1) + i).epsilon(eps));
    }
  }
  Tensor in = gpu_ramp(3 * n, r), out = Tensor::empty({3}, DType::Float32, my_gpu());
  g->reduce_scatter(out, in);
  for (int64_t i = 0; i < 3; ++i)
    CHECK(host(out)[static_cast<size_t>(i)] == doctest::Approx(100 * rank_sum + n * (3.0 * r + i)));
  Tensor gathered = Tensor::empty({2 * n}, DType::Float32, my_gpu());
  g->all_gather(gathered, gpu_ramp(2, r));
  for (int q = 0; q < n; ++q)
    CHECK(host(gathered)[static_cast<size_t>(2 * q + 1)] == 100.0 * q + 1);
  Tensor buf = zeros({2 * n}, DType::Float32, my_gpu());
  buf.narrow(0, 2 * r, 2).copy_(gpu_ramp(2, r));
  g->all_gather(buf, buf.narrow(0, 2 * r, 2));  // in place
  CHECK(host(buf) == host(gathered));
  Tensor b = r == 0 ? gpu_ramp(4, 7) : zeros({4}, DType::Float32, my_gpu());
  g->broadcast(b, 0);
  CHECK(host(b)[3] == 703.0);
  if (n > 1) {
    if (r == 0) g->send(gpu_ramp(3, 9), 1);
    if (r == 1) {
      Tensor got = zeros({3}, DType::Float32, my_gpu());
      g->recv(got, 0);
      CHECK(host(got)[2] == 902.0);
    }
  }
  if (n > 1) {  // a ring exchange: every rank sends and receives at once (one NCCL group)
    Tensor mine = gpu_ramp(1 << 20, r), from_prev = zeros({1 << 20}, DType::Float32, my_gpu());
    for (Work& k : g->batch_send_recv({{P2POp::Kind::Send, mine, (r + 1) % n},
                                       {P2POp::Kind::Recv, from_prev, (r + n - 1) % n}}))
      k.wait();
    CHECK(host(from_prev)[5] == 100.0 * ((r + n - 1) % n) + 5);
  }
  g->barrier();
  // CPU tensors go through the bootstrap (MPI) group.
  Tensor c = full({2}, r + 1.0);
  g->all_reduce(c);
  CHECK(c.to_vector()[1] == rank_sum + n);
  CHECK(g->all_reduce_scalar(2.0) == 2.0 * n);
  // A strided view, wrong sizes: errors naming the op.
  CHECK_THROWS_WITH_AS(g->all_reduce(gpu_ramp(6, r).view({2, 3}).transpose(0, 1)),
                       doctest::Contains("all_reduce: tensor must be contiguous"), Error);
  CHECK_THROWS_WITH_AS(g->all_gather(Tensor::empty({3}, DType::Float32, my_gpu()), gpu_ramp(2, r)),
                       doctest::Contains("all_gather"), Error);
}

// MoE's dispatch exchange (ProcessGroup::all_to_all: one NCCL group of a send and a receive
// per peer): chunk q of rank r's input reaches rank q as chunk r, in float32, bf16 and int64
// (small integers: exact in bf16); the logger counts it; mismatched sizes are errors naming
// the op.
TEST_CASE("NCCL: all_to_all (MoE's dispatch)" * nccl_gpus_required()) {
  auto g = make_nccl_group(world(), my_gpu());
  const int n = g->size(), r = g->rank();
  g->logger().enable(true);
  const int64_t k = 3;
  for (DType d : {DType::Float32, DType::BFloat16, DType::Int64}) {
    std::vector<double> mine(static_cast<size_t>(n * k));
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < k; ++i)
        mine[static_cast<size_t>(q * k + i)] = r * 16.0 + q * 4.0 + static_cast<double>(i);
    const Tensor in = from_vector(mine, {n * k}).to(d).to(my_gpu());
    Tensor out = zeros({n * k}, d, my_gpu());
    g->all_to_all(out, in);
    const std::vector<double> got = host(out);
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < k; ++i)
        CHECK(got[static_cast<size_t>(q * k + i)] == q * 16.0 + r * 4.0 + static_cast<double>(i));
  }
  g->barrier();
  const auto t = g->logger().totals().at("all_to_all");
  CHECK(t.calls == 3);
  CHECK_THROWS_WITH_AS(
      g->all_to_all(Tensor::empty({n * k + 1}, DType::Float32, my_gpu()), gpu_ramp(n * k, r)),
      doctest::Contains("all_to_all"), Error);
}

TEST_CASE("NCCL: async collectives in order, logger, sub-group" * nccl_gpus_required()) {
  auto g = make_nccl_group(world(), my_gpu());
  const int n = g->size();
  g->logger().enable(true);
  std::vector<Tensor> ts;
  std::vector<Work> works;
  for (int k = 0; k < 4; ++k) {
    ts.push_back(full({1000}, k + 1.0, DType::Float32, my_gpu()));
    works.push_back(g->all_reduce_async(ts.back()));
  }
  for (auto& w : works) w.wait();  // orders the compute stream; the reads below follow it
  for (int k = 0; k < 4; ++k) CHECK(host(ts[static_cast<size_t>(k)])[999] == (k + 1.0) * n);
  g->barrier();  // the host waits: every collective before it is retired and logged
  const auto t = g->logger().totals().at("all_reduce");
  CHECK(t.calls == 4);
  CHECK(t.message_bytes == 4 * 4000);
  std::vector<int> all(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) all[static_cast<size_t>(q)] = q;
  auto sub = g->new_group(all);
  REQUIRE(sub);
  Tensor one = full({1}, 1.0, DType::Float32, my_gpu());
  sub->all_reduce(one);
  CHECK(host(one)[0] == n);
}

TEST_CASE("NCCL: the engine's DP, ZeRO 1-3 and ZeRO-Offload on GPUs follow one CPU process" *
          nccl_gpus_required()) {
  ::setenv("TESSERA_DIST_BACKEND", "nccl", 1);  // NCCL even on one rank
  auto w = world();
  const int n = w->size(), r = w->rank();
  struct Variant {
    int stage;
    bool offload, bf16;
    bool pin = false;  // offload_optimizer.pin_memory
  };
  auto train = [&](Variant v, Device device, std::shared_ptr<ProcessGroup> group) {
    manual_seed(3);
    models::GPT2Config c;
    c.vocab_size = 97, c.n_positions = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32;
    c.dropout = 0.0;
    models::GPT2LMHeadModel model(c);
    model.to(device);
    const int ranks = group->size();
    std::string zero = R"("stage": )" + std::to_string(v.stage) +
                       R"(, "stage3_param_persistence_threshold": 0, "reduce_bucket_size": 3000)";
    if (v.offload)
      zero += std::string(R"(, "offload_optimizer": {"device": "cpu", "pin_memory": )") +
              (v.pin ? "true" : "false") + "}";
    std::string cfg = R"({"train_batch_size": )" + std::to_string(2 * n) +
                      R"(, "gradient_clipping": 1.0,
      "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
      "zero_optimization": {)" +
                      zero + "}";
    if (v.bf16) cfg += R"(, "bf16": {"enabled": true})";
    cfg += "}";
    auto eng = engine::initialize(model, io::TrainConfig::parse(cfg, ranks), group);
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      Generator gen(50 + static_cast<uint64_t>(step));
      Tensor x = (rand({2 * n, 16}, DType::Float32, Device::cpu(), &gen) * 97.0).to(DType::Int64);
      Tensor y = (rand({2 * n, 16}, DType::Float32, Device::cpu(), &gen) * 97.0).to(DType::Int64);
      if (ranks > 1) x = x.narrow(0, 2 * r, 2), y = y.narrow(0, 2 * r, 2);
      const Tensor loss = eng->forward(models::Batch{x, y});
      eng->backward(loss);
      eng->step();
      losses.push_back(group->all_reduce_scalar(loss.item()) / ranks);  // mean over ranks
    }
    return losses;
  };
  const std::vector<double> cpu = train({0, false, false}, Device::cpu(), make_local_group());
  for (Variant v : {Variant{0, false, false}, Variant{1, false, false}, Variant{2, false, false},
                    Variant{3, false, false}, Variant{2, true, false}, Variant{3, true, false},
                    Variant{2, true, true}, Variant{3, false, true}, Variant{2, true, false, true},
                    Variant{3, true, true, true}}) {
    const std::vector<double> gpu = train(v, my_gpu(), w);
    if (v.pin) {  // pinned staging moves the same bytes: the run is bit-identical to pageable
      Variant pageable = v;
      pageable.pin = false;
      CHECK(gpu == train(pageable, my_gpu(), w));
    }
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i)
      worst = std::max(worst, std::abs(gpu[i] - cpu[i]) / std::abs(cpu[i]));
    const std::string name = "ZeRO stage " + std::to_string(v.stage) +
                             (v.offload ? " + offload" : "") + (v.pin ? " (pinned)" : "") +
                             (v.bf16 ? ", bf16" : "") + " over NCCL on " + std::to_string(n) +
                             " GPU(s)";
    INFO(name);
    CHECK(worst < (v.bf16 ? 3e-2 : 1e-4));  // bf16: as the single-GPU bf16 test
    MESSAGE(name << ": worst relative loss difference " << worst << " vs one CPU process");
  }
  ::unsetenv("TESSERA_DIST_BACKEND");
}

TEST_SUITE_END();
