// A temporary directory every rank of the job names alike (after rank 0's process id), for
// tests whose ranks write one checkpoint together.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"

namespace tessera::test {

inline std::filesystem::path shared_temp_dir(const std::string& name) {
  Tensor pid = full({1}, static_cast<double>(::getpid()), DType::Int64);
  parallel::world()->broadcast(pid, 0);
  return std::filesystem::temp_directory_path() /
         ("tessera-" + name + "-" + std::to_string(static_cast<int64_t>(pid.item())));
}

}  // namespace tessera::test
