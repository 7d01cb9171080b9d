// `tessera report`: what this build has compiled in and which devices are visible.
#include <omp.h>

#include <Eigen/Core>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/parallel/process_group.h"

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
  for (int i = 0; i < cuda_device_count(); ++i) {
    const CudaDeviceInfo d = cuda_device_info(i);
    devices.push_back({{"device", "cuda:" + std::to_string(i)},
                       {"name", d.name},
                       {"memory_bytes", d.total_bytes},
                       {"compute_capability", std::to_string(d.capability_major) + "." +
                                                  std::to_string(d.capability_minor)},
                       {"multiprocessors", d.multiprocessors}});
  }
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
      {"cuda_libraries", cuda_library_versions()},
      // cuDNN attention is not used (own fused kernel); MPI is the CPU process group, NCCL
      // the GPU one (its version, or false when not built).
      {"cudnn", false},
      {"nccl", parallel::nccl_compiled() ? nlohmann::json(parallel::nccl_version())
                                         : nlohmann::json(false)},
      {"mpi", true},
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
              << "  libraries: " << (cuda_compiled() ? cuda_library_versions() : "none")
              << "; process groups: MPI"
              << (parallel::nccl_compiled() ? ", NCCL " + parallel::nccl_version()
                                            : " (NCCL not built)")
              << "\n";
    for (int i = 0; i < cuda_device_count(); ++i) {
      const CudaDeviceInfo d = cuda_device_info(i);
      std::cout << "  cuda:" << i << " " << d.name << ", " << (d.total_bytes >> 20) << " MiB, sm_"
                << d.capability_major << d.capability_minor << ", " << d.multiprocessors
                << " SMs\n";
    }
  }
  return 0;
}

}  // namespace tessera::cli
