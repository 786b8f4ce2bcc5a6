// Tensor-core implicit GEMM (v2): mma.sync on K-major operands, cp.async
// multi-stage pipeline into XOR-swizzled shared memory, ldmatrix fragments,
// C tile staged through shared memory for coalesced NCHW or NHWC stores.
//
// Mapping (kernels.h, IgemmParams): one GEMM per stride phase and group.
//   A[m][k]: m = output pixel of the phase, k = (tap, channel); the source is
//            read channels-last (src.sc == 1), so a 16-byte chunk of A is 8
//            (16-bit) or 4 (fp32) consecutive channels of one source pixel.
//   B[n][k]: weight packed [G][kh][kw][Nc][Kc] (K contiguous).
// Every row of a shared-memory tile is 64 bytes of K (BK = 32 16-bit or 16
// fp32 elements) = 4 chunks; chunk c of row r lives at chunk c ^ ((r>>1)&3),
// which makes both the cp.async stores and the ldmatrix reads conflict-free.
// The fragment addressing is the same for bf16/fp16 (m16n8k16) and tf32
// (m16n8k8): a k-step is 32 bytes = 2 chunks in both cases.
#include "cuda/kernels.h"
#include "cuda/mma_core.cuh"
#include "cuda/ptx.cuh"
#include "cuda/wgmma.cuh"
#include "common/static_switch.h"
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace convt2d {
namespace cuda {
namespace {

// Tile shape, K-row width and pipeline depth. kSplit (fp32 only): 3xTF32,
// a = big + small with both halves tf32, D += As*Bb + Ab*Bs + Ab*Bb.
//   BKB: bytes of K per tile row (64 or 128) = CH 16-byte chunks = KS k-steps
//        of 32 bytes (one mma k16 for 16-bit types, one k8 for tf32).
//   Loader: each thread owns CPT consecutive chunks of one row (A) so the
//        bounds test and address are computed once per row per stage.
template <typename T_, int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int BKB_,
          bool kSplit_, int kMinBlocks_, bool kWgmma_ = false>
struct TcTraits {
  // kWgmma (sm_90a): each warpgroup runs wgmma on its 64 rows straight from
  // the swizzled tiles (no ldmatrix); needs 8 warps as 8x1 (the wgmma
  // accumulator layout is then the 16-row-per-warp mma.sync layout) and
  // 128-byte rows (the 128-byte swizzle atom).
  static constexpr bool kWgmma = kWgmma_;
  using T = T_;
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int STAGES = STAGES_, BKB = BKB_;
  static constexpr bool kSplit = kSplit_;
  static constexpr int kMinBlocks = kMinBlocks_;  // __launch_bounds__ residency target
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int E = 16 / int(sizeof(T));  // elements per 16-byte chunk
  static constexpr int CH = BKB / 16;            // chunks per tile row
  static constexpr int KS = BKB / 32;            // mma k-steps per stage
  static constexpr int BK = BKB / int(sizeof(T));
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
  static constexpr int MI = WM / 16, NI = WN / 8;
  static constexpr int TPR_A = kThreads / BM;    // threads per A row
  static constexpr int CPT_A = CH / TPR_A;       // chunks per thread (A)
  static constexpr int CPT_B = BN * CH >= kThreads ? BN * CH / kThreads : 1;
  static constexpr int TPR_B = CH / CPT_B;       // threads per B row
  static constexpr int B_THREADS = BN * TPR_B;   // threads that load B
  static constexpr int kStageBytes = (BM + BN) * BKB;
  static constexpr int kPipeBytes = STAGES * kStageBytes;
  static constexpr int LDC_M = BM + 4;  // C staged [n][m] (NCHW stores)
  static constexpr int LDC_N = BN + 4;  // C staged [m][n] (channels-last stores)
  static constexpr int kCBytes = (BN * LDC_M > BM * LDC_N ? BN * LDC_M : BM * LDC_N) * 4;
  static constexpr int kRowTableOff = kPipeBytes > kCBytes ? kPipeBytes : kCBytes;
  static constexpr int kSmemBytes = kRowTableOff + BM * 8 + 1024;  // + alignment slack
  static_assert(!kWgmma || (BKB == 128 && WARPS_M == 8 && WARPS_N == 1 && BM == 128 && !kSplit),
                "wgmma tile");
  static_assert(BKB == 64 || BKB == 128, "K row width");
  static_assert(MI >= 1 && NI % 2 == 0, "warp tile");
  static_assert(kThreads % BM == 0 && CPT_A >= 1 && CH % TPR_A == 0, "A loader");
  static_assert(B_THREADS <= kThreads && (BN * CH) % CPT_B == 0, "B loader");
  static_assert(!kSplit || sizeof(T) == 4, "3xTF32 is for fp32");
};

// Byte offset of chunk c of row r in a tile whose rows are CH chunks: XOR
// swizzle so that 8 consecutive rows at one logical chunk hit 8 distinct
// 16-byte bank groups (ldmatrix and cp.async conflict-free).
// wgmma shared-memory descriptor of a K-major tile with 128-byte rows in the
// 128-byte swizzle: start address, leading offset unused (1), stride between
// 8-row groups 1024 bytes, swizzle mode 1 (128 B).
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

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
struct TileGeo {
  int64_t g, ry, rx, pix, nqx, M, m0, n0;
  int it_y, it_x, k0y, k0x, ksy, ksx, ntap_y, ntap_x, im_y, im_x, ia_y, ia_x;
};

template <int BM, int BN>
__device__ __forceinline__ TileGeo tile_geo(const IgemmParams& prm) {
  const Problem& p = prm.p;
  TileGeo t;
  const int64_t n_tiles = (prm.Nc + BN - 1) / BN;
  const int64_t Z = prm.phases_y * prm.phases_x * p.groups;
  int64_t bid = blockIdx.x;
  const int64_t ntile = bid % n_tiles;
  bid /= n_tiles;
  const int64_t z = bid % Z;
  const int64_t mtile = bid / Z;
  const int64_t phase = z / p.groups;
  t.g = z % p.groups;
  t.ry = phase / prm.phases_x;
  t.rx = phase % prm.phases_x;
  const Geo gy = make_geo(prm.mode, t.ry, p.sh, p.ph, p.dh, p.kh, prm.Hd);
  const Geo gx = make_geo(prm.mode, t.rx, p.sw, p.pw, p.dw, p.kw, prm.Wd);
  t.pix = gy.nq * gx.nq; t.nqx = gx.nq;
  t.it_y = int(gy.it); t.it_x = int(gx.it); t.k0y = int(gy.k0); t.k0x = int(gx.k0);
  t.ksy = int(gy.ks); t.ksx = int(gx.ks); t.ntap_y = int(gy.ntap); t.ntap_x = int(gx.ntap);
  t.im_y = int(gy.im); t.im_x = int(gx.im); t.ia_y = int(gy.ia); t.ia_x = int(gx.ia);
  t.M = p.N * t.pix;
  t.m0 = mtile * BM;
  t.n0 = ntile * BN;
  return t;
}

// Source of GEMM row mg of the tile: the offset of its tap-0 pixel plus coff
// channels, and that pixel's coordinates. A row beyond M gets a y coordinate
// that fails every bounds test (and offset 0).
__device__ __forceinline__ int64_t a_row_source(const IgemmParams& prm, const TileGeo& t,
                                                int64_t mg, int coff, int& iy, int& ix) {
  iy = -(1 << 30);
  ix = 0;
  if (mg >= t.M) return 0;
  const int64_t n = mg / t.pix, rem = mg - n * t.pix;
  const int64_t qy = rem / t.nqx, qx = rem - qy * t.nqx;
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
};

// Stores the staged BM x BN tile (sC, written by the caller) with bias, by
// threads ctid < NT: a row table of output offsets first, then coalesced
// NCHW (pixel pairs when the phase's pixels are adjacent) or channels-last
// (16-byte vectors) stores.
template <typename T, int BM, int BN, int LDC_M, int LDC_N, int NT, bool kChanOut>
__device__ __forceinline__ void store_c_tile(const IgemmParams& prm, const float* sC,
                                             int64_t* sRow, int tid, const TileGeo& t) {
  constexpr int E = 16 / int(sizeof(T));
  const Problem& p = prm.p;
  const int64_t m0 = t.m0, n0 = t.n0, g = t.g, pix = t.pix, M = t.M;
  const Geo gy = make_geo(prm.mode, t.ry, p.sh, p.ph, p.dh, p.kh, prm.Hd);
  const Geo gx = make_geo(prm.mode, t.rx, p.sw, p.pw, p.dw, p.kw, prm.Wd);
  const int64_t gx_om = gx.om;
  for (int r = tid; r < BM; r += NT) {
    const int64_t mg = m0 + r;
    int64_t off = -1;
    if (mg < M) {
      const int64_t n = mg / pix, rem = mg - n * pix;
      const int64_t qy = rem / gx.nq, qx = rem - qy * gx.nq;
      off = n * prm.dst.sn + (qy * gy.om + gy.oa) * prm.dst.sh + (qx * gx.om + gx.oa) * prm.dst.sw +
            g * prm.Nc * prm.dst.sc;
    }
    sRow[r] = off;
  }
  sync_threads_n<NT>();
  const T* bias = static_cast<const T*>(prm.bias);
  T* dst = static_cast<T*>(prm.dst.ptr);
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
    static_assert(NT % BM == 0, "pixels per channel sweep");
    const int m = tid % BM;
    const int64_t off = sRow[m];
    if (off >= 0) {
      for (int n = tid / BM; n < nvalid; n += NT / BM) {
        const float bv = bias_g ? Cvt<T>::to_acc(bias_g[n]) : 0.f;
        dst[off + (n0 + n) * dsc] = Cvt<T>::from_acc(sC[n * LDC_M + m] + bv);
      }
    }
  }
}

template <class Tr, bool kChanOut>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) tc_igemm_kernel(const IgemmParams prm) {
  using T = typename Tr::T;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, E = Tr::E, NT = Tr::kThreads;
  constexpr int S = Tr::STAGES, MI = Tr::MI, NI = Tr::NI, CH = Tr::CH, BKB = Tr::BKB;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Tiles start on a 1024-byte boundary: the 128-byte swizzle repeats every
  // 8 rows (1024 bytes), and wgmma's descriptors assume that alignment.
  const uint32_t sraw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sbase = (sraw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - sraw);

  const Problem& p = prm.p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  const TileGeo t = tile_geo<BM, BN>(prm);
  if (t.m0 >= t.M) return;

  const T* __restrict__ src = static_cast<const T*>(prm.src.ptr);
  const T* __restrict__ wpk = static_cast<const T*>(prm.wpk);
  const int Kc = int(prm.Kc), Nc = int(prm.Nc);
  const int Hs = int(prm.Hs), Ws = int(prm.Ws);

  // ---- A loader: row tid / TPR_A, chunks lc + c * TPR_A (c < CPT_A) -----------------
  // The row's tap-0 source offset and pixel; per tap the offset delta is the
  // same for every row, so a stage costs one bounds test and one address per
  // row, and CPT_A cp.async with immediate offsets. The TPR_A threads of a row
  // take interleaved chunks, so each warp-wide cp.async covers whole 32-byte
  // sectors (contiguous chunks per thread fetched every sector twice from L2).
  constexpr int CPT_A = Tr::CPT_A, CPT_B = Tr::CPT_B;
  constexpr int TPR_A = Tr::TPR_A, TPR_B = Tr::TPR_B;
  const int a_r = tid / TPR_A;
  const int lc = tid % TPR_A;
  int a_iy, a_ix;
  const int64_t a_off = a_row_source(prm, t, t.m0 + a_r, lc * E, a_iy, a_ix);
  // ---- B loader: row tid / TPR_B (threads < B_THREADS), CPT_B chunks --------------
  const int64_t tap_stride = int64_t(Nc) * Kc;
  const int b_r = tid / TPR_B, b_lc = tid % TPR_B;  // chunks b_lc + c * TPR_B
  const bool b_row_ok = tid < Tr::B_THREADS && t.n0 + b_r < Nc;
  const T* b_ptr =
      wpk + t.g * p.kh * p.kw * tap_stride + (b_row_ok ? (t.n0 + b_r) * Kc : 0) + b_lc * E;

  const int kc_tiles = (Kc + BK - 1) / BK;
  const int iters = t.ntap_y * t.ntap_x * kc_tiles;
  const uint32_t uHs = uint32_t(Hs), uWs = uint32_t(Ws);
  const uint32_t a_dst = swz<CH>(a_r, 0), b_dst = swz<CH>(b_r, 0);

  // Loader position (runs S-1 tiles ahead of the math).
  TapCursor l(prm, t, tap_stride);
  auto load_tile = [&](int stage) {
    const uint32_t sa = sbase + stage * Tr::kStageBytes;
    const uint32_t sb = sa + BM * BKB;
    const int c0 = l.ct * BK + lc * E;  // first channel of this thread's A chunks
    const bool row_ok = uint32_t(a_iy + l.dy) < uHs && uint32_t(a_ix + l.dx) < uWs;
    const T* ga = src + (a_off + l.delta + l.ct * BK);
#pragma unroll
    for (int c = 0; c < CPT_A; ++c) {
      const bool ok = row_ok && c0 + c * TPR_A * E < Kc;
      // chunk lc+c*TPR_A of row a_r: swizzle XOR is per row, so recompute the column
      const uint32_t d = sa + (a_dst & ~uint32_t(CH * 16 - 1)) +
                         uint32_t((((lc + c * TPR_A) ^ ((a_dst >> 4) & (CH - 1)))) << 4);
      cp_async16(d, ok ? ga + c * TPR_A * E : src, ok ? 16 : 0);
    }
    if (tid < Tr::B_THREADS) {
      const int cb = l.ct * BK + b_lc * E;
      const T* gb = b_ptr + (l.btap + l.ct * BK);
#pragma unroll
      for (int c = 0; c < CPT_B; ++c) {
        const bool ok = b_row_ok && cb + c * TPR_B * E < Kc;
        const uint32_t d = sb + (b_dst & ~uint32_t(CH * 16 - 1)) +
                           uint32_t((((b_lc + c * TPR_B) ^ ((b_dst >> 4) & (CH - 1)))) << 4);
        cp_async16(d, ok ? gb + c * TPR_B * E : wpk, ok ? 16 : 0);
      }
    }
    l.advance(t, kc_tiles);
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int t = 0; t < 4; ++t) acc[i][j][t] = 0.f;

  const int wm = warp % Tr::WARPS_M, wn = warp / Tr::WARPS_M;
  // ldmatrix addresses within a stage, per k-step: A rows (lane & 15), chunk
  // 2*ks + (lane >> 4); B rows (lane & 7) + 8*(lane >> 4), chunk 2*ks +
  // ((lane >> 3) & 1). Adding 16 rows keeps the swizzle, so +i*16 rows is an
  // immediate offset.
  uint32_t a_lds[Tr::KS], b_lds[Tr::KS];
  {
    const int ar = wm * Tr::WM + (lane & 15), br = wn * Tr::WN + (lane & 7) + ((lane >> 4) << 3);
#pragma unroll
    for (int ks = 0; ks < Tr::KS; ++ks) {
      a_lds[ks] = swz<CH>(ar, 2 * ks + (lane >> 4));
      b_lds[ks] = uint32_t(BM * BKB) + swz<CH>(br, 2 * ks + ((lane >> 3) & 1));
    }
  }

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < iters) load_tile(s);
    cp_async_commit();
  }
  int rd_stage = 0, wr_stage = S - 1;
  for (int it = 0; it < iters; ++it) {
    cp_async_wait<S - 2>();
    // cp.async wrote through the generic proxy; wgmma reads through the async one.
    if constexpr (Tr::kWgmma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (it + S - 1 < iters) load_tile(wr_stage);
    cp_async_commit();
    wr_stage = wr_stage == S - 1 ? 0 : wr_stage + 1;
    const uint32_t sa = sbase + rd_stage * Tr::kStageBytes;
    rd_stage = rd_stage == S - 1 ? 0 : rd_stage + 1;
    // 3xTF32 sums each k-tile in a fresh accumulator and adds it to the total
    // with IEEE fp32 adds: the tensor core's own accumulation then only spans
    // 16 products, which keeps the result at fp32 accuracy.
    if constexpr (Tr::kWgmma) {
      // Warpgroup wg: rows [64wg, 64wg+64) of A, all BN rows of B; a k-step
      // advances both descriptors by 32 bytes inside the swizzle atom.
      const uint32_t a_tile = sa + (warp / 4) * 64 * BKB, b_tile = sa + BM * BKB;
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < Tr::KS; ++ks)
        Wgmma<T, BN>::run(&acc[0][0][0], sw128_desc(a_tile + 32 * ks), sw128_desc(b_tile + 32 * ks));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      continue;
    }
    // 3xTF32: this k-tile's partial sums (ptx.cuh, SplitMma).
    SplitMma<T, Tr::kSplit, MI, NI> sm;
    sm.begin_tile();
#pragma unroll
    for (int ks = 0; ks < Tr::KS; ++ks) {
      // B fragments for the whole warp tile, then one A fragment at a time
      // (4 live registers instead of 4*MI: the 128x128 tile fits in 128).
      uint32_t bfr[NI][2], bs[NI][2];
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        uint32_t r[4];
        ldmatrix_x4(r, sa + b_lds[ks] + j * 16 * BKB);
        bfr[2 * j][0] = r[0]; bfr[2 * j][1] = r[1];
        bfr[2 * j + 1][0] = r[2]; bfr[2 * j + 1][1] = r[3];
      }
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int t = 0; t < 2; ++t) sm.operand(bfr[j][t], bs[j][t]);
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        uint32_t af[4], as[4];
        ldmatrix_x4(af, sa + a_lds[ks] + i * 16 * BKB);
#pragma unroll
        for (int t = 0; t < 4; ++t) sm.operand(af[t], as[t]);
#pragma unroll
        for (int j = 0; j < NI; ++j) sm.mma(acc, i, j, af, as, bfr[j], bs[j]);
      }
    }
    sm.end_tile(acc);
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- epilogue ----------------------------------------------------------------
  float* sC = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int m = wm * Tr::WM + i * 16 + (lane >> 2);
      const int n = wn * Tr::WN + j * 8 + 2 * (lane & 3);
      put_acc<kChanOut, Tr::LDC_M, Tr::LDC_N>(sC, m, n, acc[i][j]);
    }
  store_c_tile<T, BM, BN, Tr::LDC_M, Tr::LDC_N, NT, kChanOut>(
      prm, sC, reinterpret_cast<int64_t*>(smem + Tr::kRowTableOff), tid, t);
}

// One block per (BM x BN tile, stride phase, group), as tile_geo decodes it;
// Tr gives the tile, the block size and the dynamic shared memory.
template <class Tr, class Kernel>
cudaError_t launch_tiles(Kernel kern, const IgemmParams& prm, cudaStream_t st) {
  const int64_t mt = (prm.max_m + Tr::BM - 1) / Tr::BM;
  const int64_t nt = (prm.Nc + Tr::BN - 1) / Tr::BN;
  const int64_t blocks = mt * nt * prm.phases_y * prm.phases_x * prm.p.groups;
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
  cudaError_t e =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  kern<<<unsigned(blocks), Tr::kThreads, Tr::kSmemBytes, st>>>(prm);
  return cudaGetLastError();
}

#if defined(CONVT2D_WGMMA)
// ---- warp-specialised wgmma kernel (sm_90a) ---------------------------------------
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

// Tile 256 x BN, 128-byte K rows, S stages, 3 warpgroups: warpgroup 0 loads
// (cp.async into the 128-byte-swizzled tiles), warpgroups 1 and 2 each run
// wgmma on 128 rows (two m64 halves) x BN. Stage hand-off by mbarriers:
// full[s] (128 loader arrivals, each made by the hardware when that thread's
// copies into the stage have landed: cp.async.mbarrier.arrive.noinc; the
// consumer fences them to the async proxy after its wait) and empty[s] (256
// consumer arrivals once the wgmma reading the stage has retired: each
// consumer keeps one wgmma group in flight, wait_group 1). The loader runs up
// to S - 1 tiles ahead.
template <typename T, int BN_, int S_>
struct WsTraits {
  using Tp = T;
  static constexpr int BM = 256, BN = BN_, S = S_, BKB = 128, CH = 8, KS = 4;
  static constexpr int E = 16 / int(sizeof(T)), BK = BKB / int(sizeof(T));
  static constexpr int kThreads = 384, kConsumers = 256;
  static constexpr int NI = BN / 8;
  static constexpr int kStageBytes = (BM + BN) * BKB;
  static constexpr int kPipeBytes = S * kStageBytes;
  static constexpr int LDC_M = BM + 4, LDC_N = BN + 4;
  static constexpr int kCBytes = (BN * LDC_M > BM * LDC_N ? BN * LDC_M : BM * LDC_N) * 4;
  static constexpr int kRowTableOff = kPipeBytes > kCBytes ? kPipeBytes : kCBytes;
  static constexpr int kBarOff = kRowTableOff + BM * 8;
  static constexpr int kSmemBytes = kBarOff + 2 * S * 8 + 1024;
  static_assert(BN == 64 || BN == 128, "BN");
};

template <class Tr, bool kChanOut>
__global__ void __launch_bounds__(384, 1) tc_ws_kernel(const IgemmParams prm) {
  using T = typename Tr::Tp;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, E = Tr::E, S = Tr::S;
  constexpr int BKB = Tr::BKB, CH = Tr::CH, NI = Tr::NI;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t sraw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sbase = (sraw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - sraw);
  const Problem& p = prm.p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;

  const TileGeo t = tile_geo<BM, BN>(prm);
  if (t.m0 >= t.M) return;
  const int Kc = int(prm.Kc), Nc = int(prm.Nc);
  const int kc_tiles = (Kc + BK - 1) / BK;
  const int iters = t.ntap_y * t.ntap_x * kc_tiles;
  const uint32_t full0 = sbase + Tr::kBarOff, empty0 = full0 + S * 8;
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full0 + 8 * s, 128);
      mbar_init(empty0 + 8 * s, Tr::kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    // ---- loader: rows rb + 64 i, chunks sub + 2 c (a warp-wide cp.async covers
    // whole 32-byte sectors) ---------------------------------------------------------
    const T* __restrict__ src = static_cast<const T*>(prm.src.ptr);
    const T* __restrict__ wpk = static_cast<const T*>(prm.wpk);
    const int sub = tid & 1, rb = tid >> 1;
    constexpr int AR = BM / 64, BR = BN / 64;
    int64_t a_off[AR];
    int a_iy[AR], a_ix[AR];
#pragma unroll
    for (int i = 0; i < AR; ++i)
      a_off[i] = a_row_source(prm, t, t.m0 + rb + 64 * i, sub * E, a_iy[i], a_ix[i]);
    const int64_t tap_stride = int64_t(Nc) * Kc;
    const T* b_base = wpk + t.g * p.kh * p.kw * tap_stride + sub * E;
    bool b_ok[BR];
#pragma unroll
    for (int i = 0; i < BR; ++i) b_ok[i] = t.n0 + rb + 64 * i < Nc;
    const uint32_t uHs = uint32_t(prm.Hs), uWs = uint32_t(prm.Ws);
    TapCursor l(prm, t, tap_stride);
    for (int it = 0; it < iters; ++it) {
      const int s = it % S;
      if (it >= S) mbar_wait(empty0 + 8 * s, uint32_t((it / S - 1) & 1));
      const uint32_t sa = sbase + s * Tr::kStageBytes, sb = sa + BM * BKB;
      const int c0 = l.ct * BK + sub * E;
#pragma unroll
      for (int i = 0; i < AR; ++i) {
        const int r = rb + 64 * i;
        const bool row_ok = uint32_t(a_iy[i] + l.dy) < uHs && uint32_t(a_ix[i] + l.dx) < uWs;
        const T* ga = src + (a_off[i] + l.delta + l.ct * BK);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool ok = row_ok && c0 + 2 * c * E < Kc;
          cp_async16(sa + swz<CH>(r, sub + 2 * c), ok ? ga + 2 * c * E : src, ok ? 16 : 0);
        }
      }
#pragma unroll
      for (int i = 0; i < BR; ++i) {
        const int r = rb + 64 * i;
        const T* gb = b_base + (t.n0 + r) * Kc + (l.btap + l.ct * BK);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const bool ok = b_ok[i] && c0 + 2 * c * E < Kc;
          cp_async16(sb + swz<CH>(r, sub + 2 * c), ok ? gb + 2 * c * E : wpk, ok ? 16 : 0);
        }
      }
      mbar_arrive_cp_async(full0 + 8 * s);
      l.advance(t, kc_tiles);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // no exit with copies in flight
    return;
  }

  // ---- consumers: warpgroup cw = wg - 1 owns rows [128 cw, 128 cw + 128) ---------------
  const int cw = wg - 1, ctid = tid - 128;
  float acc[2][NI][4];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int t = 0; t < 4; ++t) acc[h][j][t] = 0.f;
  for (int it = 0; it < iters; ++it) {
    const int s = it % S;
    mbar_wait(full0 + 8 * s, uint32_t((it / S) & 1));
    // The stage was written by cp.async (generic proxy); wgmma reads it
    // through the async proxy.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const uint32_t sa = sbase + s * Tr::kStageBytes;
    const uint32_t a_tile = sa + cw * 128 * BKB, b_tile = sa + BM * BKB;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int ks = 0; ks < Tr::KS; ++ks)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        Wgmma<T, BN>::run(&acc[h][0][0], sw128_desc(a_tile + h * 64 * BKB + 32 * ks),
                          sw128_desc(b_tile + 32 * ks));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    if (it > 0) mbar_arrive(empty0 + 8 * ((it - 1) % S));
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  sync_threads_n<Tr::kConsumers>();  // both consumers done reading the stages
  float* sC = reinterpret_cast<float*>(smem);
  const int wq = warp & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int j = 0; j < NI; ++j)
      put_acc<kChanOut, Tr::LDC_M, Tr::LDC_N>(sC, cw * 128 + h * 64 + wq * 16 + (lane >> 2),
                                              j * 8 + 2 * (lane & 3), acc[h][j]);
  store_c_tile<T, BM, BN, Tr::LDC_M, Tr::LDC_N, Tr::kConsumers, kChanOut>(
      prm, sC, reinterpret_cast<int64_t*>(smem + Tr::kRowTableOff), ctid, t);
}

template <class Tr>
cudaError_t run_ws(const IgemmParams& prm, cudaStream_t st) {
  return BOOL_SWITCH(prm.dst.sc == 1, kChan, [&] {
    return launch_tiles<Tr>(tc_ws_kernel<Tr, kChan>, prm, st);
  });
}
#endif  // CONVT2D_WGMMA

template <class Tr>
cudaError_t run_tc(const IgemmParams& prm, cudaStream_t st) {
  return BOOL_SWITCH(prm.dst.sc == 1, kChan, [&] {
    return launch_tiles<Tr>(tc_igemm_kernel<Tr, kChan>, prm, st);
  });
}

// Tile choice by the GEMM's N and K row width by the channels per group.
// CONVT2D_TC_TILE (bf16 only, for A/B timing): 128x128x1 | 128x128x2 |
// 128x64 | 64x128 (BMxBN, x = min blocks per SM).
template <typename T, bool kSplit, int BKB>
cudaError_t run_tc_bn(const IgemmParams& prm, cudaStream_t st) {
  constexpr int S = BKB == 128 ? 3 : 4;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    const char* e = std::getenv("CONVT2D_TC_TILE");
    const std::string v = e ? e : "";
    if (v == "128x128x1") return run_tc<TcTraits<T, 128, 128, 2, 4, S, BKB, false, 1>>(prm, st);
    if (v == "128x64") return run_tc<TcTraits<T, 128, 64, 4, 2, S, BKB, false, 2>>(prm, st);
    if (v == "64x128") return run_tc<TcTraits<T, 64, 128, 2, 4, S, BKB, false, 2>>(prm, st);
  }
  // 3xTF32 (split operands, per-tile partial sums) needs more than 128
  // registers: one block per SM.
  constexpr int kMB = kSplit ? 1 : 2;
  if (prm.Nc <= 32) return run_tc<TcTraits<T, 128, 32, 8, 1, S, BKB, kSplit, kMB>>(prm, st);
  if constexpr (kSplit) {
    return run_tc<TcTraits<T, 128, 64, 4, 2, S, BKB, kSplit, kMB>>(prm, st);
  } else {
    if (prm.Nc <= 64) return run_tc<TcTraits<T, 128, 64, 4, 2, S, BKB, false, 2>>(prm, st);
    return run_tc<TcTraits<T, 128, 128, 2, 4, S, BKB, false, 2>>(prm, st);
  }
}

// wgmma kernels exist when the build targets sm_90a (setup.py defines
// CONVT2D_WGMMA); they run on compute capability 9.x for 128-byte K rows and
// more than 32 GEMM columns. CONVT2D_NO_WGMMA=1 turns them off (A/B timing).
bool use_wgmma(const IgemmParams& prm) {
#if defined(CONVT2D_WGMMA)
  if (prm.Nc <= 32) return false;
  const char* e = std::getenv("CONVT2D_NO_WGMMA");
  if (e && e[0] == '1') return false;
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  int minor = 0;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;  // sm_90a machine code loads on 9.0 only
#else
  (void)prm;
  return false;
#endif
}

template <typename T, bool kSplit>
cudaError_t run_tc_k(const IgemmParams& prm, cudaStream_t st) {
#if defined(CONVT2D_WGMMA)
  if constexpr (!kSplit) {
    if (prm.Kc * int64_t(sizeof(T)) >= 128 && use_wgmma(prm)) {
      // Warp-specialised 256-row tiles (one block per SM) when the GEMM has more
      // than 64 columns and a long enough K loop (average K row >= 12 tiles of
      // 128 bytes); below that the fill and the unoverlapped epilogue of a
      // single resident block cost more than the two-block kernel (measured:
      // unet 0.197 vs 0.176 ms bf16, seedB (Nc 64) 2.27 vs 2.22 ms).
      // prm.ws (autotuning) or CONVT2D_WS=0 / 1 (A/B timing) force it off / on.
      const char* ws = std::getenv("CONVT2D_WS");
      const int64_t k_row_bytes = prm.Kc * prm.p.kh * prm.p.kw * int64_t(sizeof(T)) /
                                  (prm.phases_y * prm.phases_x);
      const bool ws_auto = prm.Nc > 64 && k_row_bytes >= 12 * 128;
      if (prm.ws >= 0 ? prm.ws == 1 : ws ? ws[0] == '1' : ws_auto) {
        if (prm.Nc <= 64) return run_ws<WsTraits<T, 64, 5>>(prm, st);
        return run_ws<WsTraits<T, 128, 4>>(prm, st);
      }
      if (prm.Nc <= 64) return run_tc<TcTraits<T, 128, 64, 8, 1, 4, 128, false, 2, true>>(prm, st);
      return run_tc<TcTraits<T, 128, 128, 8, 1, 3, 128, false, 2, true>>(prm, st);
    }
  }
#endif
  if (prm.Kc * int64_t(sizeof(T)) >= 128) return run_tc_bn<T, kSplit, 128>(prm, st);
  return run_tc_bn<T, kSplit, 64>(prm, st);
}

}  // namespace

bool tc_igemm_supported(const IgemmParams& prm, DType dt) {
  if (dt == DType::kDouble) return false;
  const int64_t E = dt == DType::kFloat ? 4 : 8;
  const auto aligned = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  const int64_t big = int64_t(1) << 30;
  // The kernel keeps per-phase source offsets (stride, padding, dilation x
  // taps) and source pixel indices in 32-bit ints: bound what feeds them.
  const Problem& p = prm.p;
  const int64_t lim = int64_t(1) << 29;
  if (p.sh >= lim || p.sw >= lim || p.ph >= lim || p.pw >= lim || p.dh * (p.kh - 1) >= lim ||
      p.dw * (p.kw - 1) >= lim)
    return false;
  // A size-1 dimension's stride is only ever multiplied by 0.
  const bool sh_ok = prm.Hs == 1 || prm.src.sh % E == 0;
  const bool sw_ok = prm.Ws == 1 || prm.src.sw % E == 0;
  return prm.src.sc == 1 && prm.Kc % E == 0 && prm.src.sn % E == 0 && sh_ok && sw_ok &&
         aligned(prm.src.ptr) && aligned(prm.wpk) && prm.Hs < big && prm.Ws < big &&
         prm.Hd < big && prm.Wd < big && prm.Kc * prm.Nc < big;
}

cudaError_t launch_tc_igemm(const IgemmParams& prm, DType dt, MathMode math, cudaStream_t st) {
  switch (dt) {
    case DType::kHalf: return run_tc_k<__half, false>(prm, st);
    case DType::kBFloat16: return run_tc_k<__nv_bfloat16, false>(prm, st);
    case DType::kFloat:
      if (math == MathMode::kIEEE) return run_tc_k<float, true>(prm, st);
      return run_tc_k<float, false>(prm, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace convt2d
