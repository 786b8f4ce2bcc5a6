// Direct forward on tensor cores for bf16 / fp16 (mma.sync m16n8k16) and for fp32
// with TF32 allowed (m16n8k8 tf32; fp32 accumulate throughout): the shapes the glue
// routes to the direct kernel (few reduced channels per output: one tap per stride phase,
// few channels per group). The CUDA-core kernel (forward/direct_cuda_core.cu) spends ~80% of
// its issue slots on gathers and address arithmetic around the FMAs (ncu); here the
// activation is staged once per block in shared memory and the products run on tensor cores.
//
// A K item is one 16-byte chunk of kCh = 16 / sizeof(T) channels (8 for 16-bit, 4
// for fp32) and one mma k-step takes two items, so the ldmatrix addressing is the
// same for both: an 8x8 b16 matrix is 8 rows x 4 tf32 values, and lane l receives
// (row l/4, value l%4), exactly the tf32 fragment element (g, t). fp32 operands go
// to the tensor cores as their bits (the low 13 mantissa bits ignored, as
// implicit_gemm/igemm_tensor_core.cu).
//
// Tile (as direct2_fwd_kernel): one block owns QY rows of row phase ry by
// 32*sw consecutive output columns, for kC = 8*kNT output channels of one
// (n, group) per z step. Per z step:
//   1. The block stages the x window its tile reads, channels innermost:
//      s_x[row][col][ci] (ci padded to kCh-channel chunks, pixel pitch an odd
//      multiple of 16 bytes so ldmatrix rows never share banks; zeros outside
//      the image), and (when (g, channel block) changes) the weights, packed
//      by the glue as [G][Cout/groups / kC][tap][chunk][kC][kCh ci] (zero padded),
//      by 16-byte copies.
//   2. Warp unit = (column phase rx, tile row r): a 32 x kC x K GEMM, rows =
//      the 32 columns Q of the phase, K = the taps reaching (ry, rx) x chunks.
//      An mma k-step is two K items (tap, chunk); an item table per block gives
//      each item's byte offset into s_x (row shift by tap row, column shift
//      by tap column) and s_w, so each lane's ldmatrix address is a base plus
//      one table entry. An odd item count is padded with an item that reads
//      zeros on both sides (not x * 0: x may hold inf).
//   3. The accumulators (+ bias) go to the staging tile s_o[kC][QY][ld] as in
//      direct2, and the block writes whole output row segments (store_rows_vec
//      for NCHW outputs, else store_tile).
//   Column phases no tap reaches stage the bias; row phases no tap reaches are
//   written directly.
#include <algorithm>
#include <cstdlib>
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/direct_tile.cuh"

namespace convt2d {
namespace cuda {

constexpr int kDtcWarps = 8;
constexpr int kDtcMaxS = kDirectMaxS;  // s_rx rows per column phase
constexpr int kDtcMaxTab = 1024;                // item-table entries
constexpr int64_t kDtcBudget = 113 * 1024;      // two blocks per SM
constexpr int64_t kDtcMaxW = 96 * 1024;         // staged weights

struct DtcCfg : DTileGrid {
  int ld = 0;                  // staging row pitch (multiple of 8, room for the 0..7 shift)
  int nch = 0;                 // 8-channel chunks per tap
  int pix_bytes = 0;           // staged pixel pitch (odd multiple of 16 bytes)
  int cols_in = 0;             // staged columns per row
  int xoff_max = 0;            // largest column offset koff0_x + j*koffs_x of a tap
  // byte offsets into dynamic shared memory
  int w_off = 0, wz_off = 0, b_off = 0, tab_off = 0, rx_off = 0, xz_off = 0, x_off = 0, o_off = 0;
  int ncob = 0, ngc = 0, nz = 0;
  int vec = 1;                 // store_rows_vec where the layout allows
  int cs = 1;                  // store_rows_vec with streaming stores
  int nchk = 0;                // store_rows_vec: whole chunks per line
  uint64_t m_chk = 0;          // div_magic multipliers: by nchk, by 1..8 rows
  uint64_t m_rows[9] = {};
};

template <typename T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  const uint16_t l = *reinterpret_cast<const uint16_t*>(&lo);
  const uint16_t h = *reinterpret_cast<const uint16_t*>(&hi);
  return uint32_t(l) | (uint32_t(h) << 16);
}
// One staged 16-byte chunk: kCh = 16 / sizeof(T) channel values as four 32-bit words.
template <typename T>
__device__ __forceinline__ void pack_chunk(const T (&v)[16 / sizeof(T)], uint32_t (&pk)[4]) {
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) pk[e] = __float_as_uint(v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) pk[e] = pack2<T>(v[2 * e], v[2 * e + 1]);
  }
}

template <typename T, int kNT, int kMinBlocks>
__global__ void __launch_bounds__(32 * kDtcWarps, kMinBlocks)
direct_tc_kernel(const __grid_constant__ DirectParams prm, const __grid_constant__ DtcCfg cfg) {
  constexpr int kC = 8 * kNT;
  constexpr int kCh = 16 / int(sizeof(T));  // channels per 16-byte chunk (K item)
  constexpr int kEm = kCh - 1;               // staging shift mask (elements per chunk - 1)
  static_assert(kNT % 2 == 0, "B fragments are loaded two n-tiles at a time");
  extern __shared__ __align__(128) unsigned char smem[];
  const Problem& p = prm.p;
  const int Cig = int(p.cin_g());
  const int64_t Cog = p.cout_g();
  const int kk = int(p.kh * p.kw);
  const int sw = int(p.sw);
  const int QY = cfg.qy_tile;
  const int nch = cfg.nch;
  const int pix_bytes = cfg.pix_bytes;
  const int row_bytes = cfg.cols_in * pix_bytes;
  T* s_w = reinterpret_cast<T*>(smem + cfg.w_off);
  float* s_b = reinterpret_cast<float*>(smem + cfg.b_off);
  int2* s_tab = reinterpret_cast<int2*>(smem + cfg.tab_off);
  int* s_rx = reinterpret_cast<int*>(smem + cfg.rx_off);  // [first entry][k16 steps] per rx
  T* s_o = reinterpret_cast<T*>(smem + cfg.o_off);
  const uint32_t sbase = uint32_t(__cvta_generic_to_shared(smem));

  const int nthr = blockDim.x, nwarps = nthr >> 5;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  const int bx = int(blockIdx.x);
  const int tx = bx % cfg.ntx;
  const int rest = bx / cfg.ntx;
  const int ty = rest % cfg.nty;
  const int ry = rest / cfg.nty;
  const D2Phase dy = cfg.py[ry];
  const int64_t qy0 = dy.q0 + int64_t(ty) * QY;
  const int64_t rows_left = dy.q0 + dy.nq - qy0;
  if (rows_left <= 0) return;
  const int nrows = rows_left < QY ? int(rows_left) : QY;
  const int64_t oy0 = qy0 * p.sh + ry - p.ph;
  const int64_t qx0 = cfg.qx_first + int64_t(tx) * 32;
  const int64_t ox_base = qx0 * p.sw - p.pw;
  const int tw = 32 * sw;
  const int col_lo = ox_base < 0 ? int(-ox_base) : 0;
  const int col_hi = p.Wo - ox_base < tw ? int(p.Wo - ox_base) : tw;

  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ wpk = static_cast<const T*>(prm.wpk);
  const T* __restrict__ bias = static_cast<const T*>(prm.bias);
  T* __restrict__ out = static_cast<T*>(prm.out.ptr);
  const bool chan_fast = prm.out.sc == 1 && prm.out.sw != 1;
  const bool vec_rows = cfg.vec && !chan_fast && prm.out.sw == 1;  // 16-byte row stores
  const int ncob = cfg.ncob;

  if (dy.ntap == 0) {  // no tap reaches this row phase: bias (or zero) rows
    for (int z = blockIdx.y; z < cfg.nz; z += gridDim.y) {
      const int gc = z % cfg.ngc, n = z / cfg.ngc;
      const int cob = gc % ncob, g = gc / ncob;
      const int64_t co0 = int64_t(cob) * kC;
      const int nc = Cog - co0 < kC ? int(Cog - co0) : kC;
      T* on = out + n * prm.out.sn + (g * Cog + co0) * prm.out.sc;
      const T* bp = bias ? bias + g * Cog + co0 : nullptr;
      if (vec_rows)
        store_rows_vec<T>(on, prm.out, nc, nrows, QY, oy0, p.sh, ox_base, col_lo, col_hi,
                          nullptr, 0, bp, cfg.nchk, cfg.m_chk, cfg.m_rows[nrows], cfg.cs);
      else
        store_tile<T>(on, prm.out, chan_fast, nc, nrows, oy0, p.sh, ox_base, col_lo, col_hi,
                      [&](int c, int, int) { return bp ? bp[c] : Cvt<T>::zero(); });
    }
    return;
  }

  // Zero regions (the pad item's A rows and B rows) and the item table of this
  // row phase: thread rx < sw fills the entries of column phase rx.
  {
    uint32_t* zw = reinterpret_cast<uint32_t*>(smem + cfg.wz_off);
    for (int i = tid; i < kC * 4; i += nthr) zw[i] = 0u;
    uint32_t* zx = reinterpret_cast<uint32_t*>(smem + cfg.xz_off);
    if (tid < 32) zx[tid] = 0u;
    if (tid < sw) {
      const int rx = tid;
      int e = 0;
      for (int r = 0; r < rx; ++r) {
        const int c = dy.ntap * cfg.px[r].ntap * nch;
        e += c + (c & 1);
      }
      const D2Phase dx = cfg.px[rx];
      const int cnt = dy.ntap * dx.ntap * nch;
      s_rx[rx] = e;
      s_rx[kDtcMaxS + rx] = (cnt + 1) / 2;
      for (int jy = 0; jy < dy.ntap; ++jy) {
        const int ky = dy.k0 + jy * cfg.kstep_y;
        const int rsh = (dy.ntap - 1 - jy) * int(cfg.koffs_y);
        for (int jx = 0; jx < dx.ntap; ++jx) {
          const int kx = dx.k0 + jx * cfg.kstep_x;
          const int csh = cfg.xoff_max - int(dx.koff0 + jx * cfg.koffs_x);
          for (int c8 = 0; c8 < nch; ++c8)
            s_tab[e++] = make_int2(rsh * row_bytes + csh * pix_bytes + c8 * 16,
                                   ((ky * int(p.kw) + kx) * nch + c8) * kC * 16);
        }
      }
      if (cnt & 1) s_tab[e] = make_int2(-1, cfg.wz_off - cfg.w_off);
    }
  }

  const int rows_in = QY + (dy.ntap - 1) * int(cfg.koffs_y);
  const int64_t iy_base = qy0 - dy.koff0 - int64_t(dy.ntap - 1) * cfg.koffs_y;
  const int64_t ix_base = qx0 - cfg.xoff_max;
  const int64_t xsc = prm.x.sc, xsh = prm.x.sh, xsw = prm.x.sw;
  const uint32_t xs = sbase + cfg.x_off;
  const uint32_t ws = sbase + cfg.w_off;
  const int nunits = sw * QY;

  int staged = -1;
  for (int z = blockIdx.y; z < cfg.nz; z += gridDim.y) {
    const int gc = z % cfg.ngc, n = z / cfg.ngc;
    const int cob = gc % ncob, g = gc / ncob;
    const int64_t co0 = int64_t(cob) * kC;
    const int nc = Cog - co0 < kC ? int(Cog - co0) : kC;
    __syncthreads();  // previous iteration's readers are done with s_w / s_x / s_o
    if (gc != staged) {
      staged = gc;
      // s_w = the packed block [kh*kw][nch][kC][8] of (g, cob): 16-byte copies
      const uint4* src = reinterpret_cast<const uint4*>(wpk) + int64_t(gc) * (kk * nch * kC);
      uint4* dst = reinterpret_cast<uint4*>(s_w);
      const int total = kk * nch * kC;
      for (int i0 = tid; i0 < total; i0 += 4 * nthr) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (i0 + k * nthr < total) v[k] = src[i0 + k * nthr];
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (i0 + k * nthr < total) dst[i0 + k * nthr] = v[k];
      }
      for (int c = tid; c < kC; c += nthr)  // a block may have fewer threads than kC
        s_b[c] = (bias != nullptr && c < nc) ? Cvt<T>::to_acc(bias[g * Cog + co0 + c]) : 0.f;
    }
    // s_x[rr][cc][c8*kCh + e] = x[n, g*Cig + c8*kCh + e, iy_base + rr, ix_base + cc]
    {
      const T* xn = x + n * prm.x.sn + int64_t(g) * Cig * xsc;
      const int items = rows_in * cfg.cols_in * nch;
      // item i = (rr * nch + c8) * cols_in + cc, stepped by nthr with carries (no division
      // per item)
      const int cols_in = cfg.cols_in;
      int cc = tid % cols_in, r2 = tid / cols_in;
      int c8 = r2 % nch, rr = r2 / nch;
      const int dcc = nthr % cols_in, dr2 = nthr / cols_in;
      const int dc8 = dr2 % nch, drr = dr2 / nch;
      for (int i = tid; i < items; i += nthr) {
        const int64_t iy = iy_base + rr, ix = ix_base + cc;
        const bool ok = iy >= 0 && iy < p.H && ix >= 0 && ix < p.W;
        const T* src = xn + (ok ? iy * xsh + ix * xsw : 0) + int64_t(c8) * kCh * xsc;
        const int cleft = Cig - c8 * kCh;
        T v[kCh];
#pragma unroll
        for (int e = 0; e < kCh; ++e) v[e] = (ok && e < cleft) ? src[e * xsc] : Cvt<T>::zero();
        uint32_t pk[4];
        pack_chunk<T>(v, pk);
        sts128(xs + uint32_t((rr * cfg.cols_in + cc) * pix_bytes + c8 * 16), pk);
        cc += dcc;
        const int cy = cc >= cols_in;
        if (cy) cc -= cols_in;
        c8 += dc8 + cy;
        rr += drr;
        if (c8 >= nch) { c8 -= nch; ++rr; }
      }
    }
    __syncthreads();

    // Staging shift of line (c, i): (sh0 + c*shc + i*shr) & kEm = the element offset
    // modulo 16 bytes of that output row's column 0 (vector row stores); 0 for other layouts.
    T* on = out + n * prm.out.sn + (g * Cog + co0) * prm.out.sc;
    int sh0 = 0, shc = 0, shr = 0;
    if (vec_rows) {
      sh0 = int((reinterpret_cast<uintptr_t>(on + oy0 * prm.out.sh + ox_base) / sizeof(T)) & kEm);
      shc = int(prm.out.sc & kEm);
      shr = int((p.sh * prm.out.sh) & kEm);
    }

    for (int u = warp; u < nunits; u += nwarps) {
      const int rx = u % sw, r = u / sw;
      if (r >= nrows) continue;  // warp-uniform
      const int steps = s_rx[kDtcMaxS + rx];
      if (steps == 0) {  // no tap reaches this column phase: bias
        const int col = lane * sw + rx;
        for (int c = 0; c < nc; ++c)
          s_o[(c * QY + r) * cfg.ld + ((sh0 + c * shc + r * shr) & kEm) + col] = Cvt<T>::from_acc(s_b[c]);
        continue;
      }
      float acc[2][kNT][4];
      zero_acc(acc);
      const int2* tab = s_tab + s_rx[rx];
      // ldmatrix rows: A lane l -> pixel l & 15 of the m-tile, item half l >> 4;
      // B lane l -> n-tile (l >> 4) of the pair, row l & 7, item half (l >> 3) & 1.
      const uint32_t a_lane = xs + uint32_t(r * row_bytes + (lane & 15) * pix_bytes);
      const uint32_t a_zero = sbase + cfg.xz_off + uint32_t((lane & 7) * 16);
      const uint32_t b_lane = ws + uint32_t(((lane >> 4) * 8 + (lane & 7)) * 16);
      const int ah = lane >> 4, bh = (lane >> 3) & 1;
      for (int s = 0; s < steps; ++s) {
        const int ao = tab[2 * s + ah].x;
        const int bo = tab[2 * s + bh].y;
        const uint32_t a0 = ao >= 0 ? a_lane + uint32_t(ao) : a_zero;
        const uint32_t a1 = ao >= 0 ? a0 + uint32_t(16 * pix_bytes) : a_zero;
        uint32_t fa[2][4];
        ldmatrix_x4(fa[0], a0);
        ldmatrix_x4(fa[1], a1);
        uint32_t fb[kNT][2];
#pragma unroll
        for (int jn = 0; jn < kNT / 2; ++jn) {
          uint32_t q[4];
          ldmatrix_x4(q, b_lane + uint32_t(bo + jn * 256));
          fb[2 * jn][0] = q[0];
          fb[2 * jn][1] = q[1];
          fb[2 * jn + 1][0] = q[2];
          fb[2 * jn + 1][1] = q[3];
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) Mma<T>::run(acc[mt][nt], fa[mt], fb[nt]);
      }
      // Stage: pixel q = mt*16 + (lane >> 2) (+8), channel nt*8 + 2*(lane & 3) (+1).
      // Channels nc..kC-1 (a partial channel block) land in staging rows the
      // store never reads (s_b is zero there): no per-element branch.
      T* so = s_o + r * cfg.ld + rx;
      int coff[kNT][2];  // channel offsets of this lane's accumulator columns
      const int shr_r = sh0 + r * shr;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = nt * 8 + 2 * (lane & 3) + e;
          coff[nt][e] = c * QY * cfg.ld + ((shr_r + c * shc) & kEm);
        }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = (mt * 16 + (lane >> 2) + 8 * h) * sw;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              so[col + coff[nt][e]] =
                  Cvt<T>::from_acc(acc[mt][nt][2 * h + e] + s_b[nt * 8 + 2 * (lane & 3) + e]);
        }
    }
    __syncthreads();

    const int ld = cfg.ld;
    if (vec_rows)
      store_rows_vec<T>(on, prm.out, nc, nrows, QY, oy0, p.sh, ox_base, col_lo, col_hi, s_o, ld,
                        nullptr, cfg.nchk, cfg.m_chk, cfg.m_rows[nrows], cfg.cs);
    else
      store_tile<T>(on, prm.out, chan_fast, nc, nrows, oy0, p.sh, ox_base, col_lo, col_hi,
                    [&](int c, int i, int cc) { return s_o[(c * QY + i) * ld + cc]; });
  }
}

static int64_t align128(int64_t b) { return (b + 127) / 128 * 128; }

// Fills cfg and returns the dynamic shared-memory bytes, or 0 when the tensor-core
// direct kernel does not take the problem (the CUDA-core kernels run then).
// tall_warps (optional): the warps of a tile as tall as the phase alone allows (before shared
// memory shrinks it).
static int64_t dtc_config(const Problem& p, int kNT, int64_t t_bytes, DtcCfg& cfg, int& warps,
                          int* tall_warps = nullptr) {
  int64_t max_nq = 0;
  if (!set_tile_phases(p, cfg, max_nq)) return 0;
  const int64_t kC = 8 * kNT, sw = p.sw;
  const int64_t ke = 16 / t_bytes;  // elements (channels) per 16-byte chunk
  // the staging index ke*k of a line's last chunk (shifted by up to ke - 1) + ke <= ld
  cfg.ld = int((32 * sw + 2 * ke + ke - 1) / ke * ke);
  cfg.nchk = rows_vec_chunks(sw, t_bytes);
  cfg.m_chk = div_magic_m(cfg.nchk);
  for (int r = 1; r <= 8; ++r) cfg.m_rows[r] = div_magic_m(r);
  const int64_t nch = (p.cin_g() + ke - 1) / ke;
  cfg.nch = int(nch);
  cfg.pix_bytes = int(16 * (nch | 1));
  // Column offsets of the taps, row reach and item-table size.
  int64_t xmin = 0, xmax = 0, ymax_tap = 0, reach_y = 0, tab = 0;
  bool any = false;
  for (int64_t r = 0; r < sw; ++r) {
    const D2Phase& d = cfg.px[r];
    if (d.ntap == 0) continue;
    const int64_t lo = d.koff0, hi = d.koff0 + (d.ntap - 1) * cfg.koffs_x;
    xmin = any ? (lo < xmin ? lo : xmin) : lo;
    xmax = any ? (hi > xmax ? hi : xmax) : hi;
    any = true;
  }
  for (int64_t r = 0; r < p.sh; ++r) {
    const D2Phase& d = cfg.py[r];
    if (d.ntap == 0) continue;
    ymax_tap = d.ntap > ymax_tap ? d.ntap : ymax_tap;
    const int64_t re = (d.ntap - 1) * cfg.koffs_y;
    reach_y = re > reach_y ? re : reach_y;
  }
  for (int64_t r = 0; r < sw; ++r) tab += ymax_tap * cfg.px[r].ntap * nch + 1;
  if (xmax - xmin > 128 || reach_y > 64 || tab > kDtcMaxTab) return 0;
  cfg.xoff_max = int(xmax);
  cfg.cols_in = int(32 + xmax - xmin);
  const int64_t w_bytes = p.kh * p.kw * nch * kC * 16;
  if (w_bytes > kDtcMaxW) return 0;
  const int64_t optin = smem_optin();
  auto layout = [&](int64_t qy) {
    int64_t o = 0;
    cfg.w_off = int(o); o = align128(o + w_bytes);
    cfg.wz_off = int(o); o = align128(o + kC * 16);
    cfg.b_off = int(o); o = align128(o + kC * 4);
    cfg.tab_off = int(o); o = align128(o + tab * 8);
    cfg.rx_off = int(o); o = align128(o + 2 * kDtcMaxS * 4);
    cfg.xz_off = int(o); o = align128(o + 128);
    cfg.x_off = int(o); o = align128(o + (qy + reach_y) * cfg.cols_in * cfg.pix_bytes);
    cfg.o_off = int(o); o = align128(o + kC * qy * cfg.ld * t_bytes);
    return o;
  };
  int64_t qy = 8;
  while (qy > 1 && qy / 2 >= max_nq) qy /= 2;  // no taller than the phase
  if (tall_warps) *tall_warps = int(std::min<int64_t>(sw * qy, kDtcWarps));
  while (qy > 1 && layout(qy) > kDtcBudget) qy /= 2;
  // 16-channel blocks: no taller than four blocks per SM allow (fp32, 8 channels per group:
  // qy 8 -> 4, three -> four blocks per SM, 0.525 -> 0.472 ms; off-suite fp32 16 -> 16 k3 s3
  // 128x128 0.157 -> 0.073; the 16-bit picks of the shapes measured (8 channels per group
  // and three off-suite shapes) are unchanged: their tiles fit four).
  while (kNT == 2 && qy > 2 && 4 * (layout(qy) + 1024) > optin) qy /= 2;
  const int64_t smem = layout(qy);
  if (smem > optin) return 0;
  const int64_t units = sw * qy;
  warps = int(units < kDtcWarps ? units : kDtcWarps);
  if (!set_tile_grid(p, qy, max_nq, kC, cfg, cfg.ncob, cfg.ngc, cfg.nz)) return 0;
  return smem;
}

template <typename T, int kNT>
static cudaError_t run_dtc(const DirectParams& prm, cudaStream_t st, bool& launched) {
  launched = false;
  const Problem& p = prm.p;
  DtcCfg cfg;
  int warps = 0;
  const int64_t smem = dtc_config(p, kNT, sizeof(T), cfg, warps);
  if (smem == 0) return cudaSuccess;
  if (!rows_vec_offsets_fit(prm.out, p, 8 * kNT, cfg.qy_tile)) cfg.vec = 0;
  // Blocks per SM the registers are capped for, and samples per block (the
  // z steps a block loops over; direct_grid halves it while the grid stays
  // large). 64 channels per block: 2 blocks (128 registers; at 3 it spills
  // ~500 bytes), up to 4 samples. 32 channels: 3 blocks (80 registers, 16
  // bytes of spill), up to 2 samples (k=3 stride 5, fp16: 0.345 -> 0.339 ms). 16
  // channels: 4 blocks (64 registers, 12 bytes of spill) where shared memory
  // allows 4, one sample per block (8 channels per group, fp16: 0.377 -> 0.348 ms;
  // 4 blocks with 4 samples was 0.41).
  int minb = kNT == 8 ? 2 : 3;
  int64_t max_npb = kNT == 8 ? 4 : kNT == 4 ? 2 : 1;
  if (kNT == 2 && 4 * (smem + 1024) <= smem_optin()) minb = 4;
  auto kern = minb == 4 ? direct_tc_kernel<T, kNT, 4>
            : minb == 3 ? direct_tc_kernel<T, kNT, 3> : direct_tc_kernel<T, kNT, 2>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess) return e;
  launched = true;
  kern<<<direct_grid(p, cfg, cfg.ngc, max_npb), 32 * warps, size_t(smem), st>>>(prm, cfg);
  return cudaGetLastError();
}

static bool dtc_dtype(DType dt, MathMode math) {
  return dt == DType::kHalf || dt == DType::kBFloat16 ||
         (dt == DType::kFloat && math == MathMode::kTF32);
}

// kNT for the problem (the largest that fits, starting from the channels per
// group, at most nt_cap when that is 2, 4 or 8), or 0 when the kernel does not take it.
static int dtc_ntiles(const Problem& p, DType dt, MathMode math, int nt_cap) {
  if (!dtc_dtype(dt, math)) return 0;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      major < 8)
    return 0;
  const int64_t cog = p.cout_g();
  // At most 32 channels per block: with 3 blocks per SM that beat 64-channel blocks
  // at 2 per SM (k=3 stride 5, Cout/groups 64, bf16: 0.420 -> 0.355 ms) although x is
  // staged once per channel block. Variant::direct_nt = 2, 4, 8 sets the cap (tests).
  const int cap = nt_cap == 2 || nt_cap == 4 || nt_cap == 8 ? nt_cap : 4;
  int first = cog > 32 ? 8 : cog > 16 ? 4 : 2;
  if (first > cap) first = cap;
  for (int nt = first; nt >= 2; nt /= 2) {
    DtcCfg cfg;
    int warps = 0;
    if (dtc_config(p, nt, dt == DType::kFloat ? 4 : 2, cfg, warps) > 0) return nt;
  }
  return 0;
}

int direct_tc_channels(const Problem& p, DType dt, MathMode math, int nt_cap) {
  return 8 * dtc_ntiles(p, dt, math, nt_cap);
}

double direct_tc_occupancy(const Problem& p, DType dt, MathMode math) {
  const int nt = dtc_ntiles(p, dt, math, 0);
  if (nt == 0) return 1.0;
  DtcCfg cfg;
  int warps = 0, tall = 0;
  const int64_t smem = dtc_config(p, nt, dt == DType::kFloat ? 4 : 2, cfg, warps, &tall);
  if (smem == 0 || warps <= 0 || tall <= 0) return 1.0;
  // Blocks per SM: run_dtc's register cap, and the SM's shared memory (1 KB of it reserved
  // per block); a tall tile's: two, as its budget kDtcBudget allows (and every cap does).
  const int64_t cap = nt == 8 ? 2 : nt == 4 ? 3 : 4;
  int64_t blocks = cap;
  int dev = 0, per_sm = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) ==
          cudaSuccess &&
      per_sm > 0)
    blocks = std::min<int64_t>(cap, std::max<int64_t>(1, per_sm / (smem + 1024)));
  const double resident = double(warps * blocks), wanted = double(tall * 2);
  return std::min(1.0, resident / wanted);
}

// The glue asked direct_tc_channels and packed the weight for that many channels
// per block (wpk_channels); a launch without a packed weight is not taken.
cudaError_t launch_direct_tc(const DirectParams& prm, DType dt, cudaStream_t st, bool& launched) {
  launched = false;
  if (prm.wpk == nullptr || !dtc_dtype(dt, MathMode::kTF32)) return cudaSuccess;
  const int nt = prm.wpk_channels / 8;
  if (dt == DType::kFloat) {  // packed only with TF32 allowed (direct_tc_channels)
    if (nt == 8) return run_dtc<float, 8>(prm, st, launched);
    if (nt == 4) return run_dtc<float, 4>(prm, st, launched);
    if (nt == 2) return run_dtc<float, 2>(prm, st, launched);
    return cudaSuccess;
  }
  if (dt == DType::kHalf) {
    if (nt == 8) return run_dtc<__half, 8>(prm, st, launched);
    if (nt == 4) return run_dtc<__half, 4>(prm, st, launched);
    if (nt == 2) return run_dtc<__half, 2>(prm, st, launched);
    return cudaSuccess;
  }
  if (nt == 8) return run_dtc<__nv_bfloat16, 8>(prm, st, launched);
  if (nt == 4) return run_dtc<__nv_bfloat16, 4>(prm, st, launched);
  if (nt == 2) return run_dtc<__nv_bfloat16, 2>(prm, st, launched);
  return cudaSuccess;
}

}  // namespace cuda
}  // namespace convt2d
