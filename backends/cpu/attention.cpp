// Fused scaled-dot-product attention, flash-style: per (batch, head), query rows are taken in
// blocks; scores for one block exist only in a per-thread scratch and are rebuilt in backward
// from the saved log-sum-exp, so no [T, T] matrix outlives a block.
// forward  inputs: q [B,H,Tq,D], k [B,H,Tk,D], v [B,H,Tk,Dv] (contiguous), mask (optional bool,
//          broadcast view of [B,H,Tq,Tk], true = attend); attrs.flag = causal, scalar = scale
//          outputs: o [B,H,Tq,Dv], lse [B,H,Tq] (compute type; -inf for fully masked rows)
// backward inputs: dO, q, k, v, o, lse, mask; outputs: dq, dk, dv
// Dropout on the probabilities (attrs.scalar2 = p > 0; seed, offset, dims = {rank, world}):
// ProbabilityDropout below; nothing is stored, backward draws the same mask.
// Causal masking aligns the last query with the last key (key j visible to query i when
// j <= i + Tk - Tq), which equals torch's is_causal when Tq == Tk and suits KV caches. A row's
// keys past the causal bound are zeroed rather than put through exp (exp of -inf cost 40% of
// the forward at GPT-2 tiny shapes); exp still runs in whole SIMD packets and the row sum over
// the whole row, so every value keeps the bits it had when the masked keys went through exp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_types.h"
#include "flushed_exp.h"
#include "parallel.h"
#include "tessera/philox.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;

template <class A>
using RowMat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct AttentionShape {
  int64_t B, H, Tq, Tk, D, Dv;
  explicit AttentionShape(const KernelCall& c)
      : B(c.inputs[0].shape()[0]),
        H(c.inputs[0].shape()[1]),
        Tq(c.inputs[0].shape()[2]),
        Tk(c.inputs[1].shape()[2]),
        D(c.inputs[0].shape()[3]),
        Dv(c.inputs[2].shape()[3]) {}
};

// One head ([rows, cols] at `head`) as a matrix in the compute type: a map over the tensor's
// own memory when it already is that type, else a widened copy.
template <class T, class A>
struct Head {
  RowMat<A> copy;
  Eigen::Map<const RowMat<A>> m{nullptr, 0, 0};
  Head(const TensorBase& t, int64_t head, int64_t rows, int64_t cols) {
    const T* p = t.data<T>() + head * rows * cols;
    if constexpr (std::is_same_v<T, A>) {
      new (&m) Eigen::Map<const RowMat<A>>(p, rows, cols);
    } else {
      copy.resize(rows, cols);
      for (int64_t i = 0; i < rows * cols; ++i) copy.data()[i] = A(load(p[i]));
      new (&m) Eigen::Map<const RowMat<A>>(copy.data(), rows, cols);
    }
  }
};

template <class T, class A>
void store_head(const RowMat<A>& m, TensorBase& t, int64_t head) {
  T* p = t.data<T>() + head * m.size();
  if constexpr (std::is_same_v<T, A>) {
    std::copy(m.data(), m.data() + m.size(), p);
  } else {
    for (int64_t i = 0; i < m.size(); ++i) p[i] = T(m.data()[i]);
  }
}

// How many leading keys of [0, kmax) query row i may see: all unless causal.
int64_t visible_keys(const KernelCall& c, const AttentionShape& s, int64_t i, int64_t kmax) {
  return c.attrs.flag ? std::clamp<int64_t>(i + s.Tk - s.Tq + 1, 0, kmax) : kmax;
}

// exp(row - shift) over the first n entries and 0 after them. The exp runs over n rounded up to
// whole SIMD packets (the extra entries are masked, -inf, and zeroed after), so each entry is
// computed by the vectorised exp exactly as when the whole row went through it.
template <class Row, class A>
void exp_of_visible(Row&& row, int64_t n, A shift) {
  constexpr int64_t packet = Eigen::internal::packet_traits<A>::size;
  const int64_t kmax = row.size(), m = std::min(kmax, (n + packet - 1) / packet * packet);
  row.head(m) = exp_flush_subnormal(row.head(m).array() - shift);
  row.tail(kmax - n).setZero();
}

// Scores of query rows [i0, i0 + rows) against keys [0, kmax), entries the mask input hides at
// -inf (keys past a row's causal bound are left for the caller, which zeroes them).
template <class A, class QM, class KM>
void block_scores(const KernelCall& c, int64_t b, int64_t h, const QM& Q, const KM& K, int64_t i0,
                  int64_t rows, int64_t kmax, A scale, RowMat<A>& S) {
  S.noalias() = scale * Q.middleRows(i0, rows) * K.topRows(kmax).transpose();
  const TensorBase& mask = c.inputs.size() > 6 ? c.inputs[6] : c.inputs[3];
  const A ninf = -std::numeric_limits<A>::infinity();
  const bool* mp = mask.defined() ? mask.data<bool>() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    if (mp) {
      const auto& st = mask.strides();
      const bool* row = mp + b * st[0] + h * st[1] + i * st[2];
      for (int64_t j = 0; j < kmax; ++j)
        if (!row[j * st[3]]) S(r, j) = ninf;
    }
  }
}

// Dropout of the probabilities: entry (b, h, i, j) is kept when the Philox uniform at counter
// offset + (b world + rank) H Tq Tk + (h Tq + i) Tk + j is >= p, the counter the dropout kernel
// uses for that entry of a [B, H, Tq, Tk] tensor whose rows are chunk `rank` of `world` (a
// sequence or head shard; 0 of 1 without), and scaled by 1 / (1 - p) as it scales.
template <class A>
struct ProbabilityDropout {
  float p = 0;
  A scale = 0;
  uint64_t seed = 0, offset = 0;
  int64_t H, Tq, Tk, rank = 0, world = 1;
  ProbabilityDropout(const KernelAttrs& a, const AttentionShape& s)
      : p(static_cast<float>(a.scalar2)),
        scale(a.scalar2 < 1.0 ? A(1.0 / (1.0 - a.scalar2)) : A(0)),
        seed(a.seed),
        offset(a.offset),
        H(s.H),
        Tq(s.Tq),
        Tk(s.Tk) {
    if (a.dims.size() == 2) rank = a.dims[0], world = a.dims[1];
  }
  bool on() const { return p > 0; }
  // Entries [0, n) of query row i of (b, h), in place.
  template <class Row>
  void apply(Row&& row, int64_t b, int64_t h, int64_t i, int64_t n) const {
    const uint64_t first = offset + static_cast<uint64_t>((b * world + rank) * H * Tq * Tk) +
                           static_cast<uint64_t>((h * Tq + i) * Tk);
    philox::Words r{};
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t q = first + static_cast<uint64_t>(j);
      if (j == 0 || (q & 3) == 0) r = philox::draw_packed(seed, q);
      row(j) = philox::packed_uniform(r, q) >= p ? row(j) * scale : A(0);
    }
  }
};

// The scores' gradient from the probabilities' (softmax backward): dS = P * (dP - D_i), the
// score scale folded in, in place of dP; rows are query rows row0 ...
template <class A>
void scores_gradient(const RowMat<A>& P, RowMat<A>& dP,
                     const Eigen::Matrix<A, Eigen::Dynamic, 1>& D, int64_t row0, A scale) {
  for (int64_t r = 0; r < P.rows(); ++r)
    dP.row(r) = (P.row(r).array() * (dP.row(r).array() - D(row0 + r))) * scale;
}

template <class T>
struct Attention {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const AttentionShape s(c);
    const A scale = static_cast<A>(c.attrs.scalar);
    const ProbabilityDropout<A> drop(c.attrs, s);
    A* lse = c.outputs[1].data<A>();
    parallel_for(s.B * s.H, 1, [&](int64_t h0, int64_t h1) {
      RowMat<A> S, O(s.Tq, s.Dv);
      for (int64_t bh = h0; bh < h1; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const Head<T, A> hq(c.inputs[0], bh, s.Tq, s.D), hk(c.inputs[1], bh, s.Tk, s.D),
            hv(c.inputs[2], bh, s.Tk, s.Dv);
        const auto& Q = hq.m;
        const auto& K = hk.m;
        const auto& V = hv.m;
        for (int64_t i0 = 0; i0 < s.Tq; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, s.Tq - i0);
          const int64_t kmax =
              c.attrs.flag ? std::clamp<int64_t>(i0 + rows + s.Tk - s.Tq, 0, s.Tk) : s.Tk;
          if (kmax == 0) {
            O.middleRows(i0, rows).setZero();
            for (int64_t r = 0; r < rows; ++r)
              lse[bh * s.Tq + i0 + r] = -std::numeric_limits<A>::infinity();
            continue;
          }
          S.resize(rows, kmax);
          block_scores(c, b, h, Q, K, i0, rows, kmax, scale, S);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t n = visible_keys(c, s, i0 + r, kmax);
            const A m = n > 0 ? S.row(r).head(n).maxCoeff() : -std::numeric_limits<A>::infinity();
            if (std::isinf(m)) {  // every key masked: output 0 rather than NaN
              S.row(r).setZero();
              lse[bh * s.Tq + i0 + r] = -std::numeric_limits<A>::infinity();
              continue;
            }
            exp_of_visible(S.row(r), n, m);
            const A sum = S.row(r).sum();  // (the whole row: the sum's order as before)
            S.row(r).head(n) /= sum;
            lse[bh * s.Tq + i0 + r] = m + std::log(sum);
            if (drop.on()) drop.apply(S.row(r), b, h, i0 + r, n);
          }
          O.middleRows(i0, rows).noalias() = S * V.topRows(kmax);
        }
        store_head<T, A>(O, c.outputs[0], bh);
      }
    });
  }
};

template <class T>
struct AttentionBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    // inputs: dO, q, k, v, o, lse, mask; shapes come from q/k/v at positions 1..3
    const AttentionShape s(KernelCall{c.inputs.subspan(1), c.outputs, c.attrs});
    const A scale = static_cast<A>(c.attrs.scalar);
    const ProbabilityDropout<A> drop(c.attrs, s);
    const A* lse = c.inputs[5].data<A>();
    parallel_for(s.B * s.H, 1, [&](int64_t h0, int64_t h1) {
      RowMat<A> S, dP, Pd;
      for (int64_t bh = h0; bh < h1; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const Head<T, A> hdo(c.inputs[0], bh, s.Tq, s.Dv), hq(c.inputs[1], bh, s.Tq, s.D),
            hk(c.inputs[2], bh, s.Tk, s.D), hv(c.inputs[3], bh, s.Tk, s.Dv),
            ho(c.inputs[4], bh, s.Tq, s.Dv);
        const auto& dO = hdo.m;
        const auto& Q = hq.m;
        const auto& K = hk.m;
        const auto& V = hv.m;
        const auto& O = ho.m;
        RowMat<A> dQ = RowMat<A>::Zero(s.Tq, s.D), dK = RowMat<A>::Zero(s.Tk, s.D);
        RowMat<A> dV = RowMat<A>::Zero(s.Tk, s.Dv);
        const Eigen::Matrix<A, Eigen::Dynamic, 1> Dvec = (dO.array() * O.array()).rowwise().sum();
        for (int64_t i0 = 0; i0 < s.Tq; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, s.Tq - i0);
          const int64_t kmax =
              c.attrs.flag ? std::clamp<int64_t>(i0 + rows + s.Tk - s.Tq, 0, s.Tk) : s.Tk;
          if (kmax == 0) continue;
          S.resize(rows, kmax);
          block_scores(c, b, h, Q, K, i0, rows, kmax, scale, S);
          for (int64_t r = 0; r < rows; ++r) {
            const A l = lse[bh * s.Tq + i0 + r];
            if (std::isinf(l))
              S.row(r).setZero();
            else
              exp_of_visible(S.row(r), visible_keys(c, s, i0 + r, kmax), l);
          }
          dP.noalias() = dO.middleRows(i0, rows) * V.topRows(kmax).transpose();
          if (drop.on()) {  // through the dropped-out probabilities, to the kept ones
            Pd = S;
            for (int64_t r = 0; r < rows; ++r) {
              drop.apply(Pd.row(r), b, h, i0 + r, kmax);
              drop.apply(dP.row(r), b, h, i0 + r, kmax);
            }
            dV.topRows(kmax).noalias() += Pd.transpose() * dO.middleRows(i0, rows);
          } else {
            dV.topRows(kmax).noalias() += S.transpose() * dO.middleRows(i0, rows);
          }
          scores_gradient(S, dP, Dvec, i0, scale);
          dQ.middleRows(i0, rows).noalias() = dP * K.topRows(kmax);
          dK.topRows(kmax).noalias() += dP.transpose() * Q.middleRows(i0, rows);
        }
        store_head<T, A>(dQ, c.outputs[0], bh);
        store_head<T, A>(dK, c.outputs[1], bh);
        store_head<T, A>(dV, c.outputs[2], bh);
      }
    });
  }
};

// Block-sparse attention (DeepSpeed's sparse self-attention): the scores of a query block are
// formed only against the key blocks its head's layout row names, gathered into a scratch of
// [block, active keys]; no [T, T] matrix exists, dense layouts aside.
// forward  inputs: q, k [B,H,T,D], v [B,H,T,Dv] (contiguous), layout int64 [H, T/bs, T/bs]
//          (nonzero: computed), key padding mask (optional bool [B, T], true = attend);
//          attrs.flag = causal, scalar = scale; outputs: o [B,H,T,Dv], lse [B,H,T]
// backward inputs: dO, q, k, v, o, lse, layout, mask; outputs: dq, dk, dv
struct SparseRows {
  int64_t B, H, T, D, Dv, bs;
  // q at inputs[first], v at first + 2, the layout at `layout`.
  SparseRows(const KernelCall& c, size_t first, size_t layout)
      : B(c.inputs[first].shape()[0]),
        H(c.inputs[first].shape()[1]),
        T(c.inputs[first].shape()[2]),
        D(c.inputs[first].shape()[3]),
        Dv(c.inputs[first + 2].shape()[3]),
        bs(T / c.inputs[layout].shape()[1]) {}
  // Query rows [row0, row0 + rows) and the key positions they attend to: their layout row's
  // blocks (causal: none past the diagonal block), in order.
  struct Group {
    int64_t row0, rows;
    std::vector<int64_t> keys;
  };
  // Head h's query blocks, consecutive blocks with the same layout row taken together (up to
  // kQueryBlock rows: larger products for the same work; not under causal masking, whose
  // blocks past the diagonal differ from row to row).
  std::vector<Group> groups(const TensorBase& layout, int64_t h, bool causal) const {
    const int64_t n = T / bs;
    const int64_t* rows = layout.data<int64_t>() + h * n * n;
    std::vector<Group> out;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t* row = rows + i * n;
      if (!causal && i > 0 && out.back().rows + bs <= std::max(kQueryBlock, bs) &&
          std::equal(row, row + n, row - n)) {
        out.back().rows += bs;
        continue;
      }
      Group g{i * bs, bs, {}};
      for (int64_t j = 0; j < (causal ? i + 1 : n); ++j)
        if (row[j] != 0)
          for (int64_t t = j * bs; t < (j + 1) * bs; ++t) g.keys.push_back(t);
      out.push_back(std::move(g));
    }
    return out;
  }
};

template <class A, class M>
RowMat<A> gather_rows(const M& m, const std::vector<int64_t>& rows) {
  RowMat<A> out(static_cast<int64_t>(rows.size()), m.cols());
  for (size_t r = 0; r < rows.size(); ++r) out.row(static_cast<int64_t>(r)) = m.row(rows[r]);
  return out;
}

// Scores of a group's query rows against its keys, hidden entries at -inf.
template <class A, class QM>
void sparse_scores(const SparseRows& s, const TensorBase& mask, bool causal, int64_t b, const QM& Q,
                   const RowMat<A>& Kc, const SparseRows::Group& g, A scale, RowMat<A>& S) {
  const std::vector<int64_t>& keys = g.keys;
  S.resize(g.rows, static_cast<int64_t>(keys.size()));
  S.noalias() = scale * Q.middleRows(g.row0, g.rows) * Kc.transpose();
  const A ninf = -std::numeric_limits<A>::infinity();
  const bool* kp = mask.defined() ? mask.data<bool>() + b * s.T : nullptr;
  if (!kp && !causal) return;
  for (int64_t r = 0; r < g.rows; ++r)
    for (size_t c = 0; c < keys.size(); ++c)
      if ((kp && !kp[keys[c]]) || (causal && keys[c] > g.row0 + r))
        S(r, static_cast<int64_t>(c)) = ninf;
}

template <class T>
struct BlockSparseAttention {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const SparseRows s(c, 0, 3);
    const A scale = static_cast<A>(c.attrs.scalar);
    A* lse = c.outputs[1].data<A>();
    parallel_for(s.B * s.H, 1, [&](int64_t h0, int64_t h1) {
      RowMat<A> S, O(s.T, s.Dv);
      for (int64_t bh = h0; bh < h1; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const Head<T, A> hq(c.inputs[0], bh, s.T, s.D), hk(c.inputs[1], bh, s.T, s.D),
            hv(c.inputs[2], bh, s.T, s.Dv);
        for (const SparseRows::Group& g : s.groups(c.inputs[3], h, c.attrs.flag)) {
          const std::vector<int64_t>& keys = g.keys;
          sparse_scores(s, c.inputs[4], c.attrs.flag, b, hq.m, gather_rows<A>(hk.m, keys), g, scale,
                        S);
          for (int64_t r = 0; r < g.rows; ++r) {
            const A m = keys.empty() ? -std::numeric_limits<A>::infinity() : S.row(r).maxCoeff();
            A& l = lse[bh * s.T + g.row0 + r];
            if (std::isinf(m)) {  // every key hidden: output 0 rather than NaN
              S.row(r).setZero();
              l = -std::numeric_limits<A>::infinity();
              continue;
            }
            S.row(r) = exp_flush_subnormal(S.row(r).array() - m);
            const A sum = S.row(r).sum();
            S.row(r) /= sum;
            l = m + std::log(sum);
          }
          O.middleRows(g.row0, g.rows).noalias() = S * gather_rows<A>(hv.m, keys);
        }
        store_head<T, A>(O, c.outputs[0], bh);
      }
    });
  }
};

template <class T>
struct BlockSparseAttentionBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const SparseRows s(c, 1, 6);
    const A scale = static_cast<A>(c.attrs.scalar);
    const A* lse = c.inputs[5].data<A>();
    parallel_for(s.B * s.H, 1, [&](int64_t h0, int64_t h1) {
      RowMat<A> S, dP;
      for (int64_t bh = h0; bh < h1; ++bh) {
        const int64_t b = bh / s.H, h = bh % s.H;
        const Head<T, A> hdo(c.inputs[0], bh, s.T, s.Dv), hq(c.inputs[1], bh, s.T, s.D),
            hk(c.inputs[2], bh, s.T, s.D), hv(c.inputs[3], bh, s.T, s.Dv),
            ho(c.inputs[4], bh, s.T, s.Dv);
        const auto& dO = hdo.m;
        RowMat<A> dQ = RowMat<A>::Zero(s.T, s.D), dK = RowMat<A>::Zero(s.T, s.D);
        RowMat<A> dV = RowMat<A>::Zero(s.T, s.Dv);
        const Eigen::Matrix<A, Eigen::Dynamic, 1> Dvec =
            (dO.array() * ho.m.array()).rowwise().sum();
        for (const SparseRows::Group& g : s.groups(c.inputs[6], h, c.attrs.flag)) {
          const std::vector<int64_t>& keys = g.keys;
          if (keys.empty()) continue;
          const RowMat<A> Kc = gather_rows<A>(hk.m, keys), Vc = gather_rows<A>(hv.m, keys);
          sparse_scores(s, c.inputs[7], c.attrs.flag, b, hq.m, Kc, g, scale, S);
          for (int64_t r = 0; r < g.rows; ++r) {
            const A l = lse[bh * s.T + g.row0 + r];
            if (std::isinf(l))
              S.row(r).setZero();
            else
              S.row(r) = exp_flush_subnormal(S.row(r).array() - l);
          }
          const auto dOi = dO.middleRows(g.row0, g.rows);
          const RowMat<A> dVc = S.transpose() * dOi;
          dP.noalias() = dOi * Vc.transpose();
          scores_gradient(S, dP, Dvec, g.row0, scale);
          dQ.middleRows(g.row0, g.rows).noalias() = dP * Kc;
          const RowMat<A> dKc = dP.transpose() * hq.m.middleRows(g.row0, g.rows);
          for (size_t k = 0; k < keys.size(); ++k) {
            dK.row(keys[k]) += dKc.row(static_cast<int64_t>(k));
            dV.row(keys[k]) += dVc.row(static_cast<int64_t>(k));
          }
        }
        store_head<T, A>(dQ, c.outputs[0], bh);
        store_head<T, A>(dK, c.outputs[1], bh);
        store_head<T, A>(dV, c.outputs[2], bh);
      }
    });
  }
};

const bool registered = [] {
  register_floating<Attention>(Kernel::attention);
  register_floating<AttentionBackward>(Kernel::attention_backward);
  register_floating<BlockSparseAttention>(Kernel::block_sparse_attention);
  register_floating<BlockSparseAttentionBackward>(Kernel::block_sparse_attention_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
