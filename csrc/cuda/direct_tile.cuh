// Pieces shared by the direct forward kernels (direct.cu: CUDA-core FMA,
// direct_tc.cu: tensor cores): the per-phase tables, the output tile store and
// the device's shared-memory limit.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>
#include "common/problem.h"
#include "cuda/kernels.h"
#include "cuda/mma_core.cuh"

namespace convt2d {
namespace cuda {
namespace {

// The device's opt-in shared memory per block (227 KB on H100, 99 KB on
// sm_86/89, 64 KB on sm_75); the kernels' limits below are capped by it, so a
// problem that does not fit falls back (v2 -> v1 -> implicit GEMM).
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

// store_rows_vec / store_rows16 form element offsets from a tile's origin in 32 bits:
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

// Vector row stores (store_rows_vec): chunk k of line (c, i) -- the staged 16 bytes at
// staging index kE*k, or bias[c] (zero) repeated when s_o is null -- and a whole chunk's
// store (streaming unless cs = 0).
template <typename T>
__device__ __forceinline__ uint4 rows_chunk(const T* s_o, int c, int i, int QY, int ld, int k,
                                            const T* bp) {
  constexpr int kE = 16 / int(sizeof(T));
  if (s_o != nullptr) return *reinterpret_cast<const uint4*>(s_o + (c * QY + i) * ld + kE * k);
  return splat16<T>(bp ? bp[c] : Cvt<T>::zero());
}
template <typename T>
__device__ __forceinline__ void rows_store(T* dst, const uint4& v, int cs) {
  if (cs) __stcs(reinterpret_cast<uint4*>(dst), v);
  else *reinterpret_cast<uint4*>(dst) = v;
}

// The stores of one partial chunk: bytes [a, b) (even, 0 <= a < b <= 16, not the whole
// chunk [0, 16)) of the 16-byte aligned chunk d <- v, as aligned 2-, 4- and 8-byte pieces
// (at most 4; a segment's first or last chunk takes at most 3). For 4- and 8-byte
// elements a and b are multiples of the element size, so no piece splits an element.
// scripts/model_direct_tc.py checks every (a, b).
__device__ __forceinline__ void store_chunk_part(char* d, const uint4& v, int a, int b) {
  auto word = [&](int q) { return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w; };
  int e = a;
  if ((e & 2) && e < b) {
    __stcs(reinterpret_cast<unsigned short*>(d + e), (unsigned short)(word(e >> 2) >> 16));
    e += 2;
  }
  if ((e & 4) && e + 4 <= b) {
    __stcs(reinterpret_cast<unsigned int*>(d + e), word(e >> 2));
    e += 4;
  }
  if (e + 8 <= b) {  // e is 0 or 8 here
    __stcs(reinterpret_cast<uint2*>(d + e), e == 0 ? make_uint2(v.x, v.y) : make_uint2(v.z, v.w));
    e += 8;
  }
  if (e + 4 <= b) {
    __stcs(reinterpret_cast<unsigned int*>(d + e), word(e >> 2));
    e += 4;
  }
  if (e < b) __stcs(reinterpret_cast<unsigned short*>(d + e), (unsigned short)(word(e >> 2) & 0xffffu));
}

// NCHW output with unit column stride: writes a tile's row segments (line (c, i) = output
// row oy0 + i*oy_step of channel c, columns ox_base + [col_lo, col_hi)) as 16-byte chunks.
// Work items are (line, aligned chunk) pairs, nchk chunks per line (the ones past the
// segment skip), dealt to consecutive threads so a warp's stores cover neighbouring
// chunks; each thread starts its (chunk, row, channel) digits by division once and steps
// them by the block stride with one carry per digit. Partial chunks at the segment ends
// take aligned pieces. The staging row of line (c, i) is s_o + (c*QY + i)*ld + shift(c, i),
// shift = the output row's element offset modulo kE = 16 / sizeof(T), so chunk k of a line
// is the aligned 16 bytes at staging index kE*k. With s_o == nullptr the lines are bias[c]
// (or zero). m_chk, m_rows: div_magic multipliers of nchk and nrows. Element offsets from
// the tile's origin must fit 32 bits (the launchers check).
template <typename T>
__device__ __forceinline__ void store_rows_vec(T* on, const TensorRef& o, int nc, int nrows, int QY,
                                               int64_t oy0, int64_t oy_step, int64_t ox_base,
                                               int col_lo, int col_hi, const T* s_o, int ld,
                                               const T* bp, int nchk, uint64_t m_chk,
                                               uint64_t m_rows, int cs) {
  constexpr int kE = 16 / int(sizeof(T));
  constexpr int kLgE = kE == 8 ? 3 : kE == 4 ? 2 : 1;
  T* base = on + oy0 * o.sh + ox_base;  // line (0, 0), column 0
  const int base_res = int((reinterpret_cast<uintptr_t>(base) / sizeof(T)) & (kE - 1));
  const int sc = int(o.sc), rs = int(oy_step * o.sh);
  const int total = nc * nrows * nchk;
  const int nthr = int(blockDim.x);
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
    const int kc = ((col_lo + shf) >> kLgE) + k;
    const int c0 = kE * kc - shf;
    if (c0 < col_hi) {
      T* dst = base + (off + c0);  // 16-byte aligned
      const uint4 v = rows_chunk<T>(s_o, c, i, QY, ld, kc, bp);
      if (c0 >= col_lo && c0 + kE <= col_hi) {
        rows_store<T>(dst, v, cs);
      } else {  // the segment's first or last chunk
        const int a = col_lo - c0 > 0 ? col_lo - c0 : 0;
        const int b = col_hi - c0 < kE ? col_hi - c0 : kE;
        store_chunk_part(reinterpret_cast<char*>(dst), v, a * int(sizeof(T)), b * int(sizeof(T)));
      }
    }
    k += dk;
    i += di;
    c += dc;
    if (k >= nchk) { k -= nchk; ++i; }
    if (i >= nrows) { i -= nrows; ++c; }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace convt2d
