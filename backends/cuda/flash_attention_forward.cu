// Flash-style attention forward (Dao et al., FlashAttention-2) on tensor cores. A block is 4
// warps; each warp owns 16 rows of a 64-row query tile and loops over key tiles keeping a
// running max and sum per row (mma.sync, registers only). Shared pieces:
// flash_attention_tiles.cuh; the backward pass: flash_attention_backward.cu.
#include <cstdlib>

#include "flash_attention_tiles.cuh"

namespace tessera::cuda {
namespace {

using namespace flash;

template <class T, int D>
struct FwdSmem {
  static constexpr size_t tile = size_t{kTile} * ld_tile<D> * sizeof(T);
  static constexpr size_t bytes = 3 * tile;  // Q, K, V
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_fwd_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kTile * ld;
  T* Vs = Ks + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  load_tile<T, D>(Qs, Q, q0, Tq);
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t i_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  int64_t kend = Tk;
  if (a.causal) kend = max(int64_t{0}, min(Tk, q0 + kTile + Tk - Tq));
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, K, k0, Tk);
    load_tile<T, D>(Vs, V, k0, Tk);
    __syncthreads();
    float sc[kTile / 8][4];
    mm_rows_bt<T, D>(sc, Qs + warp * 16 * ld, Ks);
    // scale, mask, running max and sum per row (rows g and g + 8 of this warp)
    float mx[2] = {-INFINITY, -INFINITY};
    if (whole_tile_visible(a.mask, a.causal, q0, k0, Tq, Tk)) {
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sc[nt][e] *= a.scale;
          mx[e >> 1] = fmaxf(mx[e >> 1], sc[nt][e]);
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int hr = e >> 1;
          const int64_t j = k0 + nt * 8 + 2 * t + (e & 1);
          float v = sc[nt][e] * a.scale;
          if (i_row[hr] >= Tq || j >= Tk || !visible(a.mask, a.causal, bh, i_row[hr], j, Tq, Tk))
            v = -INFINITY;
          sc[nt][e] = v;
          mx[hr] = fmaxf(mx[hr], v);
        }
    }
    online_softmax_step<D>(sc, mx, m, l, o);
    mm_acc_regs<T, D>(o, sc, Vs);  // O += P V, P taken straight from the score registers
  }
  store_rows<T, D>(static_cast<T*>(a.out) + bh * Tq * D, a.lse + bh * Tq, i_row, Tq, o, m, l);
}

template <class T, int D>
void forward(const Args& a, int64_t BH, cudaStream_t stream) {
  constexpr size_t bytes = FwdSmem<T, D>::bytes;
  static const bool ready = (allow_smem(flash_fwd_kernel<T, D>, bytes), true);
  (void)ready;
  const dim3 grid(static_cast<unsigned>((a.Tq + kTile - 1) / kTile), static_cast<unsigned>(BH));
  flash_fwd_kernel<T, D><<<grid, kBlockThreads, bytes, stream>>>(a);
  TS_CUDA_LAUNCH_CHECK("flash attention");
}

}  // namespace

bool flash_attention_supported(const TensorBase& q, const TensorBase& k, const TensorBase& v) {
  const DType dt = q.dtype();
  const int64_t D = q.shape()[3];
  return (dt == DType::BFloat16 || dt == DType::Float16) && (D == 64 || D == 128) &&
         k.shape()[3] == D && v.shape()[3] == D && q.shape()[0] * q.shape()[1] <= 65535 &&
         q.shape()[2] > 0 && k.shape()[2] > 0 && std::getenv("TESSERA_ATTENTION_MATH") == nullptr;
}

void flash_attention_forward(const TensorBase& q, const TensorBase& k, const TensorBase& v,
                             const MaskView& mask, bool causal, float scale, TensorBase& o,
                             TensorBase& lse) {
  Args a{};
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.out = o.data_ptr();
  a.lse = static_cast<float*>(lse.data_ptr());
  a.mask = mask, a.causal = causal, a.Tq = q.shape()[2], a.Tk = k.shape()[2], a.scale = scale;
  const int64_t BH = q.shape()[0] * q.shape()[1];
  dispatch(q.dtype(), q.shape()[3], [&]<class T, int D>() { forward<T, D>(a, BH, stream_of(q)); });
}

}  // namespace tessera::cuda
