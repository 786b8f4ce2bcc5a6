// Tensor-core implicit GEMM: mma.sync on K-major operands, cp.async
// multi-stage pipeline into XOR-swizzled shared memory, ldmatrix fragments,
// C tile staged through shared memory for coalesced NCHW or NHWC stores.
//
// Mapping (common/kernels.h, IgemmParams): one GEMM per stride phase and group.
//   A[m][k]: m = output pixel of the phase, k = (tap, channel); the source is
//            read channels-last (src.sc == 1), so a 16-byte chunk of A is 8
//            (16-bit) or 4 (fp32) consecutive channels of one source pixel.
//   B[n][k]: weight packed [G][kh][kw][Nc][Kc] (K contiguous).
// Every row of a shared-memory tile is 64 bytes of K (BK = 32 16-bit or 16
// fp32 elements) = 4 chunks; chunk c of row r lives at chunk c ^ ((r>>1)&3),
// which makes both the cp.async stores and the ldmatrix reads conflict-free.
// The fragment addressing is the same for bf16/fp16 (m16n8k16) and tf32
// (m16n8k8): a k-step is 32 bytes = 2 chunks in both cases.
#include "cuda/common/implicit_gemm_tile.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma_maps.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/common/ws_collectives.cuh"
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

template <class Tr, bool kChanOut>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) tc_igemm_kernel(const IgemmParams prm) {
  if constexpr (Tr::kWgmma && !kSm90aPass<Tr>) {
    __trap();  // not compiled for this target (see kSm90aPass)
  } else {
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
  int iters = t.ntap_y * t.ntap_x * kc_tiles;
  // Split-K: this block's range of the K loop (possibly empty: its partial is then zero).
  int it_begin = 0;
  if (prm.k_splits > 1) {
    const int per = (iters + prm.k_splits - 1) / prm.k_splits;
    it_begin = min(iters, int(blockIdx.y) * per);
    iters = min(iters, it_begin + per) - it_begin;
  }
  const uint32_t uHs = uint32_t(Hs), uWs = uint32_t(Ws);
  const uint32_t a_dst = swz<CH>(a_r, 0), b_dst = swz<CH>(b_r, 0);

  // Loader position (runs S-1 tiles ahead of the math).
  TapCursor l(prm, t, tap_stride);
  if (it_begin > 0) l.seek(t, kc_tiles, it_begin);
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
  zero_acc(acc);

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
      wgmma_ktile<T, BN, 1>(acc, sa + (warp / 4) * 64 * BKB, sa + BM * BKB);
      wgmma_wait<0>();
      continue;
    }
    // 3xTF32: this k-tile's partial sums (common/ptx.cuh, SplitMma).
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
  if (prm.k_splits > 1)
    store_c_tile<float, BM, BN, Tr::LDC_M, Tr::LDC_N, NT, kChanOut>(
        prm, sC, reinterpret_cast<int64_t*>(smem + Tr::kRowTableOff), tid, t,
        prm.split_ws + int64_t(blockIdx.y) * prm.split_stride);
  else
    store_c_tile<T, BM, BN, Tr::LDC_M, Tr::LDC_N, NT, kChanOut>(
        prm, sC, reinterpret_cast<int64_t*>(smem + Tr::kRowTableOff), tid, t);
  }  // if constexpr (kSm90aPass)
}

// One block per (BM x BN tile, stride phase, group), as tile_geo decodes it;
// Tr gives the tile, the block size and the dynamic shared memory.
template <class Tr, class Kernel>
cudaError_t launch_tiles(Kernel kern, const IgemmParams& prm, cudaStream_t st) {
  const int64_t mt = (prm.max_m + Tr::BM - 1) / Tr::BM;
  const int64_t nt = (prm.Nc + Tr::BN - 1) / Tr::BN;
  const int64_t blocks = mt * nt * prm.phases_y * prm.phases_x * prm.p.groups;
  if (blocks > 0x7fffffffLL || prm.k_splits < 1 || prm.k_splits > 65535)
    return cudaErrorInvalidConfiguration;
  cudaError_t e =
      cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  kern<<<dim3(unsigned(blocks), unsigned(prm.k_splits)), Tr::kThreads, Tr::kSmemBytes, st>>>(prm);
  return cudaGetLastError();
}

#if defined(CONVT2D_WGMMA)
// ---- warp-specialised wgmma kernel (sm_90a) ---------------------------------------
// Tile 256 x BN, 128-byte K rows, S stages, 3 warpgroups: warpgroup 0 loads
// (cp.async into the 128-byte-swizzled tiles), warpgroups 1 and 2 each run
// wgmma on 128 rows (two m64 halves) x BN. Stage hand-off by mbarriers:
// full[s] (128 loader arrivals, each made by the hardware when that thread's
// copies into the stage have landed: cp.async.mbarrier.arrive.noinc; the
// consumer fences them to the async proxy after its wait) and empty[s] (256
// consumer arrivals once the wgmma reading the stage has retired: each
// consumer keeps one wgmma group in flight, wait_group 1). The loader runs up
// to S - 1 tiles ahead.
template <typename T, int BN_, int S_, int TPR_ = 4>
struct WsTraits {
  using Tp = T;
  static constexpr int BM = 256, BN = BN_, S = S_, BKB = 128, CH = 8, KS = 4;
  // Loader: TPR threads per 128-byte row, each CPR chunks (sub + TPR c); a pass of
  // the 128 loader threads covers RPI rows. TPR 4 (two sectors of a row per request)
  // halves the L2 requests of TPR 2 (one sector): measured bf16 forward 1.87 -> 1.64 ms
  // (dense stride-1, 128 outputs per group), 0.161 -> 0.134 (k=4 stride 2, 256 -> 128);
  // TPR 8 (whole rows, 4x fewer requests, L2 78% -> 32% busy) is slower than 4 (1.75 ms):
  // more rows per loader thread.
  static constexpr int TPR = TPR_, CPR = 8 / TPR_, RPI = 128 / TPR_;
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

// TMA loader (kTma): one thread issues, per stage, one im2col load of the
// 256 A rows (the phase's tensor map walks the phase's pixel window, shifted by
// the tap) and one tiled load of the BN x 128-byte B box; both land in the
// 128-byte swizzle the wgmma descriptors read, zero-filled outside the tensors.
// One map per stride phase (their pixel windows differ); make_tma_maps
// (common/tma_maps.cuh) says where it applies.
template <class Tr, bool kChanOut, bool kTma>
__global__ void __launch_bounds__(384, 1) tc_ws_kernel(const __grid_constant__ TmaArgs<kTma> args) {
  if constexpr (!kSm90aPass<Tr>) {
    __trap();  // not compiled for this target (see kSm90aPass)
  } else {
  using T = typename Tr::Tp;
  const IgemmParams& prm = args.prm;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, E = Tr::E, S = Tr::S;
  constexpr int BKB = Tr::BKB, CH = Tr::CH, NI = Tr::NI;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t sraw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sbase = (sraw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - sraw);
  const Problem& p = prm.p;
  const int tid = threadIdx.x, warp = tid >> 5, wg = warp >> 2;

  const TileGeo t = tile_geo<BM, BN>(prm);
  if (t.m0 >= t.M) return;
  const int Kc = int(prm.Kc), Nc = int(prm.Nc);
  const int kc_tiles = (Kc + BK - 1) / BK;
  const int iters = t.ntap_y * t.ntap_x * kc_tiles;
  const StageRing<S> ring(sbase + Tr::kBarOff);
  if (tid == 0) {
    ring.init(kTma ? 1 : 128, Tr::kConsumers);
    mbar_init_fence();
  }
  __syncthreads();

  if constexpr (kTma) {
    if (wg == 0) {
      if (tid != 0 || iters == 0) return;
      const TmaTile m = tma_tile(args, t);
      const int lo_y = m.lo_y, lo_x = m.lo_x;
      const int64_t n = udiv_fast(t.m0, t.pix), rem = t.m0 - n * t.pix;
      const int64_t qy = udiv_fast(rem, t.nqx), qx = rem - qy * t.nqx;
      const int bx = int(qx) * t.im_x + lo_x, by = int(qy) * t.im_y + lo_y;
      const int c_base = int(t.g * prm.Kc);
      const int b_row = int((t.g * p.kh * p.kw) * prm.Nc + t.n0);
      int ct = 0, jx = 0, jy = 0;
      for (int it = 0; it < iters; ++it) {
        ring.acquire(it);
        const uint32_t sa = sbase + ring.stage(it) * Tr::kStageBytes, sb = sa + BM * BKB;
        const uint32_t full = ring.full_bar(it);
        mbar_arrive_expect_tx(full, Tr::kStageBytes);
        tma_load_im2col4(sa, m.a, full, c_base + ct * BK, bx, by, int(n),
                         uint16_t(t.ia_x + jx * t.it_x - lo_x),
                         uint16_t(t.ia_y + jy * t.it_y - lo_y));
        const int tap = (t.k0y + jy * t.ksy) * p.kw + t.k0x + jx * t.ksx;
        tma_load_2d(sb, m.b, full, ct * BK, b_row + tap * int(prm.Nc));
        if (++ct == kc_tiles) {
          ct = 0;
          if (++jx == t.ntap_x) { jx = 0; ++jy; }
        }
      }
      return;
    }
  } else if (wg == 0) {
    // ---- loader: rows rb + RPI i, chunks sub + TPR c (a warp-wide cp.async covers
    // 32 / TPR rows of TPR * 16 bytes each) --------------------------------------------
    const T* __restrict__ src = static_cast<const T*>(prm.src.ptr);
    const T* __restrict__ wpk = static_cast<const T*>(prm.wpk);
    constexpr int TPR = Tr::TPR, CPR = Tr::CPR, RPI = Tr::RPI;
    const int sub = tid % TPR, rb = tid / TPR;
    constexpr int AR = BM / RPI, BR = BN / RPI;
    int64_t a_off[AR];
    int a_iy[AR], a_ix[AR];
#pragma unroll
    for (int i = 0; i < AR; ++i)
      a_off[i] = a_row_source(prm, t, t.m0 + rb + RPI * i, sub * E, a_iy[i], a_ix[i]);
    const int64_t tap_stride = int64_t(Nc) * Kc;
    const T* b_base = wpk + t.g * p.kh * p.kw * tap_stride + sub * E;
    bool b_ok[BR];
#pragma unroll
    for (int i = 0; i < BR; ++i) b_ok[i] = t.n0 + rb + RPI * i < Nc;
    const uint32_t uHs = uint32_t(prm.Hs), uWs = uint32_t(prm.Ws);
    TapCursor l(prm, t, tap_stride);
    for (int it = 0; it < iters; ++it) {
      ring.acquire(it);
      const uint32_t sa = sbase + ring.stage(it) * Tr::kStageBytes, sb = sa + BM * BKB;
      const int c0 = l.ct * BK + sub * E;
#pragma unroll
      for (int i = 0; i < AR; ++i) {
        const int r = rb + RPI * i;
        const bool row_ok = uint32_t(a_iy[i] + l.dy) < uHs && uint32_t(a_ix[i] + l.dx) < uWs;
        const T* ga = src + (a_off[i] + l.delta + l.ct * BK);
#pragma unroll
        for (int c = 0; c < CPR; ++c) {
          const bool ok = row_ok && c0 + TPR * c * E < Kc;
          cp_async16(sa + swz<CH>(r, sub + TPR * c), ok ? ga + TPR * c * E : src, ok ? 16 : 0);
        }
      }
#pragma unroll
      for (int i = 0; i < BR; ++i) {
        const int r = rb + RPI * i;
        const T* gb = b_base + (t.n0 + r) * Kc + (l.btap + l.ct * BK);
#pragma unroll
        for (int c = 0; c < CPR; ++c) {
          const bool ok = b_ok[i] && c0 + TPR * c * E < Kc;
          cp_async16(sb + swz<CH>(r, sub + TPR * c), ok ? gb + TPR * c * E : wpk, ok ? 16 : 0);
        }
      }
      mbar_arrive_cp_async(ring.full_bar(it));
      l.advance(t, kc_tiles);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");  // no exit with copies in flight
    return;
  }

  // ---- consumers: warpgroup cw = wg - 1 owns rows [128 cw, 128 cw + 128) ---------------
  static_assert(Tr::KS == 4 && BKB == 128, "wgmma_ktile: 128-byte K rows, 4 k-steps");
  const int cw = wg - 1, ctid = tid - 128;
  float acc[2][NI][4];
  zero_acc(acc);
  for (int it = 0; it < iters; ++it) {
    ring.wait(it);
    // A cp.async stage was written through the generic proxy; wgmma reads it
    // through the async proxy (TMA writes through the async proxy already).
    if constexpr (!kTma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const uint32_t sa = sbase + ring.stage(it) * Tr::kStageBytes;
    wgmma_ktile<T, BN, 2>(acc, sa + cw * 128 * BKB, sa + BM * BKB);
    wgmma_wait<1>();
    if (it > 0) ring.release(ring.stage(it - 1));
  }
  wgmma_wait<0>();
  sync_threads_n<Tr::kConsumers>();  // both consumers done reading the stages
  store_consumer_tile<T, BM, BN, Tr::LDC_M, Tr::LDC_N, Tr::kRowTableOff, Tr::kConsumers, kChanOut,
                      false, 2>(prm, smem, acc, cw * 128, ctid, t);
  }  // if constexpr (kSm90aPass)
}

template <class Tr, bool kTma>
cudaError_t launch_ws(const TmaArgs<kTma>& args, cudaStream_t st) {
  const IgemmParams& prm = args.prm;
  const int64_t mt = (prm.max_m + Tr::BM - 1) / Tr::BM;
  const int64_t nt = (prm.Nc + Tr::BN - 1) / Tr::BN;
  const int64_t blocks = mt * nt * prm.phases_y * prm.phases_x * prm.p.groups;
  return BOOL_SWITCH(prm.dst.sc == 1, kChan, [&] {
    return launch_tile_grid<Tr>(tc_ws_kernel<Tr, kChan, kTma>, blocks, args, st);
  });
}

// The TMA maps of a warp-specialised launch (false where TMA does not apply, or where
// the cp.async loader is forced, Variant::loader = 0: then the cp.async loader runs).
template <class Tr>
bool ws_tma_args(const IgemmParams& prm, TmaArgs<true>& a) {
  if (prm.var.loader == 0) return false;
  a.prm = prm;
  return make_tma_maps<typename Tr::Tp>(prm, Tr::BK, Tr::BN, Tr::BM, /*halo=*/false, a.tma);
}

template <class Tr>
cudaError_t run_ws(const IgemmParams& prm, const TmaArgs<true>* tma, cudaStream_t st) {
  if (tma) return launch_ws<Tr, true>(*tma, st);
  TmaArgs<false> a;
  a.prm = prm;
  return launch_ws<Tr, false>(a, st);
}
#endif  // CONVT2D_WGMMA

template <class Tr>
cudaError_t run_tc(const IgemmParams& prm, cudaStream_t st) {
  return BOOL_SWITCH(prm.dst.sc == 1, kChan, [&] {
    return launch_tiles<Tr>(tc_igemm_kernel<Tr, kChan>, prm, st);
  });
}

// Tile choice by the GEMM's N and K row width by the channels per group.
// Variant::igemm_tile (bf16 only, tests and A/B timing): 0 128x128 at one block per SM,
// 1 128x64, 2 64x128 (BM x BN).
template <typename T, bool kSplit, int BKB>
cudaError_t run_tc_bn(const IgemmParams& prm, cudaStream_t st) {
  constexpr int S = BKB == 128 ? 3 : 4;
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    switch (prm.var.igemm_tile) {
      case 0: return run_tc<TcTraits<T, 128, 128, 2, 4, S, BKB, false, 1>>(prm, st);
      case 1: return run_tc<TcTraits<T, 128, 64, 4, 2, S, BKB, false, 2>>(prm, st);
      case 2: return run_tc<TcTraits<T, 64, 128, 2, 4, S, BKB, false, 2>>(prm, st);
      default: break;
    }
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

// The wgmma kernels exist when the build targets sm_90a (setup.py defines CONVT2D_WGMMA) and
// run on compute capability 9.0, for more than 32 GEMM columns (igemm_caps).
bool use_wgmma(const IgemmParams& prm) {
  if (prm.Nc <= 32 || prm.ws == 3) return false;
  return wgmma_device();
}

// The kernel prm.ws names (the planner's choice, cuda::igemm_kernel): 1 the warp-specialised
// 256-row tiles (TMA loader where its maps encode, else cp.async), 0 the two-block kernel
// (the only wgmma kernel that splits K), 3 or no wgmma: mma.sync.
template <typename T, bool kSplit>
cudaError_t run_tc_k(const IgemmParams& prm, cudaStream_t st) {
#if defined(CONVT2D_WGMMA)
  if constexpr (!kSplit) {
    if (prm.Kc * int64_t(sizeof(T)) >= 128 && use_wgmma(prm)) {
      if (prm.ws == 1 && prm.k_splits == 1) {
        using Ws64 = WsTraits<T, 64, 5>;
        using Ws128 = WsTraits<T, 128, 4>;
        TmaArgs<true> a;
        const bool tma = prm.Nc <= 64 ? ws_tma_args<Ws64>(prm, a) : ws_tma_args<Ws128>(prm, a);
        if (prm.Nc <= 64) return run_ws<Ws64>(prm, tma ? &a : nullptr, st);
        return run_ws<Ws128>(prm, tma ? &a : nullptr, st);
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

bool wgmma_device() {
#if defined(CONVT2D_WGMMA)
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return false;
  int minor = 0;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;  // sm_90a machine code loads on 9.0 only
#else
  return false;
#endif
}

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

// Whether the warp-specialised kernel would load through TMA (its maps encode).
static bool ws_tma_applies(const IgemmParams& prm, DType dt) {
#if defined(CONVT2D_WGMMA)
  if (prm.Kc * (dt == DType::kFloat ? 4 : 2) < 128) return false;
  const auto check = [&](auto tag) {
    using T = decltype(tag);
    TmaArgs<true> a;
    return prm.Nc <= 64 ? ws_tma_args<WsTraits<T, 64, 5>>(prm, a)
                        : ws_tma_args<WsTraits<T, 128, 4>>(prm, a);
  };
  switch (dt) {
    case DType::kHalf: return check(__half());
    case DType::kBFloat16: return check(__nv_bfloat16());
    case DType::kFloat: return check(float());
    default: return false;
  }
#else
  (void)prm; (void)dt;
  return false;
#endif
}

IgemmCaps igemm_caps(const IgemmParams& prm, DType dt, MathMode math) {
  IgemmCaps c;
  if (dt == DType::kDouble) return c;
  const int64_t size = dt == DType::kFloat ? 4 : 2;
  const bool split = dt == DType::kFloat && math == MathMode::kIEEE;  // 3xTF32: mma.sync or halo
  c.wgmma = !split && prm.Kc * size >= 128 && prm.Nc > 32 && wgmma_device();
  c.ws_tma = c.wgmma && ws_tma_applies(prm, dt);
  c.halo = tc_halo_supported(prm, dt, math);
  if (c.halo) c.halo_tap_cols = tc_halo_tap_cols(prm);
  return c;
}

cudaError_t launch_tc_igemm(const IgemmParams& prm_in, DType dt, MathMode math, cudaStream_t st) {
  if (prm_in.ws == 2) return launch_tc_halo(prm_in, dt, math, st);
  // NCHW x that only the 3xFP16 halo kernel reads itself: the channels-last copy first.
  IgemmParams prm = prm_in;
  if (prm.src_nchw.ptr) {
    const cudaError_t e = fill_src_nhwc(prm, nullptr, st);
    if (e != cudaSuccess) return e;
    prm.src_nchw = TensorRef{};
  }
  switch (dt) {
    case DType::kHalf: return run_tc_k<__half, false>(prm, st);
    case DType::kBFloat16: return run_tc_k<__nv_bfloat16, false>(prm, st);
    case DType::kFloat:
      if (math == MathMode::kIEEE) return run_tc_k<float, true>(prm, st);
      return run_tc_k<float, false>(prm, st);
    default: return cudaErrorInvalidValue;
  }
}

namespace {
// Split-K's reduction: four consecutive elements per thread (numel % 4 == 0, so ws's splits
// stay 16-byte aligned), or one.
template <typename T, int V>
__global__ void __launch_bounds__(256) split_reduce_kernel(const float* __restrict__ ws, int splits,
                                                           T* __restrict__ dst,
                                                           const T* __restrict__ bias,
                                                           int64_t numel, int64_t C,
                                                           int64_t inner) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x * V;
  for (int64_t e = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; e < numel; e += step) {
    float acc[V];
    if constexpr (V == 4) {
      const float4 v = *reinterpret_cast<const float4*>(ws + e);
      acc[0] = v.x; acc[1] = v.y; acc[2] = v.z; acc[3] = v.w;
      for (int s = 1; s < splits; ++s) {
        const float4 u = *reinterpret_cast<const float4*>(ws + int64_t(s) * numel + e);
        acc[0] += u.x; acc[1] += u.y; acc[2] += u.z; acc[3] += u.w;
      }
    } else {
      acc[0] = ws[e];
      for (int s = 1; s < splits; ++s) acc[0] += ws[int64_t(s) * numel + e];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float b = bias ? Cvt<T>::to_acc(bias[((e + j) / inner) % C]) : 0.f;
      dst[e + j] = Cvt<T>::from_acc(acc[j] + b);
    }
  }
}

template <typename T>
cudaError_t split_reduce(const float* ws, int splits, void* dst, const void* bias, int64_t numel,
                         int64_t C, int64_t inner, cudaStream_t st) {
  const bool vec = numel % 4 == 0;
  const int64_t items = vec ? numel / 4 : numel;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>((items + 255) / 256, int64_t(sm_count()) * 16));
  if (vec)
    split_reduce_kernel<T, 4><<<unsigned(blocks), 256, 0, st>>>(
        ws, splits, static_cast<T*>(dst), static_cast<const T*>(bias), numel, C, inner);
  else
    split_reduce_kernel<T, 1><<<unsigned(blocks), 256, 0, st>>>(
        ws, splits, static_cast<T*>(dst), static_cast<const T*>(bias), numel, C, inner);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_igemm_split_reduce(const float* ws, int splits, void* dst, const void* bias,
                                      int64_t numel, int64_t C, int64_t inner, DType dt,
                                      cudaStream_t st) {
  if (numel == 0) return cudaSuccess;
  switch (dt) {
    case DType::kHalf: return split_reduce<__half>(ws, splits, dst, bias, numel, C, inner, st);
    case DType::kBFloat16:
      return split_reduce<__nv_bfloat16>(ws, splits, dst, bias, numel, C, inner, st);
    case DType::kFloat: return split_reduce<float>(ws, splits, dst, bias, numel, C, inner, st);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace convt2d
