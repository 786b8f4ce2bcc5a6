// Pieces shared by the direct forward kernels (direct.cu: CUDA-core FMA,
// direct_tc.cu: tensor cores): the per-phase tables, the output tile store and
// the device's shared-memory limit.
#pragma once
#include <cstdint>
#include <cuda_runtime.h>
#include "common/problem.h"
#include "cuda/kernels.h"

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

}  // namespace
}  // namespace cuda
}  // namespace convt2d
