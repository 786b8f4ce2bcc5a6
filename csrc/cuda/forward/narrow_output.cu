// Narrow forward: few output channels per group (1..8) and many reduced channels
// per output (Cin/groups x taps), e.g. a GAN generator's RGB layer (64 -> 3, k4 s2).
// The direct kernels tile 16+ output channels (13 of 16 wasted for RGB) and the
// implicit GEMM 64-wide N tiles; this one computes exactly what the layer needs on
// CUDA cores (fp32 FMA for every dtype, so fp32 is IEEE-exact with or without TF32).
//
// Tile: one block owns one stride phase (ry, rx), kWp x kPY rows of that phase by 32
// consecutive columns (Q), for all Cout/groups (CO = 1..4, or 8 for 5..8) channels
// of one (n, group) per z step. Its 8 warps are kWp pixel warps x kWk = 8 / kWp
// channel slices: warp (wp, wk) computes rows wp*kPY .. +kPY of the tile, lane q column
// Q = q, over the input channels of slice wk (the K split that keeps the block count
// up when there are few pixels per image). Partial sums meet in shared memory.
// Inner loop (per tap column jx, chunk of NTY tap rows, input channel ci): the kPY +
// NTY - 1 input rows the chunk reads are loaded once (coalesced along the row, x with
// unit W stride) and serve NTY x kPY x CO FMAs; the CO weights of a tap are one
// warp-uniform (broadcast) shared load. Taps are only those reaching the phase
// (problem.h), so there is no per-tap modulo; row tap offsets must step by one
// (koff_step_y == 1: dilation dividing the stride), the host checks.
#include <cstdlib>
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include "cuda/common/direct_tile.cuh"

namespace convt2d {
namespace cuda {

constexpr int kNwThreads = 256;
constexpr int kNwWarps = kNwThreads / 32;
constexpr int kNwPY = 8;                    // rows per pixel warp
constexpr int64_t kNwMaxW = 64 * 1024;      // staged weights (floats of one phase)

// The phase tables (py, px, kstep_*, koffs_*) are the direct kernels' (DTileGrid,
// set_tile_phases); its tile-grid fields are unused here.
struct NwCfg : DTileGrid {
  int wp = 8;               // pixel warps per block; kWk = 8 / wp channel slices
  int cps = 0;              // input channels per slice
  int nqx_t = 0, nqy_t = 0; // column tiles (32 Q) and row tiles (wp*kPY rows) per phase
  int ntx_max = 0;          // tap columns of the widest phase (s_w tap pitch)
  int w_floats = 0;         // staged weight floats (s_w size)
  int nz = 0;               // N * groups
};

// The CO weights of one (tap, input channel), stored with pitch CP (CO = 3: CP = 4, one
// 16-byte load).
template <int CO, int CP>
__device__ __forceinline__ void lds_w(float (&w)[CO], const float* p) {
  if constexpr (CP == 1) {
    w[0] = p[0];
  } else if constexpr (CP == 2) {
    const float2 v = *reinterpret_cast<const float2*>(p);
    w[0] = v.x; w[1] = v.y;
  } else {
#pragma unroll
    for (int j = 0; j < CP / 4; ++j) {
      const float4 v = reinterpret_cast<const float4*>(p)[j];
      const float t[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * j + e < CO) w[4 * j + e] = t[e];
    }
  }
}

// One x element as float: plain (ld.global.nc), or predicated on ok (0 when not ok; the
// address is never read then), without a branch around the load.
__device__ __forceinline__ float ldx(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ldx(const __half* p) { return __half2float(__ldg(p)); }
__device__ __forceinline__ float ldx(const __nv_bfloat16* p) { return __bfloat162float(__ldg(p)); }
__device__ __forceinline__ float ldx_if(const float* p, unsigned ok) {
  float v;
  asm("{\n .reg .pred q;\n setp.ne.u32 q, %2, 0;\n mov.b32 %0, 0;\n"
      " @q ld.global.nc.f32 %0, [%1];\n}" : "=f"(v) : "l"(p), "r"(ok));
  return v;
}
__device__ __forceinline__ unsigned short ldx16_if(const void* p, unsigned ok) {
  unsigned short v;
  asm("{\n .reg .pred q;\n setp.ne.u32 q, %2, 0;\n mov.b16 %0, 0;\n"
      " @q ld.global.nc.b16 %0, [%1];\n}" : "=h"(v) : "l"(p), "r"(ok));
  return v;
}
__device__ __forceinline__ float ldx_if(const __half* p, unsigned ok) {
  return __half2float(__ushort_as_half(ldx16_if(p, ok)));
}
__device__ __forceinline__ float ldx_if(const __nv_bfloat16* p, unsigned ok) {
  return __bfloat162float(__ushort_as_bfloat16(ldx16_if(p, ok)));
}

template <typename T, int CO, int NTY, int kMinB>
__global__ void __launch_bounds__(kNwThreads, kMinB)
narrow_fwd_kernel(const __grid_constant__ DirectParams prm, const __grid_constant__ NwCfg cfg) {
  constexpr int kWin = kNwPY + NTY - 1;  // input rows one tap-row chunk reads
  constexpr int CP = CO == 3 ? 4 : CO;   // weight pitch in s_w
  extern __shared__ __align__(16) float nw_smem[];
  const Problem& p = prm.p;
  const int Cig = int(p.cin_g());
  const int Cog = int(p.cout_g());
  const int sw = int(p.sw);
  const int wp = cfg.wp, wk_n = kNwWarps / wp;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wpix = warp % wp, wk = warp / wp;

  int b = int(blockIdx.x);
  const int tqx = b % cfg.nqx_t;
  b /= cfg.nqx_t;
  const int tqy = b % cfg.nqy_t;
  b /= cfg.nqy_t;
  const int rx = b % sw, ry = b / sw;
  const D2Phase dy = cfg.py[ry], dx = cfg.px[rx];
  const int rows_tile = wp * kNwPY;
  if (int64_t(tqy) * rows_tile >= dy.nq || int64_t(tqx) * 32 >= dx.nq) return;  // block-uniform

  float* s_w = nw_smem;                    // [tap = jy*ntx_max + jx][Cig][CP]
  float* s_b = s_w + cfg.w_floats;         // [CO]
  float* s_red = s_b + 8;                  // [wk][wp][kPY][CO][32]

  const int64_t qtop = dy.q0 + int64_t(tqy) * rows_tile;  // tile row 0 (phase index)
  const int64_t qy0 = qtop + wpix * kNwPY;                 // this warp's first row
  const int64_t qx = dx.q0 + int64_t(tqx) * 32 + lane;
  const bool col_ok = qx < dx.q0 + dx.nq;
  const int c_lo = wk * cfg.cps;
  const int c_hi = c_lo + cfg.cps < Cig ? c_lo + cfg.cps : Cig;

  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  const T* __restrict__ bias = static_cast<const T*>(prm.bias);
  T* __restrict__ out = static_cast<T*>(prm.out.ptr);
  const int64_t xsc = prm.x.sc, xsh = prm.x.sh, xsw = prm.x.sw;
  const int ntx = dx.ntap, nty = dy.ntap;
  const int kk = int(p.kh * p.kw);

  int staged = -1;
  for (int z = blockIdx.y; z < cfg.nz; z += gridDim.y) {
    const int g = z % int(p.groups), n = z / int(p.groups);
    if (g != staged) {
      __syncthreads();  // previous readers of s_w
      staged = g;
      // s_w[(jy*ntx_max + jx)*Cig + ci][c] = w[g*Cig + ci][c][ky][kx] (c < Cog, else 0)
      const int per_tap = Cig * CP;
      const int total = nty * cfg.ntx_max * per_tap;
      for (int i = tid; i < total; i += kNwThreads) {
        const int c = i % CP, r = i / CP;
        const int ci = r % Cig, tap = r / Cig;
        const int jy = tap / cfg.ntx_max, jx = tap % cfg.ntx_max;
        float v = 0.f;
        if (c < Cog && jx < ntx) {
          const int ky = dy.k0 + jy * cfg.kstep_y, kx = dx.k0 + jx * cfg.kstep_x;
          v = Cvt<T>::to_acc(w[((int64_t(g) * Cig + ci) * Cog + c) * kk + ky * p.kw + kx]);
        }
        s_w[i] = v;
      }
      if (tid < 8)
        s_b[tid] = (bias != nullptr && tid < Cog) ? Cvt<T>::to_acc(bias[int64_t(g) * Cog + tid])
                                                   : 0.f;
      __syncthreads();
    }

    float acc[kNwPY][CO];
#pragma unroll
    for (int r = 0; r < kNwPY; ++r)
#pragma unroll
      for (int c = 0; c < CO; ++c) acc[r][c] = 0.f;

    const T* xg = x + int64_t(n) * prm.x.sn + int64_t(g) * Cig * xsc;
    for (int jy0 = 0; jy0 < nty; jy0 += NTY) {
      // tap row jy reads input row qy0 + r - koff0 - jy for output row r: window row
      // index r + (NTY - 1) - (jy - jy0), window row 0 at ybase.
      const int64_t ybase = qy0 - dy.koff0 - jy0 - (NTY - 1);
      unsigned rmask = 0;
#pragma unroll
      for (int i = 0; i < kWin; ++i)
        rmask |= (ybase + i >= 0 && ybase + i < p.H) ? (1u << i) : 0u;
      // Window row offsets in elements (32-bit: the host checks that one (n, group) slab
      // of x spans less than 2^31 elements).
      int ro[kWin];
#pragma unroll
      for (int i = 0; i < kWin; ++i) ro[i] = int(ybase + i) * int(xsh);
      // ci outer, tap column inner: the columns of one channel's window rows are re-read
      // from L1 right away (jx outer measured an 11.8% L1 hit rate on the RGB layer).
      const int ix0 = int(qx - dx.koff0);  // 32-bit: the launcher bounds W + tap reach
      const int koffs_x = int(cfg.koffs_x), Wi = int(p.W);
      constexpr unsigned kFull = (1u << kWin) - 1u;
      const float* wc = s_w + (jy0 * cfg.ntx_max * Cig + c_lo) * CP;
#pragma unroll 1
      for (int ci = c_lo; ci < c_hi; ++ci, wc += CP) {
        const T* xc = xg + ci * int(xsc);
#pragma unroll 1
        for (int jx = 0; jx < ntx; ++jx) {
          const int ix = ix0 - jx * koffs_x;
          const bool xok = col_ok && unsigned(ix) < unsigned(Wi);
          // rows outside [0, H) (and every row of a column outside [0, W)) are never read
          const T* xp = xc + (xok ? ix * int(xsw) : 0);
          float xv[kWin];
          if (xok && rmask == kFull) {  // interior: plain loads
#pragma unroll
            for (int i = 0; i < kWin; ++i) xv[i] = ldx(xp + ro[i]);
          } else {
            const unsigned m = xok ? rmask : 0u;
#pragma unroll
            for (int i = 0; i < kWin; ++i) xv[i] = ldx_if(xp + ro[i], m & (1u << i));
          }
          const float* wj = wc + jx * Cig * CP;
#pragma unroll
          for (int j = 0; j < NTY; ++j) {
            if (jy0 + j < nty) {  // warp-uniform
              float wv[CO];
              lds_w<CO, CP>(wv, wj + j * cfg.ntx_max * Cig * CP);
#pragma unroll
              for (int r = 0; r < kNwPY; ++r)
#pragma unroll
                for (int c = 0; c < CO; ++c)
                  acc[r][c] = fmaf(xv[r + NTY - 1 - j], wv[c], acc[r][c]);
            }
          }
        }
      }
    }

    // K-split partial sums meet in shared memory; every thread then finishes items
    // (wpix, r, c, lane) of the tile, lane fastest (consecutive Q per warp store).
#pragma unroll
    for (int r = 0; r < kNwPY; ++r)
#pragma unroll
      for (int c = 0; c < CO; ++c)
        s_red[(((wk * wp + wpix) * kNwPY + r) * CO + c) * 32 + lane] = acc[r][c];
    __syncthreads();
    const int items = wp * kNwPY * CO * 32;
    T* on = out + int64_t(n) * prm.out.sn + int64_t(g) * Cog * prm.out.sc;
    for (int it = tid; it < items; it += kNwThreads) {
      const int q = it & 31, rest = it >> 5;
      const int c = rest % CO, pr = rest / CO;  // pr = wpix*kPY + r
      const int64_t qyy = qtop + pr;
      const int64_t qxx = dx.q0 + int64_t(tqx) * 32 + q;
      if (c >= Cog || qyy >= dy.q0 + dy.nq || qxx >= dx.q0 + dx.nq) continue;
      float v = s_b[c];
      for (int k = 0; k < wk_n; ++k) v += s_red[(k * wp * kNwPY * CO + rest) * 32 + q];
      const int64_t oy = qyy * p.sh + ry - p.ph, ox = qxx * p.sw + rx - p.pw;
      on[c * prm.out.sc + oy * prm.out.sh + ox * prm.out.sw] = Cvt<T>::from_acc(v);
    }
    __syncthreads();  // s_red reused by the next z step
  }
}

// The kernel's conditions and launch shape for p; false when it does not take it.
// wp_forced: Variant::narrow_wp (1, 2, 4, 8 pixel warps; else the heuristic's).
static bool nw_config(const Problem& p, int num_sms, NwCfg& cfg, int& co, int& nty_chunk,
                      int64_t& smem, dim3& grid, int wp_forced = 0) {
  const int64_t cog = p.cout_g();
  if (cog < 1 || cog > 8) return false;
  // 32-bit element offsets within one (n, group) slab of x (the launcher checks the
  // actual strides).
  if (p.cin_g() * (p.H + 1) * (p.W + 1) >= (int64_t(1) << 31)) return false;
  co = cog <= 4 ? int(cog) : 8;
  const int64_t cp = co == 3 ? 4 : co;  // weight pitch
  int64_t max_nqy = 0;
  if (!set_tile_phases(p, cfg, max_nqy)) return false;  // stride above kDirectMaxS
  if (cfg.koffs_y != 1) return false;  // row tap offsets must step by one
  int64_t max_nqx = 0, nty_max = 0, ntx_max = 0;
  for (int64_t r = 0; r < p.sh; ++r) nty_max = cfg.py[r].ntap > nty_max ? cfg.py[r].ntap : nty_max;
  for (int64_t r = 0; r < p.sw; ++r) {
    max_nqx = cfg.px[r].nq > max_nqx ? cfg.px[r].nq : max_nqx;
    ntx_max = cfg.px[r].ntap > ntx_max ? cfg.px[r].ntap : ntx_max;
  }
  nty_chunk = nty_max <= 1 ? 1 : nty_max == 2 ? 2 : 4;
  cfg.ntx_max = int(ntx_max > 0 ? ntx_max : 1);
  const int64_t w_floats = (nty_max > 0 ? nty_max : 1) * cfg.ntx_max * p.cin_g() * cp;
  if (w_floats * 4 > kNwMaxW) return false;
  cfg.w_floats = int((w_floats + 3) / 4 * 4);
  cfg.nqx_t = int((max_nqx + 31) / 32);
  const int64_t nz = p.N * p.groups;
  if (nz > 0x7fffffffLL - 65535) return false;
  cfg.nz = int(nz);
  // Pixel warps (the rest split K): halve from 8 until the grid has >= 6 blocks per SM,
  // but stop before slices drop below 16 input channels once it has >= 1.5 per SM
  // (measured on nine off-suite shapes).
  auto row_tiles = [&](int wp) { return (max_nqy + wp * kNwPY - 1) / (wp * kNwPY); };
  auto blocks = [&](int wp) { return p.sh * p.sw * row_tiles(wp) * cfg.nqx_t * nz; };
  int wp = 8;
  while (wp > 1) {
    const int64_t b = blocks(wp);
    if (b >= int64_t(6) * num_sms) break;
    const int64_t next_cps = (p.cin_g() + kNwWarps / (wp / 2) - 1) / (kNwWarps / (wp / 2));
    if (next_cps < 16 && 2 * b >= int64_t(3) * num_sms) break;
    if (p.cin_g() < kNwWarps / (wp / 2)) break;  // no empty slices
    wp /= 2;
  }
  if (wp_forced == 1 || wp_forced == 2 || wp_forced == 4 || wp_forced == 8) wp = wp_forced;
  cfg.wp = wp;
  const int wk = kNwWarps / wp;
  cfg.cps = int((p.cin_g() + wk - 1) / wk);
  const int64_t nqy_t = row_tiles(wp);
  const int64_t gx = p.sh * p.sw * nqy_t * cfg.nqx_t;
  if (gx > 0x7fffffffLL) return false;
  cfg.nqy_t = int(nqy_t);
  smem = (int64_t(cfg.w_floats) + 8 + int64_t(kNwWarps) * kNwPY * co * 32) * 4;
  if (smem > smem_optin()) return false;
  grid = dim3(unsigned(gx), unsigned(nz < 65535 ? nz : 65535));
  return true;
}

// (declared in common/kernels.h)
int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 108;
  return n;
}

bool narrow_forward_supported(const Problem& p, DType dt) {
  if (dt != DType::kFloat && dt != DType::kHalf && dt != DType::kBFloat16) return false;
  NwCfg cfg;
  int co = 0, nty = 0;
  int64_t smem = 0;
  dim3 grid;
  return nw_config(p, sm_count(), cfg, co, nty, smem, grid);
}

template <typename T, int CO, int NTY>
static cudaError_t run_nw(const DirectParams& prm, const NwCfg& cfg, int64_t smem, dim3 grid,
                          cudaStream_t st) {
  // Registers capped for 3 blocks per SM (80; CO = 4 spills ~40 bytes there, yet 2 blocks
  // of 122 registers measured 3-10% slower on the RGB shapes), 2 for CO = 8.
  auto kern = narrow_fwd_kernel<T, CO, NTY, CO == 8 ? 2 : 3>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  kern<<<grid, kNwThreads, size_t(smem), st>>>(prm, cfg);
  return cudaGetLastError();
}

template <typename T, int CO>
static cudaError_t run_nw_co(const DirectParams& prm, const NwCfg& cfg, int nty, int64_t smem,
                             dim3 grid, cudaStream_t st) {
  if (nty == 1) return run_nw<T, CO, 1>(prm, cfg, smem, grid, st);
  if (nty == 2) return run_nw<T, CO, 2>(prm, cfg, smem, grid, st);
  return run_nw<T, CO, 4>(prm, cfg, smem, grid, st);
}

template <typename T>
static cudaError_t run_nw_t(const DirectParams& prm, const NwCfg& cfg, int co, int nty,
                            int64_t smem, dim3 grid, cudaStream_t st) {
  switch (co) {
    case 1: return run_nw_co<T, 1>(prm, cfg, nty, smem, grid, st);
    case 2: return run_nw_co<T, 2>(prm, cfg, nty, smem, grid, st);
    case 3: return run_nw_co<T, 3>(prm, cfg, nty, smem, grid, st);
    case 4: return run_nw_co<T, 4>(prm, cfg, nty, smem, grid, st);
    default: return run_nw_co<T, 8>(prm, cfg, nty, smem, grid, st);
  }
}

cudaError_t launch_narrow_forward(const DirectParams& prm, DType dt, cudaStream_t st,
                                  bool& launched) {
  launched = false;
  if (dt != DType::kFloat && dt != DType::kHalf && dt != DType::kBFloat16) return cudaSuccess;
  NwCfg cfg;
  int co = 0, nty = 0;
  int64_t smem = 0;
  dim3 grid;
  if (!nw_config(prm.p, sm_count(), cfg, co, nty, smem, grid, prm.var.narrow_wp))
    return cudaSuccess;
  // The kernel's 32-bit offsets within one (n, group) slab of x, with these strides (rows
  // and columns a tap reach beyond the image are formed, never read).
  const Problem& p = prm.p;
  auto mag = [](int64_t v) { return v < 0 ? -v : v; };
  const int64_t span = p.cin_g() * mag(prm.x.sc) + (p.H + p.kh * p.dh + 2 * kNwPY) * mag(prm.x.sh) +
                       (p.W + p.kw * p.dw + 32) * mag(prm.x.sw);
  if (span >= (int64_t(1) << 31)) return cudaSuccess;
  launched = true;
  if (dt == DType::kFloat) return run_nw_t<float>(prm, cfg, co, nty, smem, grid, st);
  if (dt == DType::kHalf) return run_nw_t<__half>(prm, cfg, co, nty, smem, grid, st);
  return run_nw_t<__nv_bfloat16>(prm, cfg, co, nty, smem, grid, st);
}

}  // namespace cuda
}  // namespace convt2d
