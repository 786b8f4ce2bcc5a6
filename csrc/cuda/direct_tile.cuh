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
