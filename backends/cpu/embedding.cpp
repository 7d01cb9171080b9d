// embedding: inputs weight [V, D] (contiguous), indices [n] int64; output [n, D].
// embedding_backward: inputs grad [n, D], indices [n]; output dweight [V, D]. Each thread owns
// a range of columns and visits indices in order, so the scatter-add is deterministic.
#include <cstring>

#include "cpu_types.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

void check_indices(const int64_t* idx, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    TS_CHECK(idx[i] >= 0 && idx[i] < V, "embedding: index ", idx[i], " at position ", i,
             " is out of range for a table of ", V, " rows");
}

template <class T>
struct Embedding {
  static void run(const KernelCall& c) {
    const int64_t V = c.inputs[0].shape()[0], D = c.inputs[0].shape()[1];
    const int64_t n = c.inputs[1].numel();
    const int64_t* idx = c.inputs[1].data<int64_t>();
    check_indices(idx, n, V);
    const T* w = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(D, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t i = b; i < e; ++i)
                     std::memcpy(y + i * D, w + idx[i] * D, D * sizeof(T));
                 });
  }
};

template <class T>
struct EmbeddingBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const int64_t n = c.inputs[1].numel(), D = c.inputs[0].shape()[1];
    const int64_t V = c.outputs[0].shape()[0];
    const int64_t* idx = c.inputs[1].data<int64_t>();
    check_indices(idx, n, V);
    const T* g = c.inputs[0].data<T>();
    T* dw = c.outputs[0].data<T>();
    // float/double accumulate straight into the output (one zeroing pass over the table);
    // 16-bit types accumulate in a float scratch table first.
    std::vector<A> scratch(std::is_same_v<T, A> ? 0 : static_cast<size_t>(V * D));
    A* acc = std::is_same_v<T, A> ? reinterpret_cast<A*>(dw) : scratch.data();
    parallel_for(V * D, 1 << 16, [&](int64_t b, int64_t e) { std::fill(acc + b, acc + e, A(0)); });
    parallel_for(D, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = 0; i < n; ++i) {
        A* row = acc + idx[i] * D;
        const T* gi = g + i * D;
        for (int64_t j = b; j < e; ++j) row[j] += A(load(gi[j]));
      }
    });
    if constexpr (!std::is_same_v<T, A>)
      parallel_for(V * D, 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dw[i] = T(acc[i]);
      });
  }
};

const bool registered = [] {
  register_floating<Embedding>(Kernel::embedding);
  register_floating<EmbeddingBackward>(Kernel::embedding_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
