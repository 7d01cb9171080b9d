// `tessera report`: what this build has compiled in and which devices are visible.
#include <omp.h>

#include <Eigen/Core>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/cuda.h"
#include "tools/cli.h"

extern "C" char* openblas_get_config(void);

namespace tessera::cli {

int report_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"}, {});
  if (a.has("help")) {
    std::cout << "usage: tessera report [--json]\n\nPrints the compiled-in backends and "
                 "libraries and the visible devices.\n";
    return 0;
  }
  nlohmann::json devices = nlohmann::json::array();
  devices.push_back({{"device", "cpu"}, {"threads", omp_get_max_threads()}});
  for (int i = 0; i < cuda_device_count(); ++i)
    devices.push_back({{"device", "cuda:" + std::to_string(i)}, {"name", cuda_device_name(i)}});
  const std::string eigen = std::to_string(EIGEN_WORLD_VERSION) + "." +
                            std::to_string(EIGEN_MAJOR_VERSION) + "." +
                            std::to_string(EIGEN_MINOR_VERSION);
  nlohmann::json j{
      {"version", TESSERA_VERSION},
      {"cpu",
       {{"blas", std::string(openblas_get_config())},
        {"eigen", eigen},
        {"openmp_threads", omp_get_max_threads()}}},
      {"cuda",
       {{"compiled", cuda_compiled()},
        {"devices", cuda_device_count()},
        {"status", cuda_unavailable_reason().empty() ? "ok" : cuda_unavailable_reason()}}},
      // Not yet built: tracked by the CUDA-backend and distributed-training issues.
      {"cublas", false},
      {"cudnn", false},
      {"nccl", false},
      {"mpi", false},
      {"devices", devices}};
  if (a.has("json")) {
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "Tessera " << TESSERA_VERSION << "\n"
              << "  CPU:   " << omp_get_max_threads() << " threads, Eigen " << eigen << ", "
              << openblas_get_config() << "\n"
              << "  CUDA:  " << (cuda_compiled() ? "compiled in" : "not compiled") << "; "
              << (cuda_unavailable_reason().empty()
                      ? std::to_string(cuda_device_count()) + " device(s)"
                      : cuda_unavailable_reason())
              << "\n"
              << "  cuBLAS, cuDNN, NCCL, MPI: not yet built into this version\n";
    for (int i = 0; i < cuda_device_count(); ++i)
      std::cout << "  cuda:" << i << " " << cuda_device_name(i) << "\n";
  }
  return 0;
}

}  // namespace tessera::cli
