// `tessera kernels list|check|bench`: the op set, checked and timed in isolation.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/grad_mode.h"
#include "tessera/op_catalog.h"
#include "tessera/ops.h"

namespace tessera::cli {

namespace {

const char* kKernelsHelp = R"(usage:
  tessera kernels list [--json]
  tessera kernels check [OP ...] [--device cpu|cuda] [--dtype float32,float64,...]
                        [--reference FILE] [--json]
  tessera kernels bench OP --shape S [--device cpu|cuda] [--dtype D] [--iters N] [--json]

list    every op with the backend kernels it exercises.
check   runs each op (default: all) on random inputs of several shapes, including broadcast
        and non-contiguous ones, on the device named, and compares forward output and
        gradient with the float64 CPU result on the same inputs; that float64 CPU result is
        itself compared with PyTorch's (the catalog reference, --reference FILE, found
        installed or in the source tree; without it those checks are not made), and float64
        gradients with finite differences. Each line says which references were used.
        Default dtypes: float32, float64, bfloat16, float16. Exit status 1 when any check
        fails.
bench   median time of OP's forward on inputs of --shape (elementwise: the tensor shape;
        matmul: M,N,K or B,M,N,K; attention: B,H,T,D; cross_entropy: N,C; embedding: V,D,N),
        with GFLOP/s for GEMM-like ops and GB/s otherwise.
)";

Device parse_device(const Args& a) {
  const Device d = Device::parse(a.get("device", "cpu"));
  require_usable_device(d, "--device");
  return d;
}

std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> out;
  std::string cur;
  for (char ch : text + ",") {
    if (ch == ',') {
      if (!cur.empty()) {
        const DType d = dtype_from_name(cur);
        TS_CHECK(is_floating(d), "--dtype: ops are checked at floating dtypes, got ", cur);
        out.push_back(d);
      }
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return out;
}

int list(const Args& a) {
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& s : testing::op_catalog()) {
    if (!a.has("json"))
      std::cout << std::left << std::setw(16) << s.name << std::setw(8)
                << (s.differentiable ? "grad" : "") << s.kernels << "  (" << s.cases.size()
                << " cases)\n";
    ops.push_back({{"name", s.name},
                   {"kernels", s.kernels},
                   {"differentiable", s.differentiable},
                   {"cases", s.cases.size()}});
  }
  if (a.has("json")) std::cout << nlohmann::json{{"ops", ops}}.dump() << "\n";
  return 0;
}

int check(const Args& a) {
  const Device device = parse_device(a);
  const std::vector<DType> dtypes =
      parse_dtypes(a.get("dtype", "float32,float64,bfloat16,float16"));
  std::vector<const testing::OpSpec*> ops;
  for (const std::string& name : a.positional()) {
    const testing::OpSpec* s = testing::find_op(name);
    TS_CHECK(s, "unknown op '", name, "' (see tessera kernels list)");
    ops.push_back(s);
  }
  if (ops.empty())
    for (const auto& s : testing::op_catalog()) ops.push_back(&s);
  const bool json = a.has("json");
  std::string tried;
  const auto reference = testing::CatalogReference::find(a.get("reference", ""), &tried);
  if (!reference && !json)
    std::cout << "no catalog reference (looked for " << tried
              << "): float64 cpu results are checked by finite differences only\n";
  int64_t checked = 0, failed = 0;
  nlohmann::json failures = nlohmann::json::array(), references = nlohmann::json::object();
  for (const testing::OpSpec* s : ops) {
    int64_t op_checks = 0, op_failed = 0;
    std::set<std::string> used;
    for (size_t di = 0; di < dtypes.size(); ++di) {
      for (const auto& r :
           testing::check_op(*s, device, dtypes[di], di == 0, reference ? &*reference : nullptr)) {
        ++op_checks;
        used.insert(r.reference);
        references[r.reference] = references.value(r.reference, 0) + 1;
        if (r.ok) continue;
        ++op_failed;
        failures.push_back({{"op", r.op},
                            {"case", r.label},
                            {"dtype", dtype_name(dtypes[di])},
                            {"check", r.what},
                            {"reference", r.reference},
                            {"message", r.message}});
        if (!json)
          std::cout << "  FAIL " << r.op << " [" << r.label << "] " << dtype_name(dtypes[di]) << " "
                    << r.what << " against " << r.reference << ": " << r.message << "\n";
      }
    }
    checked += op_checks;
    failed += op_failed;
    std::string against;
    for (const std::string& u : used) against += (against.empty() ? "" : ", ") + u;
    if (!json)
      std::cout << std::left << std::setw(16) << s->name << " "
                << (op_failed ? "FAILED " : "ok     ") << op_checks - op_failed << "/" << op_checks
                << " checks (against " << against << ")\n";
  }
  std::string dts;
  for (DType d : dtypes) dts += std::string(dts.empty() ? "" : ",") + dtype_name(d);
  if (!json) {
    std::cout << "\n"
              << checked - failed << " of " << checked << " checks passed over " << ops.size()
              << " ops on " << device.str() << " (" << dts << ")\n";
  } else {
    std::cout << nlohmann::json{{"checked", checked},
                                {"failed", failed},
                                {"ops", ops.size()},
                                {"device", device.str()},
                                {"dtypes", dts},
                                {"references", references},
                                {"reference_file", reference ? reference->path() : ""},
                                {"failures", failures}}
                     .dump()
              << "\n";
  }
  return failed ? 1 : 0;
}

int bench(const Args& a) {
  TS_CHECK(a.positional().size() == 1, "kernels bench: name one op (see tessera kernels list)");
  const testing::OpSpec* s = testing::find_op(a.positional()[0]);
  TS_CHECK(s, "unknown op '", a.positional()[0], "'");
  TS_CHECK(s->bench_case, "kernels bench: op '", s->name, "' has no benchmark");
  TS_CHECK(a.has("shape"), "kernels bench: --shape is required");
  const Shape shape = parse_shape(a.get("shape", ""));
  const Device device = parse_device(a);
  const DType dtype = dtype_from_name(a.get("dtype", "float32"));
  const int64_t iters = a.get_int("iters", 20);
  TS_CHECK(iters > 0, "--iters must be positive");
  const testing::OpCase c = s->bench_case(shape);
  std::vector<Tensor> inputs;
  double bytes = 0;
  for (const Tensor& t : testing::make_inputs(c, 1)) {
    Tensor x = (is_floating(t.dtype()) ? t.to(dtype) : t).to(device);
    bytes += static_cast<double>(x.nbytes());
    inputs.push_back(x);
  }
  const testing::OpContext ctx{dtype, device, c};
  NoGradGuard no_grad;
  const Tensor probe = s->fn(inputs, ctx);
  bytes += static_cast<double>(probe.nbytes());
  // On a GPU, `reps` calls run back to back and the device is waited for once per sample
  // (about 2 ms of work): the figure is the kernel's time in a stream of work, as in
  // training, rather than one launch plus one host synchronisation.
  int reps = 1;
  if (device.is_cuda()) {
    const double one = median_ms(
        [&] {
          const Tensor out = s->fn(inputs, ctx);
          cuda_synchronize();
        },
        3, 1);
    reps = static_cast<int>(std::clamp(std::ceil(2.0 / std::max(one, 1e-6)), 1.0, 1000.0));
  }
  const double median = median_ms(
                            [&] {
                              for (int r = 0; r < reps; ++r) const Tensor out = s->fn(inputs, ctx);
                              if (device.is_cuda()) cuda_synchronize();
                            },
                            static_cast<int>(iters), 3) /
                        reps;
  const double flops = s->flops ? s->flops(shape) : 0.0;
  nlohmann::json j{{"op", s->name},          {"shape", shape},
                   {"device", device.str()}, {"dtype", dtype_name(dtype)},
                   {"ms", median},           {"calls_per_sample", reps}};
  if (flops > 0)
    j["gflops"] = flops / median / 1e6;
  else
    j["gbps"] = bytes / median / 1e6;
  if (a.has("json")) {
    std::cout << j.dump() << "\n";
  } else {
    std::cout << s->name << " " << shape_str(shape) << " " << dtype_name(dtype) << " on "
              << device.str() << ": " << median << " ms, "
              << (flops > 0 ? std::to_string(flops / median / 1e6) + " GFLOP/s"
                            : std::to_string(bytes / median / 1e6) + " GB/s")
              << "\n";
  }
  return 0;
}

}  // namespace

int kernels_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {"device", "dtype", "shape", "iters", "reference"});
  if (a.has("help") || a.positional().empty()) {
    std::cout << kKernelsHelp;
    return a.has("help") ? 0 : 2;
  }
  const std::string sub = a.positional()[0];
  const Args rest(argc, argv, 3, {"json", "help"},
                  {"device", "dtype", "shape", "iters", "reference"});
  if (sub == "list") return list(rest);
  if (sub == "check") return check(rest);
  if (sub == "bench") return bench(rest);
  fail("unknown kernels subcommand '", sub, "': expected list, check or bench");
}

}  // namespace tessera::cli
