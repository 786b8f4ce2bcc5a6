// Pieces shared by the direct forward kernels (forward/direct_cuda_core.cu: CUDA-core FMA,
// forward/direct_tensor_core.cu: tensor cores): the per-phase tables, the output tile store and
// the device's shared-memory limit.
#pragma once
#include <cstdint>
#include <type_traits>
#include <cuda_runtime.h>
#include "common/problem.h"
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"

namespace convt2d {
namespace cuda {
namespace {

// The device's opt-in shared memory per block (227 KB on H100, 99 KB on
// sm_86/89, 64 KB on sm_75); the kernels' limits below are capped by it, so a
// problem that does not fit falls back (direct2_fwd_kernel -> direct_fwd_kernel
// -> implicit GEMM).
inline int64_t smem_optin() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return 48 * 1024;  // the limit every CUDA device grants
  return v;
}

// One stride phase of one dimension, from make_phase_dim (host): output
// positions Q in [q0, q0 + nq), taps k = k0 + j*kstep (j < ntap), input
// index Q - koff0 - j*koff_step.
struct D2Phase {
  int64_t q0, nq, koff0;
  int k0, ntap;
};

inline D2Phase to_d2(const PhaseDim& d) {
  D2Phase r;
  r.q0 = d.q0; r.nq = d.nq; r.koff0 = d.koff0; r.k0 = int(d.k0); r.ntap = int(d.ntap);
  return r;
}

constexpr int kDirectMaxS = 16;  // largest sh / sw (phase tables in the kernel parameters)

// The tile grid of both direct kernels, host-computed, the first part of their
// __grid_constant__ configs (D2Cfg, DtcCfg derive from it). A block owns qy_tile
// rows of one row phase ry by 32*sw consecutive output columns (all column phases).
struct DTileGrid {
  D2Phase py[kDirectMaxS];           // row phases ry < sh
  D2Phase px[kDirectMaxS];           // column phases rx < sw
  int64_t koffs_y = 0, koffs_x = 0;  // koff_step of the rows / columns
  int kstep_y = 1, kstep_x = 1;
  int64_t qx_first = 0;  // Q of the first column of column tile 0
  int ntx = 0;           // column tiles (32*sw output columns each)
  int nty = 0;           // row tiles per row phase
  int qy_tile = 0;       // rows of one phase per tile
};

// Phase tables; false when sh or sw is above kDirectMaxS. Returns the largest
// phase row count in max_nq.
inline bool set_tile_phases(const Problem& p, DTileGrid& g, int64_t& max_nq) {
  if (p.sw > kDirectMaxS || p.sh > kDirectMaxS) return false;
  for (int64_t r = 0; r < p.sh; ++r) g.py[r] = to_d2(make_phase_dim(r, p.sh, p.ph, p.dh, p.kh, p.Ho));
  for (int64_t r = 0; r < p.sw; ++r) g.px[r] = to_d2(make_phase_dim(r, p.sw, p.pw, p.dw, p.kw, p.Wo));
  g.kstep_y = int(p.sh / gcd64(p.sh, p.dh));
  g.koffs_y = g.kstep_y * p.dh / p.sh;
  g.kstep_x = int(p.sw / gcd64(p.sw, p.dw));
  g.koffs_x = g.kstep_x * p.dw / p.sw;
  max_nq = 0;
  for (int64_t r = 0; r < p.sh; ++r) max_nq = g.py[r].nq > max_nq ? g.py[r].nq : max_nq;
  return true;
}

// Tile counts for tiles of qy rows and kC channels per z step (z = (n, g, channel
// block), n slowest); false when the block indices would not fit 32 bits (the
// kernels' `z += gridDim.y` loop must not wrap).
inline bool set_tile_grid(const Problem& p, int64_t qy, int64_t max_nq, int64_t kC,
                          DTileGrid& g, int& ncob, int& ngc, int& nz) {
  const int64_t sw = p.sw;
  g.qy_tile = int(qy);
  g.qx_first = p.pw / sw;  // first Q with (Q*sw - pw) > -sw
  const int64_t ox_first = g.qx_first * sw - p.pw;  // in (-sw, 0]
  const int64_t ntx = (p.Wo - ox_first + 32 * sw - 1) / (32 * sw);
  const int64_t nty = max_nq > 0 ? (max_nq + qy - 1) / qy : 1;
  const int64_t nb = (p.cout_g() + kC - 1) / kC;
  const int64_t nzz = p.N * p.groups * nb;
  if (ntx * nty * p.sh > 0x7fffffffLL || nzz > 0x7fffffffLL - 65535) return false;
  g.ntx = int(ntx);
  g.nty = int(nty);
  ncob = int(nb);
  ngc = int(p.groups * nb);
  nz = int(nzz);
  return true;
}

// store_rows_vec forms element offsets from a tile's origin in 32 bits:
// true when the tile's channel span (channels), row span (rows) and columns fit.
inline bool rows_vec_offsets_fit(const TensorRef& o, const Problem& p, int64_t channels,
                                 int64_t rows) {
  const int64_t sc = o.sc < 0 ? -o.sc : o.sc;
  const int64_t rs = (o.sh < 0 ? -o.sh : o.sh) * p.sh;
  return channels * sc + rows * rs + p.Wo + 32 * p.sw + 16 < (int64_t(1) << 31);
}

// Launch grid: x = ntx * nty * sh tiles; y = (group, channel block) x sample
// groups, up to max_npb samples per block (same weights) while the grid stays large.
inline dim3 direct_grid(const Problem& p, const DTileGrid& g, int ngc, int64_t max_npb = 4) {
  const int64_t gx = int64_t(g.ntx) * g.nty * p.sh;
  int64_t npb = 1;
  while (npb < max_npb && npb < p.N && gx * ngc * ((p.N + 2 * npb - 1) / (2 * npb)) >= 4096)
    npb *= 2;
  const int64_t gy64 = ngc * ((p.N + npb - 1) / npb);
  return dim3(unsigned(gx), unsigned(gy64 < 65535 ? gy64 : 65535));
}

// Writes a tile: rows oy0 + i*sh (i < nrows), columns ox_base + [col_lo, col_hi),
// channels c < nc of `on`; val(c, i, col) gives the value. Row segments
// (coalesced along W) unless the output is channels-last, then channel runs.
template <typename T, typename F>
__device__ __forceinline__ void store_tile(T* on, const TensorRef& o, bool chan_fast, int nc,
                                           int nrows, int64_t oy0, int64_t oy_step,
                                           int64_t ox_base, int col_lo, int col_hi, F val) {
  const int nthr = blockDim.x, nwarps = nthr >> 5;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (!chan_fast) {
    const int64_t step = 32 * o.sw;
    for (int line = warp; line < nc * nrows; line += nwarps) {
      const int c = line / nrows, i = line - c * nrows;
      T* op = on + c * o.sc + (oy0 + i * oy_step) * o.sh + (ox_base + col_lo + lane) * o.sw;
      for (int cc = col_lo + lane; cc < col_hi; cc += 32, op += step)
        __stcs(op, val(c, i, cc));  // streaming: keep x in L2
    }
  } else {
    const int ncols = col_hi - col_lo;
    const int total = nrows * ncols * nc;
    for (int it = tid; it < total; it += nthr) {
      const int pix = it / nc, c = it - pix * nc;
      const int i = pix / ncols, cc = col_lo + (pix - i * ncols);
      __stcs(on + c * o.sc + (oy0 + i * oy_step) * o.sh + (ox_base + cc) * o.sw, val(c, i, cc));
    }
  }
}

// n / d for the block-constant divisors of the row stores: m = ceil(2^32 / d), exact
// while n < 2^32 / d^2 (the configs keep the item counts far below that).
__device__ __forceinline__ uint32_t div_magic(uint32_t n, uint64_t m) {
  return uint32_t((uint64_t(n) * m) >> 32);
}
inline uint64_t div_magic_m(int64_t d) { return uint64_t(((int64_t(1) << 32) + d - 1) / d); }

// 16 bytes of v repeated (16 / sizeof(T) copies).
template <typename T>
__device__ __forceinline__ uint4 splat16(T v) {
  T a[16 / sizeof(T)];
#pragma unroll
  for (int e = 0; e < int(16 / sizeof(T)); ++e) a[e] = v;
  uint4 u;
  memcpy(&u, a, 16);
  return u;
}

// One element store, streaming (cs) or plain, through an integer of the element's size.
template <typename T, bool kCs>
__device__ __forceinline__ void store_elem(T* dst, T v) {
  using U = typename std::conditional<sizeof(T) == 2, unsigned short,
            typename std::conditional<sizeof(T) == 4, unsigned int, unsigned long long>::type>::type;
  U u;
  memcpy(&u, &v, sizeof(T));
  if (kCs) __stcs(reinterpret_cast<U*>(dst), u);
  else *reinterpret_cast<U*>(dst) = u;
}

// Full chunks per line for store_rows_vec: a tile row segment has at most 32*sw columns,
// a multiple of 16 bytes, so at most 32*sw / kE whole aligned chunks.
inline int rows_vec_chunks(int64_t sw, int64_t elem_bytes) { return int(32 * sw * elem_bytes / 16); }

// NCHW output with unit column stride: writes a tile's row segments (line (c, i) = output
// row oy0 + i*oy_step of channel c, columns ox_base + [col_lo, col_hi)).
//   Pass 1: the aligned 16-byte chunks that lie wholly inside a segment. Items are (line,
//   chunk) pairs, nchk = rows_vec_chunks(sw) per line (the ones past the segment skip),
//   dealt to consecutive threads so a warp's stores cover neighbouring chunks; each thread
//   starts its (chunk, row, channel) digits by division once and steps them by the block
//   stride with one carry per digit. No item takes a partial-chunk branch (a warp-divergent
//   path once run by ~80% of the warps: ncu).
//   Pass 2: the up to kE - 1 elements before a segment's first whole chunk and after its
//   last, as element stores (items (line, j), j < 2*(kE - 1)).
// kStaged: the staging row of line (c, i) is s_o + (c*QY + i)*ld + shift(c, i), shift = the
// output row's element offset modulo kE = 16 / sizeof(T), so chunk kc of a line is the
// aligned 16 bytes at staging index kE*kc and column col is at staging index shift + col;
// s_o is a shared-memory address. Else the lines are bias bp[c] (zero when bp is null).
// m_chk, m_rows: div_magic multipliers of nchk and nrows. Element offsets from the tile's
// origin must fit 32 bits (the launchers check: rows_vec_offsets_fit).
template <typename T, bool kStaged, bool kCs>
__device__ __forceinline__ void store_rows_vec_impl(T* on, const TensorRef& o, int nc, int nrows,
                                                    int QY, int64_t oy0, int64_t oy_step,
                                                    int64_t ox_base, int col_lo, int col_hi,
                                                    uint32_t s_o, int ld, const T* bp, int nchk,
                                                    uint64_t m_chk, uint64_t m_rows) {
  constexpr int kE = 16 / int(sizeof(T));
  constexpr int kLgE = kE == 8 ? 3 : kE == 4 ? 2 : 1;
  constexpr int kEdge = 2 * (kE - 1);
  T* base = on + oy0 * o.sh + ox_base;  // line (0, 0), column 0
  const int base_res = int((reinterpret_cast<uintptr_t>(base) / sizeof(T)) & (kE - 1));
  const int sc = int(o.sc), rs = int(oy_step * o.sh);
  const int nthr = int(blockDim.x);
  {  // pass 1: whole chunks
    const int total = nc * nrows * nchk;
    int it = int(threadIdx.x);
    int line = int(div_magic(uint32_t(it), m_chk));
    int k = it - line * nchk;
    int c = int(div_magic(uint32_t(line), m_rows));
    int i = line - c * nrows;
    const int dl = int(div_magic(uint32_t(nthr), m_chk)), dk = nthr - dl * nchk;
    const int dc = int(div_magic(uint32_t(dl), m_rows)), di = dl - dc * nrows;
    for (; it < total; it += nthr) {
      const int off = c * sc + i * rs;  // line's column 0
      const int shf = (base_res + off) & (kE - 1);
      const int kc = ((col_lo + shf + kE - 1) >> kLgE) + k;  // first whole chunk + k
      const int c0 = kE * kc - shf;
      if (c0 + kE <= col_hi) {
        uint4 v;
        if constexpr (kStaged) {
          const uint32_t a = s_o + uint32_t(((c * QY + i) * ld + kE * kc) * int(sizeof(T)));
          asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                       : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
        } else {
          v = splat16<T>(bp ? bp[c] : Cvt<T>::zero());
        }
        uint4* dst = reinterpret_cast<uint4*>(base + (off + c0));  // 16-byte aligned
        if (kCs) __stcs(dst, v);
        else *dst = v;
      }
      k += dk;
      i += di;
      c += dc;
      if (k >= nchk) { k -= nchk; ++i; }
      if (i >= nrows) { i -= nrows; ++c; }
    }
  }
  // pass 2: the partial chunks at the segment ends, element by element
  for (int it = int(threadIdx.x); it < nc * nrows * kEdge; it += nthr) {
    const int line = it / kEdge, j = it - line * kEdge;
    const int c = int(div_magic(uint32_t(line), m_rows)), i = line - c * nrows;
    const int off = c * sc + i * rs;
    const int shf = (base_res + off) & (kE - 1);
    const int first = kE * ((col_lo + shf + kE - 1) >> kLgE) - shf;  // first whole chunk
    int col;
    if (j < kE - 1) {
      col = col_lo + j;
      if (col >= first) continue;
    } else {
      const int nfull = col_hi > first ? (col_hi - first) >> kLgE : 0;
      col = first + kE * nfull + (j - (kE - 1));
    }
    if (col >= col_hi) continue;
    T v;
    if constexpr (kStaged) {
      const uint32_t a = s_o + uint32_t(((c * QY + i) * ld + shf + col) * int(sizeof(T)));
      if constexpr (sizeof(T) == 2) {
        unsigned short u;
        asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(u) : "r"(a));
        memcpy(&v, &u, 2);
      } else if constexpr (sizeof(T) == 4) {
        unsigned int u;
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(u) : "r"(a));
        memcpy(&v, &u, 4);
      } else {
        unsigned long long u;
        asm volatile("ld.shared.u64 %0, [%1];\n" : "=l"(u) : "r"(a));
        memcpy(&v, &u, 8);
      }
    } else {
      v = bp ? bp[c] : Cvt<T>::zero();
    }
    store_elem<T, kCs>(base + (off + col), v);
  }
}

// store_rows_vec_impl with s_o a generic pointer to shared memory, or nullptr for the bias
// lines; cs: streaming stores.
template <typename T>
__device__ __forceinline__ void store_rows_vec(T* on, const TensorRef& o, int nc, int nrows, int QY,
                                               int64_t oy0, int64_t oy_step, int64_t ox_base,
                                               int col_lo, int col_hi, const T* s_o, int ld,
                                               const T* bp, int nchk, uint64_t m_chk,
                                               uint64_t m_rows, int cs) {
  if (s_o != nullptr) {
    const uint32_t a = uint32_t(__cvta_generic_to_shared(s_o));
    if (cs)
      store_rows_vec_impl<T, true, true>(on, o, nc, nrows, QY, oy0, oy_step, ox_base, col_lo,
                                         col_hi, a, ld, bp, nchk, m_chk, m_rows);
    else
      store_rows_vec_impl<T, true, false>(on, o, nc, nrows, QY, oy0, oy_step, ox_base, col_lo,
                                          col_hi, a, ld, bp, nchk, m_chk, m_rows);
  } else if (cs) {
    store_rows_vec_impl<T, false, true>(on, o, nc, nrows, QY, oy0, oy_step, ox_base, col_lo,
                                        col_hi, 0u, ld, bp, nchk, m_chk, m_rows);
  } else {
    store_rows_vec_impl<T, false, false>(on, o, nc, nrows, QY, oy0, oy_step, ox_base, col_lo,
                                         col_hi, 0u, ld, bp, nchk, m_chk, m_rows);
  }
}

}  // namespace
}  // namespace cuda
}  // namespace convt2d
