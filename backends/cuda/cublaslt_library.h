// cuBLASLt, opened on the first GEMM rather than linked: linking it costs every process about
// 200 MB and 0.2 s at start, GPU or not (an 8-rank CPU job paid 1.6 GB for nothing).
#pragma once
#include <cublasLt.h>

namespace tessera::cuda {

// The cuBLASLt entry points Tessera calls, resolved once from libcublasLt.so.<major>.
struct CublasLt {
  decltype(&::cublasLtCreate) Create;
  decltype(&::cublasLtGetVersion) GetVersion;
  decltype(&::cublasLtGetStatusName) GetStatusName;
  decltype(&::cublasLtGetStatusString) GetStatusString;
  decltype(&::cublasLtMatmul) Matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) MatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) MatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
  decltype(&::cublasLtMatrixLayoutSetAttribute) MatrixLayoutSetAttribute;
};

// Opens the library on first use; an error names the file and dlerror()'s reason.
const CublasLt& cublaslt();

}  // namespace tessera::cuda
