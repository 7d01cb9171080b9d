// Cross-entropy fused with log-softmax over contiguous logits [N, C] and int64 targets [N],
// one block per row. Same contract as the CPU kernel:
// forward  outputs: loss [N] (0 where ignored), lse [N] (compute type)
//          attrs.index = ignore_index, attrs.scalar = label smoothing
// backward inputs: logits, targets, lse, scale [N]; outputs: dlogits [N, C]
// An out-of-range target is reported by position, read back as one word after the launch.
#include "elementwise.cuh"

namespace tessera::cuda {
namespace {

// Running max and sum of exp(x - max), merged with rescaling (Milakov & Gimelshein 2018).
template <class A>
struct OnlineLse {
  A m, s;
  __device__ OnlineLse add(A v) const {
    if (isinf(v) && v < 0) return *this;  // exp(-inf - -inf) would be NaN on a -inf prefix
    return v > m ? OnlineLse{v, s * exp(m - v) + A(1)} : OnlineLse{m, s + exp(v - m)};
  }
};
struct MergeLse {
  template <class A>
  __device__ OnlineLse<A> operator()(OnlineLse<A> a, OnlineLse<A> b) const {
    if (isinf(a.m) && a.m < 0) return b;
    if (isinf(b.m) && b.m < 0) return a;
    const A m = max(a.m, b.m);
    return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
  }
};

template <class T>
__global__ void cross_entropy_kernel(const T* x, const int64_t* tgt, compute_t<T>* loss,
                                     compute_t<T>* lse_out, int64_t C, int64_t ignore,
                                     compute_t<T> eps, unsigned long long* bad) {
  using A = compute_t<T>;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  const int64_t t = tgt[r];
  const bool valid = t == ignore || (t >= 0 && t < C);
  if (!valid && threadIdx.x == 0) atomicMin(bad, static_cast<unsigned long long>(r));
  // One pass: an online (max, sum of exp) pair per thread, merged across the block.
  OnlineLse<A> acc{-INFINITY, 0};
  A sx = 0;
  constexpr int N = 16 / sizeof(T);
  int64_t tail = 0;
  if (reinterpret_cast<uintptr_t>(xr) % 16 == 0) {  // 16-byte loads, then the tail
    const int64_t packs = C / N;
    const auto* pv = reinterpret_cast<const Pack<T, N>*>(xr);
    for (int64_t v = threadIdx.x; v < packs; v += kThreads) {
      const Pack<T, N> x = pv[v];
      // The pack's own (max, sum of exp) first: N independent exps and one merge, rather
      // than a chain of N dependent online updates (which left bf16 at 0.75 of copy).
      A e[N], pm = -INFINITY;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        e[k] = load(x.v[k]);
        pm = e[k] > pm || e[k] != e[k] ? e[k] : pm;  // a NaN sticks, and so reaches lse
        sx += e[k];
      }
      if (isinf(pm) && pm < 0) continue;  // every element -inf: nothing to add
      A ps = 0;
#pragma unroll
      for (int k = 0; k < N; ++k) ps += exp(e[k] - pm);
      acc = MergeLse{}(acc, OnlineLse<A>{pm, ps});
    }
    tail = packs * N;
  }
  for (int64_t j = tail + threadIdx.x; j < C; j += kThreads) {
    const A v = load(xr[j]);
    acc = acc.add(v);
    sx += v;
  }
  acc = block_reduce<kThreads>(acc, MergeLse{});
  sx = block_reduce_fast<kThreads>(sx, SumOp{});
  const A m = acc.m, s = acc.s;
  if (threadIdx.x != 0) return;
  const A lse = m + log(s);
  lse_out[r] = lse;
  if (t == ignore || !valid) {
    loss[r] = 0;
    return;
  }
  const A nll = lse - A(load(xr[t]));
  loss[r] = eps == A(0) ? nll : (A(1) - eps) * nll + eps * (lse - sx / A(C));
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* x, const int64_t* tgt,
                                              const compute_t<T>* lse, const compute_t<T>* scale,
                                              T* dx, int64_t C, int64_t ignore, compute_t<T> eps) {
  using A = compute_t<T>;
  const int64_t r = blockIdx.x;
  const int64_t t = tgt[r];
  T* dr = dx + r * C;
  if (t == ignore) {
    for (int64_t j = threadIdx.x; j < C; j += kThreads) dr[j] = convert<T>(A(0));
    return;
  }
  const T* xr = x + r * C;
  const A sc = scale[r], uniform = eps / A(C), l = lse[r];
  auto grad = [&](int64_t j, T x) {
    const A p = exp(A(load(x)) - l);
    const A target = (j == t ? A(1) - eps : A(0)) + uniform;
    return convert<T>(sc * (p - target));
  };
  constexpr int N = 16 / sizeof(T);
  int64_t tail = 0;
  if (reinterpret_cast<uintptr_t>(xr) % 16 == 0 && reinterpret_cast<uintptr_t>(dr) % 16 == 0) {
    const int64_t packs = C / N;
    const auto* pv = reinterpret_cast<const Pack<T, N>*>(xr);
    auto* pd = reinterpret_cast<Pack<T, N>*>(dr);
    for (int64_t v = threadIdx.x; v < packs; v += kThreads) {
      const Pack<T, N> x = pv[v];
      Pack<T, N> y;
#pragma unroll
      for (int k = 0; k < N; ++k) y.v[k] = grad(v * N + k, x.v[k]);
      pd[v] = y;
    }
    tail = packs * N;
  }
  for (int64_t j = tail + threadIdx.x; j < C; j += kThreads) dr[j] = grad(j, xr[j]);
}

template <class T>
struct CrossEntropy {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase& x = c.inputs[0];
    const int64_t N = x.shape()[0], C = x.shape()[1];
    if (N == 0) return;
    IndexCheck check(x.device());
    cross_entropy_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, stream_of(x)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const int64_t*>(c.inputs[1].data_ptr()),
        static_cast<A*>(c.outputs[0].data_ptr()), static_cast<A*>(c.outputs[1].data_ptr()), C,
        c.attrs.index, static_cast<A>(c.attrs.scalar), check.flag());
    TS_CUDA_LAUNCH_CHECK("cross_entropy");
    const int64_t bad = check.first_bad();
    if (bad >= 0) {
      const int64_t t = c.inputs[1].narrow(0, bad, 1).to(Device::cpu()).to_int_vector()[0];
      fail("cross_entropy: target ", t, " at position ", bad, " is out of range for ", C,
           " classes (ignore_index is ", c.attrs.index, ")");
    }
  }
};

template <class T>
struct CrossEntropyBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase& x = c.inputs[0];
    const int64_t N = x.shape()[0], C = x.shape()[1];
    if (N == 0) return;
    cross_entropy_backward_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, stream_of(x)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<const int64_t*>(c.inputs[1].data_ptr()),
        static_cast<const A*>(c.inputs[2].data_ptr()),
        static_cast<const A*>(c.inputs[3].data_ptr()), static_cast<T*>(c.outputs[0].data_ptr()), C,
        c.attrs.index, static_cast<A>(c.attrs.scalar));
    TS_CUDA_LAUNCH_CHECK("cross_entropy_backward");
  }
};

const bool registered = [] {
  register_floating<CrossEntropy>(Kernel::cross_entropy);
  register_floating<CrossEntropyBackward>(Kernel::cross_entropy_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
