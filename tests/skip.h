// Test cases that cannot run here are skipped, and counted as skipped, never as passed:
//   TEST_CASE("..." * tessera::test::gpu_required()) { ... }
// The condition is decided when the test is registered; the reason is printed once by the
// test main (tests/doctest_main.cpp), which exits 77 (meson's "skipped") when every selected
// test case of the executable was skipped.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "tessera/cuda.h"

namespace tessera::test {

inline std::set<std::string>& skip_reasons() {
  static std::set<std::string> reasons;
  return reasons;
}

// `skip` with its reason recorded for the summary.
inline doctest::skip skip_if(bool skip, const std::string& reason) {
  if (skip) skip_reasons().insert(reason);
  return doctest::skip(skip);
}

inline doctest::skip gpu_required() {
  const bool none = cuda_device_count() == 0;
  return skip_if(none, none ? "needs a CUDA device: " + cuda_unavailable_reason() : "");
}

// Under ASan + UBSan (scripts/test_sanitizers.sh sets TESSERA_SANITIZED): a long case runs a
// shorter version of itself there, since the sanitizers look for memory errors on each code
// path and the release pass has checked every value.
inline bool sanitized() {
  return std::getenv("TESSERA_SANITIZED") != nullptr;
}

// Ranks this process was launched as one of (before MPI is initialised).
inline int launched_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

}  // namespace tessera::test
