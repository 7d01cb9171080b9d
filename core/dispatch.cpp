#include "tessera/dispatch.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <vector>

namespace tessera {

namespace {
using Table =
    std::array<std::array<std::array<KernelFn, kNumDTypes>, kNumDeviceTypes>, kNumKernels>;
Table& table() {
  static Table t{};
  return t;
}
// TESSERA_PROFILE=1: time spent in each kernel, printed to stderr at exit (on a GPU each
// kernel is waited for, so the figures are device time but the run is slower).
struct KernelProfile {
  bool enabled = std::getenv("TESSERA_PROFILE") != nullptr;
  std::mutex mutex;
  std::array<double, kNumKernels> seconds{};
  std::array<int64_t, kNumKernels> calls{};
  ~KernelProfile() {
    if (!enabled) return;
    double total = 0;
    for (double s : seconds) total += s;
    std::fprintf(stderr, "kernel profile (%.3f s in kernels):\n", total);
    for (int k = 0; k < kNumKernels; ++k)
      if (calls[k])
        std::fprintf(stderr, "  %-24s %8ld calls %10.3f ms %5.1f%%\n",
                     kernel_name(static_cast<Kernel>(k)), static_cast<long>(calls[k]),
                     seconds[k] * 1e3, 100 * seconds[k] / total);
  }
};
KernelProfile& profile() {
  static KernelProfile p;
  return p;
}
std::array<DeviceRuntime, kNumDeviceTypes>& runtimes() {
  static std::array<DeviceRuntime, kNumDeviceTypes> r{};
  return r;
}
void synchronize(Device device) {
  if (auto sync = runtimes()[static_cast<int>(device.type)].synchronize) sync();
}
thread_local std::vector<KernelObserver*> observers;

// Tells the observers of a call's start and, however the kernel ends, of its end.
struct ObservedCall {
  Kernel k;
  Device device;
  const KernelCall& call;
  ObservedCall(Kernel k, Device device, const KernelCall& call) : k(k), device(device), call(call) {
    for (KernelObserver* o : observers) o->kernel_begin(k, device, call);
  }
  ~ObservedCall() {
    for (KernelObserver* o : observers) o->kernel_end(k, device, call);
  }
};

}  // namespace

void add_kernel_observer(KernelObserver& observer) {
  observers.push_back(&observer);
}
void remove_kernel_observer(KernelObserver& observer) {
  observers.erase(std::remove(observers.begin(), observers.end(), &observer), observers.end());
}

void synchronize_device(Device device) {
  synchronize(device);
}

void kernel_profile_reset() {
  KernelProfile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.seconds.fill(0);
  p.calls.fill(0);
}

const char* kernel_name(Kernel k) {
  static const char* names[] = {
#define TS_NAME(name) #name,
      TESSERA_KERNELS(TS_NAME)
#undef TS_NAME
  };
  const int i = static_cast<int>(k);
  return i >= 0 && i < kNumKernels ? names[i] : "invalid";
}

namespace {
// Device types whose backend was compiled against another kernel list (see dispatch.h).
std::array<bool, kNumDeviceTypes>& stale_backends() {
  static std::array<bool, kNumDeviceTypes> stale{};
  return stale;
}
}  // namespace

void register_kernel(Kernel k, DeviceType device, DType dtype, KernelFn fn, uint64_t kernel_list) {
  if (kernel_list != kKernelListFingerprint) {
    stale_backends()[static_cast<int>(device)] = true;
    return;
  }
  table()[static_cast<int>(k)][static_cast<int>(device)][static_cast<int>(dtype)] = fn;
}

void register_device_runtime(DeviceType type, const DeviceRuntime& runtime) {
  runtimes()[static_cast<int>(type)] = runtime;
}

bool has_kernel(Kernel k, DeviceType device, DType dtype) {
  return table()[static_cast<int>(k)][static_cast<int>(device)][static_cast<int>(dtype)] != nullptr;
}

void run_kernel(Kernel k, Device device, DType dtype, std::span<const TensorBase> inputs,
                std::span<TensorBase> outputs, const KernelAttrs& attrs) {
  KernelFn fn =
      table()[static_cast<int>(k)][static_cast<int>(device.type)][static_cast<int>(dtype)];
  if (!fn) {
    std::string shapes;
    for (const TensorBase& t : inputs) shapes += (shapes.empty() ? "" : ", ") + t.describe();
    fail(kernel_name(k), ": no kernel for dtype ", dtype_name(dtype), " on ", device.str(),
         shapes.empty() ? "" : " (inputs: " + shapes + ")",
         stale_backends()[static_cast<int>(device.type)]
             ? ". This build's kernels for " + device.str() +
                   " were compiled against another kernel list (include/tessera/"
                   "dispatch.h changed since): rebuild them (touch backends/cuda/*.cu; ninja)"
             : "");
  }
  // Released (ZeRO-3) storages are gathered before the kernel and may be released after it;
  // resident ones are reported as uses (ZeRO-3 keeps parameters reused soon).
  Storage* fetched[8];
  size_t n_fetched = 0;
  auto fetch = [&](const TensorBase& t) {
    if (!t.defined()) return;
    Storage& s = *t.storage();
    StorageFetcher* fetcher = s.fetcher();
    if (!fetcher) return;
    if (s.resident())
      fetcher->hit(s);
    else
      fetcher->fetch(s);
    if (n_fetched < std::size(fetched)) fetched[n_fetched++] = &s;
  };
  if (auto set_current = runtimes()[static_cast<int>(device.type)].set_current_device)
    set_current(device.index);
  for (const TensorBase& t : inputs) fetch(t);
  for (const TensorBase& t : outputs) {
    fetch(t);
    // A host->GPU copy from pinned memory may still be reading what this kernel overwrites.
    if (device.is_cpu() && t.defined() && t.is_pinned()) t.storage()->wait_for_copies();
  }
  struct Release {
    Storage** list;
    size_t& n;
    ~Release() {
      for (size_t i = 0; i < n; ++i) list[i]->fetcher()->used(*list[i]);
    }
  } release{fetched, n_fetched};
  const KernelCall call{inputs, outputs, attrs};
  std::optional<ObservedCall> observed;
  if (!observers.empty()) observed.emplace(k, device, call);
  KernelProfile& prof = profile();
  if (!prof.enabled) {
    fn(call);
    return;
  }
  // GPU kernels run asynchronously: wait before and after so the time is the kernel's own.
  synchronize(device);
  const auto t0 = std::chrono::steady_clock::now();
  fn(call);
  synchronize(device);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(prof.mutex);
  prof.seconds[static_cast<int>(k)] += dt;
  ++prof.calls[static_cast<int>(k)];
}

}  // namespace tessera
