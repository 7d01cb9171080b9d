// The closed list of backend kernels, and the (op, device, dtype) table that backends fill.
// This list is the contract between the autograd/op layer and the backends: a backend
// implements these and nothing else, and `tessera kernels` enumerates them.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/optimizer_step_params.h"
#include "tessera/tensor_base.h"

namespace tessera {

// X(name): one backend kernel. Conventions for inputs/outputs are in backends/README.md.
// clang-format off
#define TESSERA_KERNELS(X)                                                                      \
  X(copy) X(fill) X(arange) X(uniform) X(normal)                                                \
  X(neg) X(exp) X(log) X(sqrt) X(rsqrt) X(abs) X(tanh) X(sigmoid) X(relu)                       \
  X(gelu) X(gelu_tanh) X(gelu_backward) X(gelu_tanh_backward)                                   \
  X(add) X(sub) X(mul) X(div) X(pow) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(where)               \
  X(sum) X(max) X(min) X(argmax) X(var) X(norm)                                                 \
  X(matmul) X(softmax) X(log_softmax) X(softmax_backward) X(log_softmax_backward)               \
  X(layer_norm) X(layer_norm_backward) X(embedding) X(embedding_backward)                       \
  X(cross_entropy) X(cross_entropy_backward) X(dropout) X(attention) X(attention_backward)      \
  X(block_sparse_attention) X(block_sparse_attention_backward)                                  \
  X(adamw_step) X(sgd_step) X(lamb_step) X(sum_squares)                                        \
  X(quantize_blocks) X(dequantize_blocks) X(fp8_cast)                                          \
  X(bias_gelu) X(bias_gelu_backward) X(bias_dropout_add)
// clang-format on

enum class Kernel : uint16_t {
#define TS_ENUM(name) name,
  TESSERA_KERNELS(TS_ENUM)
#undef TS_ENUM
      Count
};
inline constexpr int kNumKernels = static_cast<int>(Kernel::Count);
const char* kernel_name(Kernel k);
// Clears the TESSERA_PROFILE=1 counters (benchmarks call it after their warm-up).
void kernel_profile_reset();

// Non-tensor arguments of a kernel call; each kernel documents which fields it reads.
struct KernelAttrs {
  std::vector<int64_t> dims;  // reduced dims (sorted), ...
  double scalar = 0.0;        // fill value, eps, dropout p, label smoothing, scale, start
  double scalar2 = 0.0;       // arange step, normal std, ...
  int64_t index = 0;          // ignore_index, ...
  bool flag = false;          // keepdim / causal / ...
  uint64_t seed = 0;          // RNG stream
  uint64_t offset = 0;
  OptimizerStepParams optimizer_step;  // adamw_step, sgd_step, lamb_step
};

struct KernelCall {
  std::span<const TensorBase> inputs;
  std::span<TensorBase> outputs;
  const KernelAttrs& attrs;
};
using KernelFn = void (*)(const KernelCall& call);

// The kernel list as each file that registers kernels was compiled with it (the default
// argument is evaluated there). An object compiled before the list changed would register
// under shifted numbers and run the wrong kernel: Debian 12's meson records no header
// dependencies for nvcc, so an incremental build keeps stale CUDA objects. register_kernel
// refuses such a registration, and run_kernel's error says to rebuild.
constexpr uint64_t kernel_list_fingerprint(std::string_view names) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (const char c : names) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}
#define TS_KERNEL_NAME(name) #name " "
inline constexpr uint64_t kKernelListFingerprint =
    kernel_list_fingerprint(TESSERA_KERNELS(TS_KERNEL_NAME));
#undef TS_KERNEL_NAME

void register_kernel(Kernel k, DeviceType device, DType dtype, KernelFn fn,
                     uint64_t kernel_list = kKernelListFingerprint);

// What the dispatcher asks of a device's runtime around a kernel: make the tensor's device
// current, and wait for its queued work (when profiling). A backend registers it beside its
// kernels and allocator, so core calls no backend directly; a device type without one (CPU)
// needs neither.
struct DeviceRuntime {
  void (*set_current_device)(int index) = nullptr;
  void (*synchronize)() = nullptr;
};
void register_device_runtime(DeviceType type, const DeviceRuntime& runtime);
bool has_kernel(Kernel k, DeviceType device, DType dtype);
// Sees every kernel call made on this thread while installed (the flops profiler counts them,
// a trace records them): before the kernel runs and after it returns.
class KernelObserver {
 public:
  virtual ~KernelObserver() = default;
  virtual void kernel_begin(Kernel k, Device device, const KernelCall& call) = 0;
  virtual void kernel_end(Kernel k, Device device, const KernelCall& call) = 0;
};
// Installs an observer on this thread until it is removed; each installed observer sees
// every call.
void add_kernel_observer(KernelObserver& observer);
void remove_kernel_observer(KernelObserver& observer);
// Waits for the work queued on `device` (nothing to wait for on the CPU).
void synchronize_device(Device device);

// Runs the kernel registered for (k, device, dtype); throws naming all three when none is.
void run_kernel(Kernel k, Device device, DType dtype, std::span<const TensorBase> inputs,
                std::span<TensorBase> outputs, const KernelAttrs& attrs = {});

}  // namespace tessera
