// The parameterised op test: every op in the catalog, every floating dtype, forward and
// gradient against float64; the float64 CPU result itself against PyTorch
// (tests/fixtures/catalog_reference.json); float64 gradients against finite differences.
#include <doctest/doctest.h>

#include <map>

#include "skip.h"

#include "tessera/cuda.h"
#include "tessera/dispatch.h"
#include "tessera/io/files.h"
#include "tessera/op_catalog.h"

using namespace tessera;

namespace {
const testing::CatalogReference& reference() {
  static const testing::CatalogReference ref =
      testing::CatalogReference::load(TESSERA_FIXTURES_DIR "/catalog_reference.json");
  return ref;
}

std::map<std::string, int> check_all(Device device) {
  const DType dtypes[] = {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16};
  std::map<std::string, int> by_reference;
  for (const auto& spec : testing::op_catalog()) {
    for (DType dt : dtypes) {
      for (const auto& r :
           testing::check_op(spec, device, dt, dt == DType::Float64, &reference())) {
        INFO(r.op, " [", r.label, "] ", std::string(dtype_name(dt)), " on ", device.str(), " ",
             r.what, " against ", r.reference);
        CHECK_MESSAGE(r.ok, r.message);
        // The float64 CPU result is the others' reference: it must never be its own.
        if (device.is_cpu() && dt == DType::Float64) CHECK(r.reference != "float64 cpu");
        ++by_reference[r.reference.substr(0, r.reference.find(' '))];
      }
    }
  }
  return by_reference;
}
}  // namespace

TEST_CASE("every catalog case has an independent float64 reference") {
  for (const auto& spec : testing::op_catalog())
    for (const auto& c : spec.cases)
      CHECK_MESSAGE(reference().find_case(spec.name, c.label),
                    spec.name << " [" << c.label
                              << "] has no entry in catalog_reference.json: run "
                                 "tests/fixtures/generate_catalog_fixtures.py");
}

TEST_CASE("every catalog op passes on cpu at every floating dtype") {
  const auto by_reference = check_all(Device::cpu());
  for (const auto& [ref, n] : by_reference) MESSAGE(n << " checks against " << ref);
  CHECK(by_reference.count("pytorch"));
  CHECK(by_reference.count("philox"));
  CHECK(by_reference.count("finite"));
}

TEST_CASE("every catalog op passes on cuda" * test::gpu_required()) {
  check_all(Device::cuda(0));
}

TEST_CASE("backends/README.md's table names every backend kernel") {
  const std::string readme = io::read_text_file(TESSERA_SOURCE_ROOT "/backends/README.md");
  for (int k = 0; k < kNumKernels; ++k) {
    const std::string name = kernel_name(static_cast<Kernel>(k));
    const bool named = readme.find("`" + name + "`") != std::string::npos ||
                       readme.find(" " + name + " ") != std::string::npos ||
                       readme.find("`" + name + " ") != std::string::npos ||
                       readme.find(" " + name + "`") != std::string::npos;
    CHECK_MESSAGE(named, "kernel " << name << " is missing from backends/README.md");
  }
}

TEST_CASE("the catalog covers every backend kernel") {
  for (int k = 0; k < kNumKernels; ++k) {
    const std::string name = kernel_name(static_cast<Kernel>(k));
    bool covered = false;
    for (const auto& spec : testing::op_catalog())
      covered = covered || spec.kernels.find(name) != std::string::npos;
    CHECK_MESSAGE(covered, "kernel " << name << " is exercised by no catalog op");
  }
}
