#include "cublaslt_library.h"

#include <dlfcn.h>

#include <string>

#include "tessera/error.h"

namespace tessera::cuda {

namespace {

// The major version the headers were built against: its ABI is the one declared above.
const std::string kLibrary = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

template <typename F>
void resolve(void* library, F& entry, const char* name) {
  entry = reinterpret_cast<F>(dlsym(library, name));
  TS_CHECK(entry != nullptr, "cuda: ", kLibrary, " has no ", name, " (", dlerror(), ")");
}

CublasLt open_cublaslt() {
  // Never closed: plans and handles live until exit.
  void* library = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  TS_CHECK(library != nullptr, "cuda: cannot open ", kLibrary, " (", dlerror(),
           "); install cuBLAS from the CUDA toolkit or add its lib64 to LD_LIBRARY_PATH");
  CublasLt lt{};
  resolve(library, lt.Create, "cublasLtCreate");
  resolve(library, lt.GetVersion, "cublasLtGetVersion");
  resolve(library, lt.GetStatusName, "cublasLtGetStatusName");
  resolve(library, lt.GetStatusString, "cublasLtGetStatusString");
  resolve(library, lt.Matmul, "cublasLtMatmul");
  resolve(library, lt.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
  resolve(library, lt.MatmulDescCreate, "cublasLtMatmulDescCreate");
  resolve(library, lt.MatmulDescDestroy, "cublasLtMatmulDescDestroy");
  resolve(library, lt.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
  resolve(library, lt.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
  resolve(library, lt.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  resolve(library, lt.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  resolve(library, lt.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
  resolve(library, lt.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
  resolve(library, lt.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute");
  return lt;
}

}  // namespace

const CublasLt& cublaslt() {
  static const CublasLt lt = open_cublaslt();
  return lt;
}

}  // namespace tessera::cuda
