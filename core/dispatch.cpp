#include "tessera/dispatch.h"

#include <array>

namespace tessera {

namespace {
using Table =
    std::array<std::array<std::array<KernelFn, kNumDTypes>, kNumDeviceTypes>, kNumKernels>;
Table& table() {
  static Table t{};
  return t;
}
}  // namespace

const char* kernel_name(Kernel k) {
  static const char* names[] = {
#define TS_NAME(name) #name,
      TESSERA_KERNELS(TS_NAME)
#undef TS_NAME
  };
  const int i = static_cast<int>(k);
  return i >= 0 && i < kNumKernels ? names[i] : "invalid";
}

void register_kernel(Kernel k, DeviceType device, DType dtype, KernelFn fn) {
  table()[static_cast<int>(k)][static_cast<int>(device)][static_cast<int>(dtype)] = fn;
}

bool has_kernel(Kernel k, DeviceType device, DType dtype) {
  return table()[static_cast<int>(k)][static_cast<int>(device)][static_cast<int>(dtype)] != nullptr;
}

void run_kernel(Kernel k, Device device, DType dtype, std::span<const Tensor> inputs,
                std::span<Tensor> outputs, const KernelAttrs& attrs) {
  KernelFn fn =
      table()[static_cast<int>(k)][static_cast<int>(device.type)][static_cast<int>(dtype)];
  if (!fn) {
    std::string shapes;
    for (const Tensor& t : inputs) shapes += (shapes.empty() ? "" : ", ") + t.describe();
    fail(kernel_name(k), ": no kernel for dtype ", dtype_name(dtype), " on ", device.str(),
         shapes.empty() ? "" : " (inputs: " + shapes + ")");
  }
  fn(KernelCall{inputs, outputs, attrs});
}

}  // namespace tessera
