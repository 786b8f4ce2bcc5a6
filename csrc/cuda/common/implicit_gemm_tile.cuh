// Tile machinery shared by the sm_80/sm_90 implicit-GEMM kernels (implicit_gemm/igemm_tensor_core.cu,
// implicit_gemm/igemm_halo_sm90.cu): shared-memory layouts and wgmma descriptors, the block -> tile
// decode, the A-row source and tap cursor of the loaders, the C-tile epilogue,
// and the mbarrier wrappers of the warp-specialised kernels. Device code only.
#pragma once
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include <cstdint>

namespace convt2d {
namespace cuda {
namespace {

// wgmma shared-memory descriptor of a K-major tile with 128-byte rows in the
// 128-byte swizzle: start address, leading offset unused (1), stride between
// 8-row groups 1024 bytes, swizzle mode 1 (128 B).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

// Byte offset of chunk c of row r in a tile whose rows are CH chunks: XOR
// swizzle so that 8 consecutive rows at one logical chunk hit 8 distinct
// 16-byte bank groups (ldmatrix and cp.async conflict-free).
template <int CH>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  if constexpr (CH == 8) return uint32_t(row * 128 + ((chunk ^ (row & 7)) << 4));
  else return uint32_t(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
}

// Barrier over the first NT threads of the block (named barrier 1).
template <int NT>
__device__ __forceinline__ void sync_threads_n() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(NT) : "memory");
}

// One m16n8 accumulator fragment (rows m, m+8; columns n, n+1) into the
// staged C tile: [n][m] for NCHW stores, [m][n] for channels-last.
template <bool kChanOut, int LDC_M, int LDC_N>
__device__ __forceinline__ void put_acc(float* sC, int m, int n, const float (&a)[4]) {
  if constexpr (kChanOut) {
    sC[m * LDC_N + n] = a[0];
    sC[m * LDC_N + n + 1] = a[1];
    sC[(m + 8) * LDC_N + n] = a[2];
    sC[(m + 8) * LDC_N + n + 1] = a[3];
  } else {
    sC[n * LDC_M + m] = a[0];
    sC[(n + 1) * LDC_M + m] = a[1];
    sC[n * LDC_M + m + 8] = a[2];
    sC[(n + 1) * LDC_M + m + 8] = a[3];
  }
}

// Where a block's tile sits. Block -> (n tile, phase x group, m tile); the
// phases of one pixel region are neighbours in launch order, so their
// interleaved stores meet in L2. The per-dimension phase numbers the main loop
// needs are kept as 32-bit values (the 64-bit Geo is rebuilt for the epilogue
// rather than kept live in registers).
// wv: the width of a GEMM row of pixels; the phase's width nqx, except in the
// halo kernel (implicit_gemm/igemm_halo_sm90.cu), whose rows are nqx + the tap columns' reach wide.
struct TileGeo {
  // wv, lead (halo kernels): GEMM rows t.wv wide, row position u holding output pixel
  // u - lead (pixels outside [0, nqx) computed and dropped).
  int64_t g, ry, rx, pix, nqx, M, m0, n0, wv = 0, lead = 0;
  int it_y, it_x, k0y, k0x, ksy, ksx, ntap_y, ntap_x, im_y, im_x, ia_y, ia_x;
};

// Tile `bid` of the grid (the block index; a persistent kernel's tile counter).
template <int BM, int BN>
__device__ __forceinline__ TileGeo tile_geo(const IgemmParams& prm, int64_t bid) {
  const Problem& p = prm.p;
  TileGeo t;
  // 32-bit decode: the tile index is below the grid limit 2^31, the counts are small.
  const uint32_t n_tiles = uint32_t((prm.Nc + BN - 1) / BN);
  const uint32_t Z = uint32_t(prm.phases_y * prm.phases_x * p.groups);
  const uint32_t G = uint32_t(p.groups), PX = uint32_t(prm.phases_x);
  uint32_t b = uint32_t(bid);
  const uint32_t ntile = b % n_tiles;
  b /= n_tiles;
  const uint32_t z = b % Z;
  const uint32_t mtile = b / Z;
  const uint32_t phase = z / G;
  t.g = z % G;
  t.ry = phase / PX;
  t.rx = phase % PX;
  const Geo gy = phase_geo(prm, true, t.ry);
  const Geo gx = phase_geo(prm, false, t.rx);
  t.pix = gy.nq * gx.nq; t.nqx = gx.nq;
  t.it_y = int(gy.it); t.it_x = int(gx.it); t.k0y = int(gy.k0); t.k0x = int(gx.k0);
  t.ksy = int(gy.ks); t.ksx = int(gx.ks); t.ntap_y = int(gy.ntap); t.ntap_x = int(gx.ntap);
  t.im_y = int(gy.im); t.im_x = int(gx.im); t.ia_y = int(gy.ia); t.ia_x = int(gx.ia);
  t.M = p.N * t.pix;
  t.m0 = int64_t(mtile) * BM;
  t.n0 = int64_t(ntile) * BN;
  return t;
}

template <int BM, int BN>
__device__ __forceinline__ TileGeo tile_geo(const IgemmParams& prm) {
  return tile_geo<BM, BN>(prm, blockIdx.x);
}

// Source of GEMM row mg of the tile: the offset of its tap-0 pixel plus coff
// channels, and that pixel's coordinates. A row beyond M gets a y coordinate
// that fails every bounds test (and offset 0).
__device__ __forceinline__ int64_t a_row_source(const IgemmParams& prm, const TileGeo& t,
                                                int64_t mg, int coff, int& iy, int& ix) {
  iy = -(1 << 30);
  ix = 0;
  if (mg >= t.M) return 0;
  const int64_t n = udiv_fast(mg, t.pix), rem = mg - n * t.pix;
  const int64_t qy = udiv_fast(rem, t.nqx), qx = rem - qy * t.nqx;
  iy = int(qy) * t.im_y + t.ia_y;
  ix = int(qx) * t.im_x + t.ia_x;
  return n * prm.src.sn + t.g * prm.Kc + coff + int64_t(iy) * prm.src.sh +
         int64_t(ix) * prm.src.sw;
}

// The loader's position in the K loop: tap row jy, tap column jx, channel tile
// ct; dy/dx and delta are the source shift and offset of the tap, btap the
// weight offset of the tap. Updated incrementally, one K tile at a time.
struct TapCursor {
  int jy = 0, jx = 0, ct = 0, dy = 0, dx = 0;
  int64_t delta = 0, btap;
  int64_t ssh, ssw, kw, tap_stride;
  __device__ __forceinline__ TapCursor(const IgemmParams& prm, const TileGeo& t, int64_t tap_stride_)
      : btap((int64_t(t.k0y) * prm.p.kw + t.k0x) * tap_stride_), ssh(prm.src.sh), ssw(prm.src.sw),
        kw(prm.p.kw), tap_stride(tap_stride_) {}
  __device__ __forceinline__ void advance(const TileGeo& t, int kc_tiles) {
    if (++ct < kc_tiles) return;
    ct = 0;
    if (++jx == t.ntap_x) {
      jx = 0; dx = 0; ++jy; dy += t.it_y;
      delta = int64_t(dy) * ssh;
      btap = (int64_t(t.k0y + jy * t.ksy) * kw + t.k0x) * tap_stride;
    } else {
      dx += t.it_x;
      delta += int64_t(t.it_x) * ssw;
      btap += int64_t(t.ksx) * tap_stride;
    }
  }
  // The position after i advances from the start (split-K's first K tile).
  __device__ __forceinline__ void seek(const TileGeo& t, int kc_tiles, int i) {
    ct = i % kc_tiles;
    const int tap = i / kc_tiles;
    jy = tap / t.ntap_x;
    jx = tap - jy * t.ntap_x;
    dy = jy * t.it_y;
    dx = jx * t.it_x;
    delta = int64_t(dy) * ssh + int64_t(dx) * ssw;
    btap = (int64_t(t.k0y + jy * t.ksy) * kw + t.k0x + jx * t.ksx) * tap_stride;
  }
};

// Stores the staged BM x BN tile (sC, written by the caller) with bias, by
// threads ctid < NT: a row table of output offsets first, then coalesced
// NCHW (pixel pairs when the phase's pixels are adjacent) or channels-last
// (16-byte vectors) stores.
// kVirt (halo kernel): GEMM rows are t.wv wide, row position u is output pixel u - t.lead,
// and pixels outside [0, nqx) are not stored.
// partial (split-K): the tile goes, in fp32 (T = float) and without bias, to this buffer
// with dst's element strides instead of to dst.
template <typename T, int BM, int BN, int LDC_M, int LDC_N, int NT, bool kChanOut,
          bool kVirt = false>
__device__ __forceinline__ void store_c_tile(const IgemmParams& prm, const float* sC,
                                             int64_t* sRow, int tid, const TileGeo& t,
                                             T* partial = nullptr) {
  constexpr int E = 16 / int(sizeof(T));
  const int64_t m0 = t.m0, n0 = t.n0, g = t.g, pix = t.pix, M = t.M;
  const Geo gy = phase_geo(prm, true, t.ry);
  const Geo gx = phase_geo(prm, false, t.rx);
  const int64_t gx_om = gx.om;
  const int64_t wv = kVirt ? t.wv : gx.nq, pixv = kVirt ? gy.nq * t.wv : pix;
  for (int r = tid; r < BM; r += NT) {
    const int64_t mg = m0 + r;
    int64_t off = -1;
    if (mg < M) {
      const int64_t n = udiv_fast(mg, pixv), rem = mg - n * pixv;
      const int64_t qy = udiv_fast(rem, wv), qx = rem - qy * wv - (kVirt ? t.lead : 0);
      if (!kVirt || (qx >= 0 && qx < gx.nq))
        off = n * prm.dst.sn + (qy * gy.om + gy.oa) * prm.dst.sh +
              (qx * gx.om + gx.oa) * prm.dst.sw + g * prm.Nc * prm.dst.sc;
    }
    sRow[r] = off;
  }
  sync_threads_n<NT>();
  const T* bias = partial ? nullptr : static_cast<const T*>(prm.bias);
  T* dst = partial ? partial : static_cast<T*>(prm.dst.ptr);
  const int64_t dsc = prm.dst.sc;
  const int nvalid = int(prm.Nc) - int(n0) < BN ? int(prm.Nc) - int(n0) : BN;
  const T* bias_g = bias ? bias + g * prm.Nc + n0 : nullptr;
  using Vec = uint4;  // E elements of T
  if constexpr (kChanOut) {
    // E consecutive channels per thread: one 16-byte store when aligned.
    constexpr int GN = BN / E;  // vector groups per row
    for (int idx = tid; idx < BM * GN; idx += NT) {
      const int m = idx / GN, n = (idx % GN) * E;
      const int64_t off = sRow[m];
      if (off < 0 || n >= nvalid) continue;
      const float* c = sC + m * LDC_N + n;
      T* d = dst + off + (n0 + n);
      if (n + E <= nvalid && (reinterpret_cast<uintptr_t>(d) & 15) == 0) {
        union { Vec v; T e[E]; } u;
#pragma unroll
        for (int t = 0; t < E; ++t)
          u.e[t] = Cvt<T>::from_acc(c[t] + (bias_g ? Cvt<T>::to_acc(bias_g[n + t]) : 0.f));
        *reinterpret_cast<Vec*>(d) = u.v;
      } else {
        for (int t = 0; t < E && n + t < nvalid; ++t)
          d[t] = Cvt<T>::from_acc(c[t] + (bias_g ? Cvt<T>::to_acc(bias_g[n + t]) : 0.f));
      }
    }
  } else if (gx_om == 1) {
    // Phase pixels consecutive along the output row: each thread owns a group
    // of E tile rows (pixels) and walks the channels, one 16-byte store per
    // channel when the group is contiguous in memory and aligned; lanes cover
    // consecutive groups, so a warp writes 32 x 16 bytes of one channel.
    constexpr int GM = BM / E;
    static_assert(NT % GM == 0, "pixel groups per channel sweep");
    const int m = (tid % GM) * E;
    const int64_t o0 = sRow[m];
    bool contig = o0 >= 0;
#pragma unroll
    for (int j = 1; j < E; ++j) contig = contig && sRow[m + j] == o0 + j;
    for (int n = tid / GM; n < nvalid; n += NT / GM) {
      const float* c = sC + n * LDC_M + m;
      const float bv = bias_g ? Cvt<T>::to_acc(bias_g[n]) : 0.f;
      const int64_t co = (n0 + n) * dsc;
      T* d = dst + o0 + co;
      if (contig && (reinterpret_cast<uintptr_t>(d) & 15) == 0) {
        union { Vec v; T e[E]; } u;
#pragma unroll
        for (int j = 0; j < E; j += 4) {
          const float4 f = *reinterpret_cast<const float4*>(c + j);
          u.e[j] = Cvt<T>::from_acc(f.x + bv);
          u.e[j + 1] = Cvt<T>::from_acc(f.y + bv);
          u.e[j + 2] = Cvt<T>::from_acc(f.z + bv);
          u.e[j + 3] = Cvt<T>::from_acc(f.w + bv);
        }
        *reinterpret_cast<Vec*>(d) = u.v;
      } else {
#pragma unroll
        for (int j = 0; j < E; ++j) {
          const int64_t o = sRow[m + j];
          if (o >= 0) dst[o + co] = Cvt<T>::from_acc(c[j] + bv);
        }
      }
    }
  } else {
    // Strided phase pixels: each thread owns one pixel (lanes: consecutive
    // pixels of one channel) and walks the channels.
    if constexpr (NT % BM == 0) {
      const int m = tid % BM;
      const int64_t off = sRow[m];
      if (off >= 0) {
        for (int n = tid / BM; n < nvalid; n += NT / BM) {
          const float bv = bias_g ? Cvt<T>::to_acc(bias_g[n]) : 0.f;
          dst[off + (n0 + n) * dsc] = Cvt<T>::from_acc(sC[n * LDC_M + m] + bv);
        }
      }
    } else {
      // More pixels than threads: each thread takes pixels tid, tid + NT, ...
      static_assert(BM % NT == 0, "pixels per thread");
      for (int m = tid; m < BM; m += NT) {
        const int64_t off = sRow[m];
        if (off < 0) continue;
        for (int n = 0; n < nvalid; ++n) {
          const float bv = bias_g ? Cvt<T>::to_acc(bias_g[n]) : 0.f;
          dst[off + (n0 + n) * dsc] = Cvt<T>::from_acc(sC[n * LDC_M + m] + bv);
        }
      }
    }
  }
}

#if defined(CONVT2D_WGMMA)
// mbarrier wrappers (CTA scope).
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
// Arrives on the mbarrier once all of this thread's earlier cp.async copies
// have landed (counts as one of the expected arrivals: .noinc).
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWS_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WS_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// ---- TMA (sm_90a) --------------------------------------------------------------------
// The tensor maps live in the kernel's __grid_constant__ parameter; their generic
// addresses go into the instructions. Each load completes tx bytes on the mbarrier.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile(
      "{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
// im2col load of a 4-D channels-last tensor (dims C, W, H, N): the box's
// pixelsPerColumn pixels from base pixel (w, h, n) on, walking the map's pixel
// window, each shifted by (ow, oh); channels c .. c + channelsPerPixel - 1.
__device__ __forceinline__ void tma_load_im2col4(uint32_t dst, const void* map, uint32_t bar,
                                                 int c, int w, int h, int n, uint16_t ow,
                                                 uint16_t oh) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(bar), "h"(ow),
      "h"(oh)
      : "memory");
}
// Tiled load of a 2-D tensor: the box at (x inner, y outer).
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, uint32_t bar, int x,
                                            int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// Tiled load of a 4-D tensor: the box at (c0 innermost, c1, c2, c3); coordinates may lie
// outside the tensor (those elements are zero-filled).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* map, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// Tiled load of a 5-D tensor, as tma_load_4d.
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const void* map, uint32_t bar, int c0,
                                            int c1, int c2, int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
      : "memory");
}
#endif  // CONVT2D_WGMMA

}  // namespace
}  // namespace cuda
}  // namespace convt2d
