// Direct CUDA-core forward for shapes with few channels per group (the glue
// routes Cout/groups < 32 or few reduced channels per output here).
//
// Staged kernel (direct2_fwd_kernel), used whenever sh, sw <= 16 and its shared
// memory fits:
//   A block owns an output tile of one row phase ry: QY rows of that phase
//   (oy = (qy0 + i)*sh + ry - ph) by 32*sw consecutive output columns
//   (ox = (qx0 + q)*sw + rx - pw, every column phase rx), for kC (4, 8 or 16)
//   output channels of one (n, group) per z step. A warp's work unit is one
//   column phase rx and kPY = 2 tile rows; lane q computes the 2 x kC outputs
//   at Q = qx0 + q. All lanes of a warp thus share the taps (problem.h): the
//   weights are warp-uniform broadcast LDS.128 loads, the x gather is
//   coalesced along the input row, each weight register serves 2 FMAs and
//   each x register kC FMAs. Units are dealt to up to 8 warps.
//   Results go to a shared-memory staging tile [kC][QY][32*sw] (column index
//   padded by col/32 when sw is even: no bank conflicts on the strided
//   writes), then the block writes whole output row segments (or pixel
//   channel runs for channels-last outputs) with streaming stores.
//   Row phases that no tap reaches (e.g. sh = dh = 2: every other row) are
//   written as bias / zero directly, without staging.
//   The phase tables are computed on the host (D2Cfg, a __grid_constant__
//   parameter): no 64-bit divisions in the kernel.
// Per-column kernel (direct_fwd_kernel), fallback for sh or sw > 16 (or a staging
//   tile that does not fit): one thread per output column, 8 rows per block,
//   16 or 64 channels per thread.
// Both kernels visit only the taps that reach each stride phase: no per-tap
// modulo in the loops. Global indices are 64-bit; the inner loops only
// advance pointers.
#include <cstdlib>
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"
#include "cuda/common/direct_tile.cuh"

namespace convt2d {
namespace cuda {

// ------------------------------------------------------- direct2_fwd_kernel
constexpr int kD2MaxWarps = 8;
constexpr int64_t kD2SmemBudget = 100 * 1024;  // preferred per-block shared memory
constexpr int64_t kD2SmemMax = 160 * 1024;     // hard limit (as direct_forward_fits)

struct D2Cfg : DTileGrid {
  int ld = 0;            // staging row pitch in elements
  int pad = 0;           // 1: staging column c stored at c + c/32 (sw even)
  int vec = 0;           // 1: store_rows_vec (16-byte chunks; rows staged shifted to the
                         // output's alignment), else store_tile
  int nchk = 0;          // store_rows_vec: whole chunks per line, div_magic multipliers
  uint64_t m_chk = 0, m_rows[17] = {};
  int w_bytes = 0;       // weights + bias region (16-byte multiple)
  int ncob = 0, ngc = 0, nz = 0;  // channel blocks, G*ncob, N*G*ncob
};

template <int kC>
__device__ __forceinline__ void load_w(float (&wv)[kC], const float* p) {
  const float4* v = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int j = 0; j < kC / 4; ++j) {
    const float4 t = v[j];
    wv[4 * j] = t.x; wv[4 * j + 1] = t.y; wv[4 * j + 2] = t.z; wv[4 * j + 3] = t.w;
  }
}
template <int kC>
__device__ __forceinline__ void load_w(double (&wv)[kC], const double* p) {
  const double2* v = reinterpret_cast<const double2*>(p);
#pragma unroll
  for (int j = 0; j < kC / 2; ++j) {
    const double2 t = v[j];
    wv[2 * j] = t.x; wv[2 * j + 1] = t.y;
  }
}

// acc[r][c] += x[r] * w[c] for the kC weights of one input channel (a
// warp-uniform address: one broadcast LDS.128 per 4 weights).
template <typename T, int kC, int kPY>
__device__ __forceinline__ void fma_step(typename AccOf<T>::type (&acc)[kPY][kC], const T (&xt)[kPY],
                                         const bool (&ok)[kPY],
                                         const typename AccOf<T>::type* wrow) {
  using Acc = typename AccOf<T>::type;
  Acc xv[kPY];
#pragma unroll
  for (int r = 0; r < kPY; ++r) xv[r] = ok[r] ? Cvt<T>::to_acc(xt[r]) : Acc(0);
  Acc wv[kC];
  load_w<kC>(wv, wrow);
#pragma unroll
  for (int r = 0; r < kPY; ++r)
#pragma unroll
    for (int c = 0; c < kC; ++c) acc[r][c] = fma(xv[r], wv[c], acc[r][c]);
}

// One block: an output tile of row phase ry (QY rows of that phase) by
// 32*sw consecutive columns, for kC channels of one (n, group) per z step.
// Warp work unit: column phase rx and kPY tile rows; lane q computes the
// kPY x kC outputs at Q = qx0 + q, so all lanes share the taps.
template <typename T, int kC, int kPY>
__global__ void __launch_bounds__(32 * kD2MaxWarps, sizeof(typename AccOf<T>::type) == 8 ? 1 : 3)
direct2_fwd_kernel(const __grid_constant__ DirectParams prm, const __grid_constant__ D2Cfg cfg) {
  using Acc = typename AccOf<T>::type;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Problem& p = prm.p;
  const int Cig = int(p.cin_g());
  const int64_t Cog = p.cout_g();
  const int kk = int(p.kh * p.kw);
  const int sw = int(p.sw);
  const int QY = cfg.qy_tile;
  Acc* s_w = reinterpret_cast<Acc*>(smem_raw);                // [kh*kw][Cig][kC]
  Acc* s_b = s_w + kk * Cig * kC;                              // [kC]
  T* s_o = reinterpret_cast<T*>(smem_raw + cfg.w_bytes);       // [kC][QY][ld]

  const int nthr = blockDim.x, nwarps = nthr >> 5;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  // Tile: column tile tx, row tile ty of row phase ry.
  const int bx = int(blockIdx.x);
  const int tx = bx % cfg.ntx;
  const int rest = bx / cfg.ntx;
  const int ty = rest % cfg.nty;
  const int ry = rest / cfg.nty;
  const D2Phase dy = cfg.py[ry];
  const int64_t qy0 = dy.q0 + int64_t(ty) * QY;
  const int64_t rows_left = dy.q0 + dy.nq - qy0;
  if (rows_left <= 0) return;  // whole block: no row of this phase here
  const int nrows = rows_left < QY ? int(rows_left) : QY;
  const int64_t oy0 = qy0 * p.sh + ry - p.ph;  // output row of tile row 0
  const int64_t qx0 = cfg.qx_first + int64_t(tx) * 32;
  const int64_t ox_base = qx0 * p.sw - p.pw;  // output column of staging column 0
  const int tw = 32 * sw;
  const int col_lo = ox_base < 0 ? int(-ox_base) : 0;
  const int col_hi = p.Wo - ox_base < tw ? int(p.Wo - ox_base) : tw;

  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  const T* __restrict__ bias = static_cast<const T*>(prm.bias);
  T* __restrict__ out = static_cast<T*>(prm.out.ptr);
  const int64_t xsc = prm.x.sc, xsh = prm.x.sh, xsw = prm.x.sw, xsc2 = 2 * xsc;
  // Channels-last output: write each pixel's channel run; else row segments.
  const bool chan_fast = prm.out.sc == 1 && prm.out.sw != 1;
  const int ncob = cfg.ncob;

  if (dy.ntap == 0) {  // no tap reaches this row phase: bias (or zero) rows
    for (int z = blockIdx.y; z < cfg.nz; z += gridDim.y) {
      const int gc = z % cfg.ngc, n = z / cfg.ngc;
      const int cob = gc % ncob, g = gc / ncob;
      const int64_t co0 = int64_t(cob) * kC;
      const int nc = Cog - co0 < kC ? int(Cog - co0) : kC;
      T* on = out + n * prm.out.sn + (g * Cog + co0) * prm.out.sc;
      const T* bp = bias ? bias + g * Cog + co0 : nullptr;
      if (cfg.vec)
        store_rows_vec<T>(on, prm.out, nc, nrows, QY, oy0, p.sh, ox_base, col_lo, col_hi, nullptr,
                          0, bp, cfg.nchk, cfg.m_chk, cfg.m_rows[nrows], 1);
      else
        store_tile<T>(on, prm.out, chan_fast, nc, nrows, oy0, p.sh, ox_base, col_lo, col_hi,
                      [&](int c, int, int) { return bp ? bp[c] : Cvt<T>::zero(); });
    }
    return;
  }

  const int nunits = sw * (QY / kPY);
  // z = (n, g, cob), n slowest; the grid's y extent is a multiple of G*ncob
  // when it can be, so a block's iterations keep (g, cob) and its weights.
  int staged = -1;  // g*ncob + cob of the weights in s_w
  for (int z = blockIdx.y; z < cfg.nz; z += gridDim.y) {
    const int gc = z % cfg.ngc, n = z / cfg.ngc;
    const int cob = gc % ncob, g = gc / ncob;
    const int64_t co0 = int64_t(cob) * kC;
    const int nc = Cog - co0 < kC ? int(Cog - co0) : kC;
    __syncthreads();  // previous iteration's readers are done with s_w / s_o
    if (gc != staged) {
      staged = gc;
      const int total = kk * Cig * kC;
      for (int i0 = tid; i0 < total; i0 += 4 * nthr) {  // 4 loads in flight
        T v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int i = i0 + k * nthr;
          const int c = i % kC, r2 = i / kC, ci = r2 % Cig, t = r2 / Cig;
          v[k] = (i < total && c < nc) ? w[((int64_t(g) * Cig + ci) * Cog + co0 + c) * kk + t]
                                       : Cvt<T>::zero();
        }
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (i0 + k * nthr < total) s_w[i0 + k * nthr] = Cvt<T>::to_acc(v[k]);
      }
      if (tid < kC)
        s_b[tid] = (bias != nullptr && tid < nc) ? Cvt<T>::to_acc(bias[g * Cog + co0 + tid]) : Acc(0);
      __syncthreads();
    }

    // Staging shift of line (c, i) for store_rows_vec: (sh0 + c*shc + i*shr) & kEm = the
    // element offset modulo 16 bytes of that output row's column 0; 0 for store_tile.
    T* on = out + n * prm.out.sn + (g * Cog + co0) * prm.out.sc;
    constexpr int kEm = 16 / int(sizeof(T)) - 1;
    int sh0 = 0, shc = 0, shr = 0;
    if (cfg.vec) {
      sh0 = int((reinterpret_cast<uintptr_t>(on + oy0 * prm.out.sh + ox_base) / sizeof(T)) & kEm);
      shc = int(prm.out.sc & kEm);
      shr = int((p.sh * prm.out.sh) & kEm);
    }
    const T* xn = x + n * prm.x.sn + int64_t(g) * Cig * xsc;
    for (int u = warp; u < nunits; u += nwarps) {
      const int rx = u % sw;
      const int row0 = (u / sw) * kPY;  // first tile row of this unit
      if (row0 >= nrows) continue;      // warp-uniform
      const D2Phase& dx = cfg.px[rx];
      const int ntap_x = dx.ntap, k0x = dx.k0;
      const int64_t Q = qx0 + lane;
      const int64_t ix0 = Q - dx.koff0;
      Acc acc[kPY][kC];
#pragma unroll
      for (int r = 0; r < kPY; ++r)
#pragma unroll
        for (int c = 0; c < kC; ++c) acc[r][c] = Acc(0);

      for (int jy = 0; jy < dy.ntap; ++jy) {
        const int ky = dy.k0 + jy * cfg.kstep_y;
        int64_t iy[kPY];
        bool rv[kPY];
        bool any = false;
#pragma unroll
        for (int r = 0; r < kPY; ++r) {
          iy[r] = qy0 + row0 + r - dy.koff0 - jy * cfg.koffs_y;
          rv[r] = row0 + r < nrows && iy[r] >= 0 && iy[r] < p.H;  // warp-uniform
          any |= rv[r];
        }
        if (!any) continue;
        for (int jx = 0; jx < ntap_x; ++jx) {
          const int kx = k0x + jx * cfg.kstep_x;
          const int64_t ix = ix0 - jx * cfg.koffs_x;
          const bool cv = ix >= 0 && ix < p.W;
          const Acc* wt = s_w + (ky * int(p.kw) + kx) * Cig * kC;
          // pr[r] -> x[n, g*Cig + ci, iy, ix]; rows / columns outside the input
          // read channel ci at (0, 0) instead (valid memory) and use 0.
          const T* pr[kPY];
          bool ok[kPY];
#pragma unroll
          for (int r = 0; r < kPY; ++r) {
            ok[r] = rv[r] && cv;
            pr[r] = xn + (ok[r] ? iy[r] * xsh + ix * xsw : 0);
          }
          for (int ci = 0; ci < Cig; ci += 2) {  // 2*kPY loads in flight
            const bool two = ci + 1 < Cig;       // warp-uniform
            T x0[kPY], x1[kPY];
#pragma unroll
            for (int r = 0; r < kPY; ++r) {
              x0[r] = pr[r][0];
              x1[r] = two ? pr[r][xsc] : Cvt<T>::zero();
              pr[r] += xsc2;
            }
            fma_step<T, kC, kPY>(acc, x0, ok, wt + ci * kC);
            if (two) fma_step<T, kC, kPY>(acc, x1, ok, wt + (ci + 1) * kC);
          }
        }
      }
      // Stage: column lane*sw + rx of rows row0 + r.
      const int col = lane * sw + rx;
      const int colp = col + (cfg.pad ? (col >> 5) : 0);
#pragma unroll
      for (int r = 0; r < kPY; ++r) {
        if (row0 + r < nrows) {
          const int shr_r = sh0 + (row0 + r) * shr;
#pragma unroll
          for (int c = 0; c < kC; ++c)
            s_o[(c * QY + row0 + r) * cfg.ld + colp + ((shr_r + c * shc) & kEm)] =
                Cvt<T>::from_acc(acc[r][c] + s_b[c]);
        }
      }
    }
    __syncthreads();

    const int ld = cfg.ld, pad = cfg.pad;
    if (cfg.vec)
      store_rows_vec<T>(on, prm.out, nc, nrows, QY, oy0, p.sh, ox_base, col_lo, col_hi, s_o, ld,
                        nullptr, cfg.nchk, cfg.m_chk, cfg.m_rows[nrows], 1);
    else
      store_tile<T>(on, prm.out, chan_fast, nc, nrows, oy0, p.sh, ox_base, col_lo, col_hi,
                    [&](int c, int i, int cc) { return s_o[(c * QY + i) * ld + cc + (pad ? (cc >> 5) : 0)]; });
  }
}

static int64_t align16(int64_t b) { return (b + 15) / 16 * 16; }

// Fills cfg and the warp count and returns the dynamic shared-memory bytes,
// or 0 if direct2_fwd_kernel does not take the problem (direct_fwd_kernel runs then).
// want_vec: the output allows store_rows_vec (NCHW, unit column stride); it is used with
// odd sw (even sw stages padded columns, store_tile reads those).
static int64_t direct2_config(const Problem& p, int kC, int py, int64_t acc_bytes,
                              int64_t t_bytes, bool want_vec, D2Cfg& cfg, int& warps) {
  int64_t max_nq = 0;
  if (!set_tile_phases(p, cfg, max_nq)) return 0;
  const int64_t sw = p.sw;
  cfg.pad = (sw % 2 == 0) ? 1 : 0;
  cfg.vec = want_vec && !cfg.pad ? 1 : 0;
  const int64_t ke = 16 / t_bytes;  // elements per 16-byte chunk
  // vec: room for the 0..ke-1 shift and the last chunk (staging index ke*k < ld)
  cfg.ld = int(cfg.pad ? 33 * sw : cfg.vec ? (32 * sw + 2 * ke + ke - 1) / ke * ke : 32 * sw);
  cfg.nchk = rows_vec_chunks(sw, t_bytes);
  cfg.m_chk = div_magic_m(cfg.nchk);
  for (int r = 1; r <= 16; ++r) cfg.m_rows[r] = div_magic_m(r);
  cfg.w_bytes = int(align16((p.cin_g() * p.kh * p.kw * kC + kC) * acc_bytes));
  const int64_t row_bytes = int64_t(kC) * cfg.ld * t_bytes;  // staging per tile row
  // Row groups of kPY rows: units (column phase x row group) are dealt to the
  // warps, one per warp up to 8 warps. At least 2 row groups (measured: k=3, sw = 5,
  // 64 outputs per group, 0.76 -> 0.62 ms), at least 4 units when sw is small.
  int64_t rg = (4 + sw - 1) / sw;
  if (rg < 2) rg = 2;
  const int64_t rg_rows = (max_nq + py - 1) / py;
  if (rg > rg_rows) rg = rg_rows > 0 ? rg_rows : 1;
  const int64_t optin = smem_optin();
  const int64_t budget = kD2SmemBudget < optin ? kD2SmemBudget : optin;
  while (rg > 1 && cfg.w_bytes + rg * py * row_bytes > budget) --rg;
  const int64_t smem = cfg.w_bytes + rg * py * row_bytes;
  if (smem > kD2SmemMax || smem > optin) return 0;
  const int64_t units = sw * rg;
  warps = int(units < kD2MaxWarps ? units : kD2MaxWarps);
  if (!set_tile_grid(p, rg * py, max_nq, kC, cfg, cfg.ncob, cfg.ngc, cfg.nz)) return 0;
  if (cfg.qy_tile > 16) cfg.vec = 0;  // m_rows covers 1..16 rows
  return smem;
}

template <typename T, int kC, int kPY>
static cudaError_t run_v2(const DirectParams& prm, cudaStream_t st, bool& launched) {
  launched = false;
  const Problem& p = prm.p;
  using Acc = typename AccOf<T>::type;
  D2Cfg cfg;
  int warps = 0;
  // store_rows_vec: unit column stride, 32-bit offsets for up to 16 tile rows
  const bool want_vec = prm.out.sw == 1 && rows_vec_offsets_fit(prm.out, p, kC, 16);
  const int64_t smem = direct2_config(p, kC, kPY, sizeof(Acc), sizeof(T), want_vec, cfg, warps);
  if (smem == 0) return cudaSuccess;
  auto kern = direct2_fwd_kernel<T, kC, kPY>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  launched = true;
  kern<<<direct_grid(p, cfg, cfg.ngc), 32 * warps, size_t(smem), st>>>(prm, cfg);
  return cudaGetLastError();
}

// Channels per thread: 4 or 8 for narrow groups, else 16; 2 rows per thread (measured
// with 8 channels per group against 8 channels x 4 rows and 8 x 2: 0.81 vs 0.98 / 1.01 ms).
template <typename T>
static cudaError_t run_v2_any(const DirectParams& prm, cudaStream_t st, bool& launched) {
  const int64_t cog = prm.p.cout_g();
  if (cog <= 4) return run_v2<T, 4, 2>(prm, st, launched);
  if (cog <= 8) return run_v2<T, 8, 2>(prm, st, launched);
  return run_v2<T, 16, 2>(prm, st, launched);
}

// -------------------------------------------------------- direct_fwd_kernel
constexpr int kDirectThreads = 128;
constexpr int kDirectRows = 8;  // output rows per block: the staged weights serve 8x128 pixels

// kCOB output channels per thread: 16, or 64 when a group has more than 32, so
// that each gathered input value serves more outputs (fewer re-reads of x).
template <typename T, int kCOB>
__global__ void __launch_bounds__(kDirectThreads) direct_fwd_kernel(const DirectParams prm) {
  using Acc = typename AccOf<T>::type;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* sw = reinterpret_cast<Acc*>(smem_raw);  // [Cig][kh][kw][kCOB]

  const Problem& p = prm.p;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g();
  const int64_t ncob = (Cog + kCOB - 1) / kCOB;
  const int64_t ntx = (p.Wo + kDirectThreads - 1) / kDirectThreads;
  const int64_t oy_begin = (blockIdx.x / ntx) * kDirectRows;
  const int64_t oy_end = oy_begin + kDirectRows < p.Ho ? oy_begin + kDirectRows : p.Ho;
  const int64_t ox = (blockIdx.x % ntx) * kDirectThreads + threadIdx.x;
  const int64_t kk = p.kh * p.kw;
  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  const T* __restrict__ bias = static_cast<const T*>(prm.bias);
  T* __restrict__ out = static_cast<T*>(prm.out.ptr);

  // Column phase: per thread, the same for every row of the block.
  const int64_t rx = (ox + p.pw) % p.sw, Qx = (ox + p.pw) / p.sw;
  const PhaseDim dx = make_phase_dim(rx, p.sw, p.pw, p.dw, p.kw, p.Wo);

  // Row phases of the block's rows, computed once (uniform over the block).
  struct RowInfo { int64_t Qy, k0, kstep, ntap, koff0, koff_step; };
  __shared__ RowInfo rows[kDirectRows];
  if (threadIdx.x < kDirectRows) {
    const int64_t oy = oy_begin + threadIdx.x;
    const int64_t ry = (oy + p.ph) % p.sh;
    const PhaseDim d = make_phase_dim(ry, p.sh, p.ph, p.dh, p.kh, p.Ho);
    rows[threadIdx.x] = RowInfo{(oy + p.ph) / p.sh, d.k0, d.kstep, d.ntap, d.koff0, d.koff_step};
  }

  const int64_t nz = p.N * p.groups * ncob;
  for (int64_t z = blockIdx.y; z < nz; z += gridDim.y) {
    const int64_t cob = z % ncob;
    const int64_t g = (z / ncob) % p.groups;
    const int64_t n = z / (ncob * p.groups);
    const int64_t co0 = cob * kCOB;
    __syncthreads();  // previous iteration's readers are done with sw
    for (int64_t i = threadIdx.x; i < Cig * kk * kCOB; i += kDirectThreads) {
      const int64_t co = i % kCOB, t = (i / kCOB) % kk, ci = i / (kCOB * kk);
      sw[i] = (co0 + co < Cog) ? Cvt<T>::to_acc(w[((g * Cig + ci) * Cog + co0 + co) * kk + t])
                               : Acc(0);
    }
    __syncthreads();
    if (ox >= p.Wo) continue;
    const T* xn = x + n * prm.x.sn + g * Cig * prm.x.sc;
    for (int64_t oy = oy_begin; oy < oy_end; ++oy) {
      const RowInfo dy = rows[oy - oy_begin];
      const int64_t Qy = dy.Qy;
      Acc acc[kCOB];
#pragma unroll
      for (int c = 0; c < kCOB; ++c) acc[c] = Acc(0);
      for (int64_t jy = 0; jy < dy.ntap; ++jy) {
        const int64_t iy = Qy - dy.koff0 - jy * dy.koff_step;
        if (iy < 0) break;  // iy decreases with jy
        if (iy >= p.H) continue;
        const int64_t ky = dy.k0 + jy * dy.kstep;
        for (int64_t jx = 0; jx < dx.ntap; ++jx) {
          const int64_t ix = Qx - dx.koff0 - jx * dx.koff_step;
          if (ix < 0) break;
          if (ix >= p.W) continue;
          const int64_t kx = dx.k0 + jx * dx.kstep;
          const T* xp = xn + iy * prm.x.sh + ix * prm.x.sw;
          const Acc* wp = sw + (ky * p.kw + kx) * kCOB;
          const int cig = int(Cig);
          int ci = 0;
          for (; ci + 4 <= cig; ci += 4) {  // four loads in flight before their use
            Acc xv[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) xv[u] = Cvt<T>::to_acc(xp[(ci + u) * prm.x.sc]);
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const Acc* wr = wp + (ci + u) * kk * kCOB;
#pragma unroll
              for (int c = 0; c < kCOB; ++c) acc[c] = fma(xv[u], wr[c], acc[c]);
            }
          }
          for (; ci < cig; ++ci) {
            const Acc xv = Cvt<T>::to_acc(xp[ci * prm.x.sc]);
            const Acc* wr = wp + ci * kk * kCOB;
#pragma unroll
            for (int c = 0; c < kCOB; ++c) acc[c] = fma(xv, wr[c], acc[c]);
          }
        }
      }
      T* op = out + n * prm.out.sn + oy * prm.out.sh + ox * prm.out.sw;
#pragma unroll
      for (int c = 0; c < kCOB; ++c) {
        const int64_t co = g * Cog + co0 + c;
        if (co0 + c < Cog) {
          Acc v = acc[c];
          if (bias) v += Cvt<T>::to_acc(bias[co]);
          __stcs(op + co * prm.out.sc, Cvt<T>::from_acc(v));  // streaming: keep x in L2
        }
      }
    }
  }
}

static int cob_for(const Problem& p) { return p.cout_g() > 32 ? 64 : 16; }

static int64_t direct_smem_bytes(const Problem& p, DType dt) {
  return p.cin_g() * p.kh * p.kw * cob_for(p) * (dt == DType::kDouble ? 8 : 4);
}

bool direct_forward_fits(const Problem& p, DType dt) {
  const int64_t bytes = direct_smem_bytes(p, dt);
  return bytes <= 160 * 1024 && bytes <= smem_optin();
}

template <typename T, int kCOB>
static cudaError_t run_cob(const DirectParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t gx = ((p.Wo + kDirectThreads - 1) / kDirectThreads) *
                     ((p.Ho + kDirectRows - 1) / kDirectRows);
  const int64_t nz = p.N * p.groups * ((p.cout_g() + kCOB - 1) / kCOB);
  if (gx > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  const unsigned gy = unsigned(nz < 65535 ? nz : 65535);
  const size_t smem = size_t(p.cin_g() * p.kh * p.kw * kCOB) * sizeof(typename AccOf<T>::type);
  auto kern = direct_fwd_kernel<T, kCOB>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  kern<<<dim3(unsigned(gx), gy), kDirectThreads, smem, st>>>(prm);
  return cudaGetLastError();
}

template <typename T>
static cudaError_t run(const DirectParams& prm, cudaStream_t st) {
  bool launched = false;
  const cudaError_t e = run_v2_any<T>(prm, st, launched);
  if (launched || e != cudaSuccess) return e;
  return cob_for(prm.p) == 64 ? run_cob<T, 64>(prm, st) : run_cob<T, 16>(prm, st);
}

cudaError_t launch_direct_forward(const DirectParams& prm, DType dt, cudaStream_t st) {
  bool launched = false;
  const cudaError_t e = launch_direct_tc(prm, dt, st, launched);
  if (launched || e != cudaSuccess) return e;
  return DTYPE_SWITCH(dt, T, [&] { return run<T>(prm, st); });
}

}  // namespace cuda
}  // namespace convt2d
