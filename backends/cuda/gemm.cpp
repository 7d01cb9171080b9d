// cuBLASLt GEMM with cached descriptors and algorithm choice per problem, one handle and one
// workspace per device. Row-major products are computed as the column-major transposed
// product (C^T = B^T A^T), so no operand is ever copied for layout.
#include "gemm.h"

#include <cublasLt.h>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "cublaslt_library.h"
#include "cuda_check.h"
#include "tessera/cuda.h"
#include "tessera/cuda_stream.h"
#include "tessera/dispatch.h"

namespace tessera::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 1 && v % a) a /= 2;
  return a;
}

struct Plan {
  bool supported = true;  // false: no algorithm for this epilogue (remembered, not retried)
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc) cublaslt().MatmulDescDestroy(desc);
    if (a) cublaslt().MatrixLayoutDestroy(a);
    if (b) cublaslt().MatrixLayoutDestroy(b);
    if (c) cublaslt().MatrixLayoutDestroy(c);
  }
};

struct DeviceState {
  cublasLtHandle_t handle = nullptr;
  TensorBase workspace;
  std::map<std::string, std::unique_ptr<Plan>> plans;
};

DeviceState& state(int device) {
  static std::mutex mutex;
  static std::map<int, DeviceState>* states = new std::map<int, DeviceState>();  // lives to exit
  std::lock_guard<std::mutex> lock(mutex);
  DeviceState& s = (*states)[device];
  if (!s.handle) {
    DeviceGuard guard(device);
    TS_CUBLAS_CHECK(cublaslt().Create(&s.handle));
    s.workspace = TensorBase::empty({static_cast<int64_t>(kWorkspaceBytes)}, DType::Bool,
                                    Device::cuda(device));
  }
  return s;
}

cublasLtMatrixLayout_t layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                              int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  TS_CUBLAS_CHECK(cublaslt().MatrixLayoutCreate(&l, type, rows, cols, ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    TS_CUBLAS_CHECK(cublaslt().MatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count)));
    TS_CUBLAS_CHECK(cublaslt().MatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

}  // namespace

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::Float16:
      return CUDA_R_16F;
    case DType::BFloat16:
      return CUDA_R_16BF;
    case DType::Float32:
      return CUDA_R_32F;
    case DType::Float64:
      return CUDA_R_64F;
    default:
      fail("cuda gemm: no matrix product for dtype ", dtype_name(dtype));
  }
}

bool describe_operand(const TensorBase& t, GemmOperand& op) {
  const auto& sh = t.shape();
  const auto& st = t.strides();
  op = {t.data_ptr(), 0, sh[0] == 1 ? 0 : st[0], false};
  if ((st[2] == 1 || sh[2] == 1) && (sh[1] == 1 || st[1] >= std::max<int64_t>(1, sh[2]))) {
    op.ld = sh[1] == 1 ? std::max<int64_t>(sh[2], 1) : st[1];
    return true;
  }
  if ((st[1] == 1 || sh[1] == 1) && (sh[2] == 1 || st[2] >= std::max<int64_t>(1, sh[1]))) {
    op.ld = sh[2] == 1 ? std::max<int64_t>(sh[1], 1) : st[2];
    op.transposed = true;
    return true;
  }
  return false;
}

bool gemm(Device device, cudaDataType_t ab, cudaDataType_t c, int64_t batch, int64_t M, int64_t N,
          int64_t K, const GemmOperand& a, const GemmOperand& b, void* out, int64_t ldc,
          int64_t c_batch_stride, double alpha, double beta, const GemmEpilogue& epilogue) {
  TS_CHECK(!epilogue.any() || batch == 1, "cuda gemm: epilogues need a batch of one, got ", batch);
  const cublasLtEpilogue_t ep = epilogue.bias         ? CUBLASLT_EPILOGUE_BIAS
                                : epilogue.a_row_sums ? CUBLASLT_EPILOGUE_BGRADB
                                                      : CUBLASLT_EPILOGUE_DEFAULT;
  const void* ep_ptr = epilogue.bias ? epilogue.bias : epilogue.a_row_sums;
  DeviceState& s = state(device.index);
  const bool f64 = ab == CUDA_R_64F;
  const cublasComputeType_t compute =
      f64 ? CUBLAS_COMPUTE_64F
          : (ab == CUDA_R_32F && cuda_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                   : CUBLAS_COMPUTE_32F);
  const int al_a = alignment_of(a.ptr), al_b = alignment_of(b.ptr), al_c = alignment_of(out);
  char key[512];
  std::snprintf(key, sizeof(key),
                "%d %d %d %ld %ld %ld %ld|%ld %ld %d|%ld %ld %d|%ld %ld|%d %d %d|%d %d",
                static_cast<int>(ab), static_cast<int>(c), static_cast<int>(compute),
                static_cast<long>(batch), static_cast<long>(M), static_cast<long>(N),
                static_cast<long>(K), static_cast<long>(a.ld), static_cast<long>(a.batch_stride),
                a.transposed, static_cast<long>(b.ld), static_cast<long>(b.batch_stride),
                b.transposed, static_cast<long>(ldc), static_cast<long>(c_batch_stride), al_a, al_b,
                al_c, static_cast<int>(ep), ep_ptr ? alignment_of(ep_ptr) : 0);
  cudaStream_t stream = compute_stream(device.index);
  DeviceGuard guard(device.index);
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    auto plan = std::make_unique<Plan>();
    TS_CUBLAS_CHECK(
        cublaslt().MatmulDescCreate(&plan->desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F));
    // Column-major view: C^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M).
    const cublasOperation_t op_b = b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
    TS_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &op_b, sizeof(op_b)));
    TS_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &op_a, sizeof(op_a)));
    if (ep != CUBLASLT_EPILOGUE_DEFAULT) {
      // The bias (gradient) vector is in C's type; its pointer is set per call below.
      TS_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &ep, sizeof(ep)));
      TS_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(
          plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ep_ptr, sizeof(ep_ptr)));
    }
    plan->a = b.transposed ? layout(ab, K, N, b.ld, batch, b.batch_stride)
                           : layout(ab, N, K, b.ld, batch, b.batch_stride);
    plan->b = a.transposed ? layout(ab, M, K, a.ld, batch, a.batch_stride)
                           : layout(ab, K, M, a.ld, batch, a.batch_stride);
    plan->c = layout(c, N, M, ldc, batch, c_batch_stride);
    cublasLtMatmulPreference_t pref = nullptr;
    TS_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    const uint32_t ua = al_b, ub = al_a, uc = al_c;  // cuBLAS's A is our B and vice versa
    cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                            sizeof(ws));
    cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua,
                                            sizeof(ua));
    cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub,
                                            sizeof(ub));
    cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &uc,
                                            sizeof(uc));
    cublaslt().MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &uc,
                                            sizeof(uc));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublaslt().MatmulAlgoGetHeuristic(
        s.handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
    cublaslt().MatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      if (ep == CUBLASLT_EPILOGUE_DEFAULT)
        fail("cuda matmul: cuBLASLt has no algorithm for [", batch, " x ", M, " x ", K, "] @ [", K,
             " x ", N, "] (", cublaslt().GetStatusName(st), ")");
      plan->supported = false;
    } else {
      plan->algo = result.algo;
    }
    it = s.plans.emplace(key, std::move(plan)).first;
  }
  const Plan& p = *it->second;
  if (!p.supported) return false;
  if (ep_ptr)
    TS_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                      &ep_ptr, sizeof(ep_ptr)));
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* pa = f64 ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* pb = f64 ? static_cast<const void*>(&beta) : &beta_f;
  TS_CUBLAS_CHECK(cublaslt().Matmul(s.handle, p.desc, pa, b.ptr, p.a, a.ptr, p.b, pb, out, p.c, out,
                                    p.c, &p.algo, s.workspace.data_ptr(), kWorkspaceBytes, stream));
  return true;
}

namespace {

// Work an epilogue would have done, as separate kernels (no algorithm, or K == 0).
void bias_and_sums_unfused(const KernelCall& c, const TensorBase& a, bool bias, bool sums) {
  TensorBase& out = c.outputs[0];
  const DType dt = out.dtype();
  if (bias) {  // out += bias, broadcast over rows
    const TensorBase ins[2] = {out, c.inputs[2].view({1, 1, out.shape()[2]}).expand(out.shape())};
    TensorBase outs[1] = {out};
    run_kernel(Kernel::add, out.device(), dt, ins, outs);
  }
  if (sums) {  // row sums of a as a contiguous [M, K]
    const TensorBase rows = a.contiguous().view({a.shape()[1], a.shape()[2]});
    const TensorBase ins[1] = {rows};
    TensorBase outs[1] = {c.outputs[1]};
    run_kernel(Kernel::sum, out.device(), dt, ins, outs);
  }
}

// inputs: a [batch, M, K], b [batch, K, N] (any strides), bias [N] (optional); outputs:
// [batch, M, N] contiguous, sums of a's rows [M] (optional, batch 1). See the CPU kernel.
void matmul_kernel(const KernelCall& c) {
  TensorBase a = c.inputs[0], b = c.inputs[1];
  TensorBase& out = c.outputs[0];
  const int64_t batch = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
  const int64_t K = a.shape()[2];
  const bool bias = c.inputs.size() > 2 && c.inputs[2].defined();
  const bool sums = c.outputs.size() > 1 && c.outputs[1].defined();
  if (batch * M * N == 0) {
    if (sums) bias_and_sums_unfused(c, a, false, true);
    return;
  }
  if (K == 0) {
    TS_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream_for(out.device())));
    bias_and_sums_unfused(c, a, bias, sums);
    return;
  }
  GemmOperand ga, gb;
  if (!describe_operand(a, ga)) {
    a = a.contiguous();
    describe_operand(a, ga);
  }
  if (!describe_operand(b, gb)) {
    b = b.contiguous();
    describe_operand(b, gb);
  }
  const cudaDataType_t t = cuda_type(out.dtype());
  GemmEpilogue ep;
  TensorBase bias_c;
  // Epilogue vectors 16-byte aligned only (parameters and fresh tensors are), so no
  // algorithm chosen for an aligned vector ever sees a misaligned one.
  if (bias) {
    bias_c = c.inputs[2].contiguous();
    if (alignment_of(bias_c.data_ptr()) >= 16) ep.bias = bias_c.data_ptr();
  } else if (sums && alignment_of(c.outputs[1].data_ptr()) >= 16) {
    ep.a_row_sums = c.outputs[1].data_ptr();
  }
  if (ep.any() &&
      gemm(out.device(), t, t, batch, M, N, K, ga, gb, out.data_ptr(), N, M * N, 1.0, 0.0, ep)) {
    if (bias && sums) bias_and_sums_unfused(c, a, false, true);  // one epilogue per product
    return;
  }
  gemm(out.device(), t, t, batch, M, N, K, ga, gb, out.data_ptr(), N, M * N);
  bias_and_sums_unfused(c, a, bias, sums);
}

const bool registered = [] {
  for (DType d : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64})
    register_kernel(Kernel::matmul, DeviceType::CUDA, d, &matmul_kernel);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
