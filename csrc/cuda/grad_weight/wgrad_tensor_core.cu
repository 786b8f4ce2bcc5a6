// grad_weight on tensor cores (mma.sync, sm_80+).
//
// Mapping (common/kernels.h, WgradParams): per group g one GEMM with a long K,
//   C[m][n] = sum over input pixels k = (img, iy, ix) of A[m][k] * B[k][n]
//   m = tap * Cog + co   (tap = ky * kw + kx)        M = kh * kw * Cog
//   n = ci                                            N = Cig
//   A[m][k] = grad_out[img, g*Cog + co, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw]  (0 outside)
//   B[k][n] = x[img, g*Cig + ci, iy, ix]
// Both operands are read channels-last, so a 16-byte chunk is E consecutive
// channels of one pixel and a shared-memory tile row is one pixel (one k):
// the tiles are M- / N-major and are read with ldmatrix.trans (16-bit types)
// or with conflict-free 32-bit loads (tf32). Putting the taps in M lets a
// block load each x tile once for all the taps it covers.
// kXN (x NCHW, no channels-last copy of x): a B chunk is E consecutive pixels of one
// channel, a B tile row is one channel (BK pixels, rows padded by 16 bytes so 8 rows
// at one chunk, or 8 channels x 4 pixels of tf32, hit distinct banks), read with
// ldmatrix (not .trans) or 32-bit loads.
// Split-K: blockIdx.y takes k_per_split pixels and writes its partial C to
// ws[split][g][m][n] (fp32); a second kernel sums the splits in a fixed
// order into grad_weight [Cin][Cog][kh][kw] (deterministic).
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include <algorithm>
#include <atomic>
#include <mutex>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace convt2d {
namespace cuda {
namespace {

// BM x BN tile, BK pixels per stage. 16-bit types: m16n8k16 with fragments
// from ldmatrix.trans; fp32: m16n8k8 tf32 (kSplit: 3xTF32 for IEEE fp32).
// kWg (16-bit, sm_90a): the same loader into wgmma's MN-major 128-byte-swizzle tiles
// (tw_chunk) and a wgmma main loop (tw_wg_main); BM = 256 (two warpgroups of 128
// (tap, co) columns), BN = 64 or 128 ci rows.
template <typename T_, int BM_, int BN_, int WARPS_M_, int WARPS_N_, int BK_, int STAGES_,
          bool kSplit_, bool kWg_ = false>
struct TwTraits {
  using T = T_;
  static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int BK = BK_, STAGES = STAGES_;
  static constexpr bool kSplit = kSplit_, kWg = kWg_;
  static constexpr bool kTF32 = sizeof(T) == 4;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int E = 16 / int(sizeof(T));   // elements per 16-byte chunk
  // Tile rows are one pixel (one k) of BM (BN) channels. 16-bit: chunk c of
  // row r stored at c ^ (r & 7), so ldmatrix's 8 consecutive rows at one chunk
  // hit 8 distinct 16-byte bank groups. tf32: rows padded by 32 bytes, so a
  // warp's rows t = 0..3 at 8 consecutive floats hit banks 8t + q, all
  // distinct, and every fragment address is a base plus an immediate. (The
  // pad for 16-bit rows measured slower: more registers, one block less per SM.)
  static constexpr int PAD = kTF32 ? 32 : 0;
  static constexpr int RA = BM * int(sizeof(T)) + PAD;  // bytes per A row (one pixel)
  static constexpr int RB = BN * int(sizeof(T)) + PAD;
  static constexpr int CHA = BM / E, CHB = BN / E;
  static constexpr int TPR = kThreads / BK;  // loader threads per pixel row
  static constexpr int CPA = CHA / TPR, CPB = CHB / TPR;
  static constexpr int KSTEP = kTF32 ? 8 : 16;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N, MI = WM / 16, NI = WN / 8;
  // kXN: B tile [BN channels][BK pixels], rows padded by 16 bytes.
  static constexpr int RBN = BK * int(sizeof(T)) + 16;
  static constexpr int KCH = BK / E;  // 16-byte chunks per B row
  static constexpr int kStageBytes = BK * (RA + RB);
  static constexpr int kAlign = kWg ? 1024 : 128;  // wgmma's swizzle atoms: 1024 bytes
  static constexpr int kSmemBytes = STAGES * kStageBytes + kAlign;
  static constexpr int kStageBytesXN = BK * RA + BN * RBN;
  static constexpr int kSmemBytesXN = STAGES * kStageBytesXN + 128;
  static_assert((BM * sizeof(T)) % 128 == 0 && (BN * sizeof(T)) % 128 == 0,
                "swizzle / pad bank math needs rows of whole 128-byte lines");
  static_assert(kThreads % BK == 0 && CHA % TPR == 0 && CHB % TPR == 0 && CPA >= 1 && CPB >= 1,
                "loader");
  static_assert(MI >= 1 && NI % 2 == 0 && BK % KSTEP == 0, "warp tile");
  static_assert(!kSplit || kTF32, "3xTF32 is for fp32");
  static_assert(!kWg || (!kTF32 && BM == 256 && (BN == 64 || BN == 128) && kThreads == 256 &&
                         BK % 16 == 0 && STAGES >= 3 && (BK * 128) % 1024 == 0),
                "wgmma tile");
};


// Byte offset of 16-byte chunk ch of tile row `row` (see TwTraits).
// kWg: wgmma's MN-major 128-byte-swizzle layout, the tile split into 64-channel column
// blocks of BK rows x 128 bytes, chunk c of row r at (c ^ (r & 7)) inside its row.
template <class Tr>
__device__ __forceinline__ uint32_t tw_chunk(int row, int row_bytes, int ch) {
  if constexpr (Tr::kWg)
    return uint32_t((ch >> 3) * (Tr::BK * 128) + row * 128 + (((ch & 7) ^ (row & 7)) << 4));
  else if constexpr (Tr::kTF32) return uint32_t(row * row_bytes + ch * 16);
  else return uint32_t(row * row_bytes + ((ch ^ (row & 7)) << 4));
}

// wgmma descriptor of an MN-major 128-byte-swizzle operand: LBO = the stride between
// 64-element column blocks, SBO = 1024 bytes between 8-row (k) groups.
__device__ __forceinline__ uint64_t tw_mn_desc(uint32_t saddr, uint32_t lbo) {
  return uint64_t((saddr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// kWg main loop and epilogue. wgmma computes the transposed tile D[ci][(tap, co)]: its
// A operand is the x tile (BN ci x BK pixels, ci contiguous), its B operand the
// grad_out tile (BM (tap, co) x BK pixels); warpgroup wg takes columns
// [128 wg, 128 wg + 128) and all BN / 64 slabs of 64 ci (one m64n128k16 per slab and
// k-step). Loads run S - 2 stages ahead and one wgmma group stays in flight
// (wait_group 1): the stage a load overwrites was read by the group two back, which
// every warpgroup has waited for before the barrier that precedes the load.
template <class Tr, class Load>
__device__ __forceinline__ void tw_wg_main(Load& load_stage, const WgradParams& prm, int nk,
                                           uint32_t sbase, int m0, int n0, int g, int Mt,
                                           int Cig) {
  using T = typename Tr::T;
  constexpr int BK = Tr::BK, S = Tr::STAGES, MS = Tr::BN / 64;
  constexpr uint32_t kBlk = BK * 128;  // bytes of one 64-channel column block
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  float acc[MS][64];
#pragma unroll
  for (int s = 0; s < MS; ++s)
#pragma unroll
    for (int e = 0; e < 64; ++e) acc[s][e] = 0.f;
#pragma unroll
  for (int s = 0; s < S - 2; ++s) {
    if (s < nk) load_stage(s);
    cp_async_commit();
  }
  int rd = 0, wr = S - 2;
  for (int it = 0; it < nk; ++it) {
    cp_async_wait<S - 3>();
    // cp.async wrote through the generic proxy; wgmma reads through the async one.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    if (it + S - 2 < nk) load_stage(wr);
    cp_async_commit();
    wr = wr == S - 1 ? 0 : wr + 1;
    const uint32_t sa = sbase + rd * Tr::kStageBytes, sb = sa + BK * Tr::RA;
    rd = rd == S - 1 ? 0 : rd + 1;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks)
#pragma unroll
      for (int s = 0; s < MS; ++s)
        WgmmaMN<T, 128>::run(acc[s], tw_mn_desc(sb + s * kBlk + ks * 2048, kBlk),
                             tw_mn_desc(sa + wg * 2 * kBlk + ks * 2048, kBlk));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
  }
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  cp_async_wait<0>();

  // D fragment: row ci = slab*64 + 16*(warp % 4) + lane/4 (+8 for e & 2), column
  // 128 wg + 8 j + 2 (lane % 4) (+1 for e & 1), register 4 j + e.
  float* ws = static_cast<float*>(prm.workspace) +
              (int64_t(blockIdx.y) * prm.p.groups + g) * int64_t(Mt) * Cig;
#pragma unroll
  for (int s = 0; s < MS; ++s)
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ci = n0 + s * 64 + (warp & 3) * 16 + (lane >> 2) + (e >> 1) * 8;
        const int m = m0 + wg * 128 + j * 8 + 2 * (lane & 3) + (e & 1);
        if (ci < Cig && m < Mt) ws[int64_t(m) * Cig + ci] = acc[s][4 * j + e];
      }
}

template <class Tr, bool kXN>
__global__ void __launch_bounds__(Tr::kThreads) tc_wgrad_kernel(const WgradParams prm) {
  if constexpr (Tr::kWg && !kSm90aPass<Tr>) {
    __trap();  // not compiled for this target (see kSm90aPass)
  } else {
  using T = typename Tr::T;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, E = Tr::E, S = Tr::STAGES;
  constexpr int MI = Tr::MI, NI = Tr::NI, TPR = Tr::TPR, CPA = Tr::CPA, CPB = Tr::CPB;
  constexpr int RA = Tr::RA, RB = Tr::RB;
  constexpr int kStage = kXN ? Tr::kStageBytesXN : Tr::kStageBytes;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t sraw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sbase = (sraw + uint32_t(Tr::kAlign - 1)) & ~uint32_t(Tr::kAlign - 1);

  const Problem& p = prm.p;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int Cig = int(p.cin_g()), Cog = int(p.cout_g()), kw = int(p.kw);
  const int Mt = int(p.kh * p.kw) * Cog;
  const int mtiles = (Mt + BM - 1) / BM, ntiles = (Cig + BN - 1) / BN;
  int bid = blockIdx.x;
  const int mtile = bid % mtiles;
  bid /= mtiles;
  const int ntile = bid % ntiles;
  const int g = bid / ntiles;
  const int m0 = mtile * BM, n0 = ntile * BN;
  const int64_t K = p.N * p.H * p.W;
  const int64_t k_begin = int64_t(blockIdx.y) * prm.k_per_split;
  const int64_t k_end = min(K, k_begin + prm.k_per_split);
  const int nk = k_begin < k_end ? int((k_end - k_begin + BK - 1) / BK) : 0;

  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ go = static_cast<const T*>(prm.gout.ptr);

  // ---- loader: pixel row tid / TPR, chunks lc + c*TPR of each row ---------------
  // Both tensors are channels-last contiguous (the glue checks): x's pixel k
  // starts at k*Cin; grad_out's pixel (img, oy, ox) at ((img*Ho + oy)*Wo + ox)*Cout.
  // A chunk columns are fixed per thread, so their tap offsets are too; the
  // thread's pixel advances by BK a stage (mixed-radix add, no division).
  const int lrow = tid / TPR, lc = tid % TPR;
  const int Ho = int(p.Ho), Wo = int(p.Wo), H = int(p.H), W = int(p.W);
  const int sh = int(p.sh), sw = int(p.sw);
  int a_oy[CPA], a_ox[CPA];
  int64_t a_off[CPA];
#pragma unroll
  for (int c = 0; c < CPA; ++c) {
    const int m = m0 + (lc + c * TPR) * E;
    const int tap = m / Cog, co = m - tap * Cog;
    const int ky = tap / kw, kx = tap - ky * kw;
    a_oy[c] = m < Mt ? ky * int(p.dh) - int(p.ph) : -(1 << 30);  // invalid: fails the bounds test
    a_ox[c] = kx * int(p.dw) - int(p.pw);
    a_off[c] = (int64_t(m < Mt ? a_oy[c] : 0) * Wo + a_ox[c]) * p.Cout + int64_t(g) * Cog + co;
  }
  bool b_ok[CPB];
#pragma unroll
  for (int c = 0; c < CPB; ++c) b_ok[c] = n0 + (lc + c * TPR) * E < Cig;
  // kXN: thread tid loads chunk column bc (pixels bc*E..) of channel rows br + r*BRS;
  // (bimg, bp) is that chunk's image and pixel in the image, advanced by BK a stage.
  constexpr int BRS = Tr::kThreads / Tr::KCH, CPN = BN / BRS;
  static_assert(!kXN || (Tr::kThreads % Tr::KCH == 0 && BN % BRS == 0), "kXN loader");
  const int bc = tid % Tr::KCH, br = tid / Tr::KCH;
  const int64_t HWx = p.H * p.W;
  int64_t bimg = 0, bp = 0;
  int bleft = 0;
  const T* xrow = x;
  if constexpr (kXN) {
    const int64_t kb = k_begin + bc * E;
    bimg = kb / HWx;
    bp = kb - bimg * HWx;
    bleft = int(k_end - kb);
    xrow = x + (int64_t(g) * Cig + n0 + br) * HWx;
  }
  // Cursor: pixel k = (img, iy, ix), and pixels left in this split.
  int k = int(k_begin) + lrow, left = int(k_end - k_begin) - lrow;
  int img = 0, iy = 0, ix = 0;
  if (left > 0) {
    img = k / (H * W);
    const int r = k - img * (H * W);
    iy = r / W;
    ix = r - iy * W;
  }
  const int step_x = BK % W, step_y = (BK / W) % H, step_n = BK / (H * W);
  const T* xr = x + int64_t(k) * p.Cin + int64_t(g) * Cig + n0 + lc * E;
  // grad_out offset of (img, iy*sh, ix*sw), kept up to date with adds only:
  // per stage + D, and on a carry out of ix (iy) the row (image) correction.
  const int64_t C = p.Cout, rowC = int64_t(sh) * Wo * C, imgC = int64_t(Ho) * Wo * C;
  const int64_t D = int64_t(step_x) * sw * C + step_y * rowC + step_n * imgC;
  const int64_t CX = rowC - int64_t(W) * sw * C, CY = imgC - int64_t(H) * rowC;
  int64_t gofs = (int64_t(img) * Ho + int64_t(iy) * sh) * Wo * C + int64_t(ix) * sw * C;

  auto load_stage = [&](int stage) {
    const uint32_t sa = sbase + stage * kStage, sb = sa + BK * RA;
    const bool pv = left > 0;
    if constexpr (kXN) {
      const T* src = xrow + bimg * p.Cin * HWx + bp;
#pragma unroll
      for (int r = 0; r < CPN; ++r) {
        const bool ok = bleft > 0 && n0 + br + r * BRS < Cig;
        cp_async16(sb + uint32_t((br + r * BRS) * Tr::RBN + bc * 16),
                   ok ? src + int64_t(r) * BRS * HWx : x, ok ? 16 : 0);
      }
      bleft -= BK;
      bp += BK;
      while (bp >= HWx) { bp -= HWx; ++bimg; }
    } else {
#pragma unroll
      for (int c = 0; c < CPB; ++c) {
        const int ch = lc + c * TPR;
        const bool ok = pv && b_ok[c];
        cp_async16(sb + tw_chunk<Tr>(lrow, RB, ch), ok ? xr + c * TPR * E : x, ok ? 16 : 0);
      }
    }
    const int oy0 = iy * sh, ox0 = ix * sw;
#pragma unroll
    for (int c = 0; c < CPA; ++c) {
      const int ch = lc + c * TPR;
      const bool ok = pv && uint32_t(oy0 + a_oy[c]) < uint32_t(Ho) &&
                      uint32_t(ox0 + a_ox[c]) < uint32_t(Wo);
      const T* src = go + (gofs + a_off[c]);
      cp_async16(sa + tw_chunk<Tr>(lrow, RA, ch), ok ? src : go, ok ? 16 : 0);
    }
    // advance by BK pixels
    left -= BK;
    xr += int64_t(BK) * p.Cin;
    gofs += D;
    ix += step_x;
    if (ix >= W) { ix -= W; ++iy; gofs += CX; }
    iy += step_y;
    if (iy >= H) { iy -= H; gofs += CY; }
  };

  if constexpr (Tr::kWg) {
    tw_wg_main<Tr>(load_stage, prm, nk, sbase, m0, n0, g, Mt, Cig);
    return;
  }

  // ---- fragment addresses within a stage (k-step 0; a k-step adds rows) ----------
  const int wm = warp % Tr::WARPS_M, wn = warp / Tr::WARPS_M;
  constexpr int NA = Tr::kTF32 ? 4 : 1, NB = Tr::kTF32 ? 2 : 1;
  constexpr int NBJ = Tr::kTF32 ? NI : NI / 2;
  // Per-lane fragment addresses within a stage (k-step 0; a k-step adds rows,
  // which keeps row & 7).
  uint32_t a_addr[MI][NA], b_addr[NBJ][NB];
  if constexpr (!Tr::kTF32) {
    // ldmatrix.x4.trans. A: matrices (k0-7, m0-7), (k0-7, m8-15), (k8-15, m0-7),
    // (k8-15, m8-15) = a0..a3. B: (k0-7, n0-7), (k8-15, n0-7), (k0-7, n8-15),
    // (k8-15, n8-15) = b[j][0], b[j][1], b[j+1][0], b[j+1][1].
    const int ak = (lane & 7) + ((lane >> 4) << 3), am = ((lane >> 3) & 1) << 3;
    const int bk = (lane & 7) + (((lane >> 3) & 1) << 3), bn = (lane >> 4) << 3;
#pragma unroll
    for (int i = 0; i < MI; ++i) a_addr[i][0] = tw_chunk<Tr>(ak, RA, (wm * Tr::WM + i * 16 + am) / E);
#pragma unroll
    for (int j = 0; j < NBJ; ++j) {
      if constexpr (kXN) {
        // ldmatrix.x4 (not .trans) on [n][k] rows: matrices (n0-7, k0-7), (n0-7, k8-15),
        // (n8-15, k0-7), (n8-15, k8-15) = b[j][0], b[j][1], b[j+1][0], b[j+1][1].
        const int mi = lane >> 3, n = (lane & 7) + ((mi >> 1) << 3);
        b_addr[j][0] = uint32_t(BK * RA + (wn * Tr::WN + j * 16 + n) * Tr::RBN + (mi & 1) * 16);
      } else {
        b_addr[j][0] = BK * RA + tw_chunk<Tr>(bk, RB, (wn * Tr::WN + j * 16 + bn) / E);
      }
    }
  } else {
    // m16n8k8 tf32, t = lane & 3, q = lane >> 2: a0 = A[q][t], a1 = A[q+8][t],
    // a2 = A[q][t+4], a3 = A[q+8][t+4]; b0 = B[t][q], b1 = B[t+4][q].
    const int t = lane & 3, q = lane >> 2;
    const uint32_t a0 = uint32_t(t * RA + (wm * Tr::WM + q) * 4);
    // kXN: b0 = B[t][q] at row (channel) q, word t; b1 four words on.
    const uint32_t b0 = kXN ? uint32_t(BK * RA + (wn * Tr::WN + q) * Tr::RBN + t * 4)
                            : uint32_t(BK * RA + t * RB + (wn * Tr::WN + q) * 4);
#pragma unroll
    for (int i = 0; i < MI; ++i) {
      a_addr[i][0] = a0 + i * 64;
      a_addr[i][1] = a0 + i * 64 + 32;
      a_addr[i][2] = a0 + i * 64 + 4 * RA;
      a_addr[i][3] = a0 + i * 64 + 4 * RA + 32;
    }
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      b_addr[j][0] = b0 + (kXN ? j * 8 * Tr::RBN : j * 32);
      b_addr[j][1] = b_addr[j][0] + (kXN ? 16 : 4 * RB);
    }
  }

  float acc[MI][NI][4];
  zero_acc(acc);

#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < nk) load_stage(s);
    cp_async_commit();
  }
  int rd = 0, wr = S - 1;
  for (int it = 0; it < nk; ++it) {
    cp_async_wait<S - 2>();
    __syncthreads();
    if (it + S - 1 < nk) load_stage(wr);
    cp_async_commit();
    wr = wr == S - 1 ? 0 : wr + 1;
    const uint32_t st = sbase + rd * kStage;
    rd = rd == S - 1 ? 0 : rd + 1;
    // 3xTF32: this stage's partial sums (common/ptx.cuh, SplitMma).
    SplitMma<T, Tr::kSplit, MI, NI> sm;
    sm.begin_tile();
#pragma unroll
    for (int ks = 0; ks < BK / Tr::KSTEP; ++ks) {
      uint32_t bfr[NI][2], bsm[NI][2];
      if constexpr (!Tr::kTF32) {
        const uint32_t koff = uint32_t(kXN ? ks * 32 : ks * 16 * RB);
#pragma unroll
        for (int j = 0; j < NI / 2; ++j) {
          uint32_t r[4];
          if constexpr (kXN) ldmatrix_x4(r, st + b_addr[j][0] + koff);
          else ldmatrix_x4_trans(r, st + b_addr[j][0] + koff);
          bfr[2 * j][0] = r[0]; bfr[2 * j][1] = r[1];
          bfr[2 * j + 1][0] = r[2]; bfr[2 * j + 1][1] = r[3];
        }
      } else {
        const uint32_t koff = uint32_t(kXN ? ks * 32 : ks * 8 * RB);
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            bfr[j][e] = lds32(st + b_addr[j][e] + koff);
            sm.operand(bfr[j][e], bsm[j][e]);
          }
      }
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        uint32_t af[4], asm_[4];
        if constexpr (!Tr::kTF32) {
          ldmatrix_x4_trans(af, st + a_addr[i][0] + uint32_t(ks * 16 * RA));
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            af[e] = lds32(st + a_addr[i][e] + uint32_t(ks * 8 * RA));
            sm.operand(af[e], asm_[e]);
          }
        }
#pragma unroll
        for (int j = 0; j < NI; ++j) sm.mma(acc, i, j, af, asm_, bfr[j], bsm[j]);
      }
    }
    sm.end_tile(acc);
  }
  cp_async_wait<0>();

  // ---- partial C to ws[split][g][m][n] (fp32), two columns per store ------------
  float* ws = static_cast<float*>(prm.workspace) +
              (int64_t(blockIdx.y) * p.groups + g) * int64_t(Mt) * Cig;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int m = m0 + wm * Tr::WM + i * 16 + (lane >> 2);
      const int n = n0 + wn * Tr::WN + j * 8 + 2 * (lane & 3);
      if (n >= Cig) continue;  // Cig is a multiple of E, so n + 1 < Cig too
      if (m < Mt)
        *reinterpret_cast<float2*>(ws + int64_t(m) * Cig + n) = make_float2(acc[i][j][0], acc[i][j][1]);
      if (m + 8 < Mt)
        *reinterpret_cast<float2*>(ws + int64_t(m + 8) * Cig + n) =
            make_float2(acc[i][j][2], acc[i][j][3]);
    }
  }  // if constexpr (kSm90aPass)
}

// gw[g*Cig + ci][co][tap] = sum over s (in order) of ws[s][g][tap*Cog + co][ci].
// A block takes 32 ci x CC co x all taps (CC*taps ~ 8 workspace rows, one per warp)
// through shared memory, so both sides are coalesced: a warp reads 32 consecutive ci
// of one workspace row (every split, in order), and each ci's CC*taps outputs are one
// contiguous run of grad_weight. (Walking the workspace in order and writing each sum
// where it goes stored with a stride of Cog*taps elements: 512 -> 256 channels, k=3, bf16:
// 0.024 ms for 2.4 MB of weight gradient. Tiles of ~256 rows were slower still: too few blocks.)
constexpr int kRdCi = 32;
template <typename T>
__global__ void __launch_bounds__(256) tc_wgrad_reduce_kernel(const WgradParams prm, int CC,
                                                             int pitch) {
  extern __shared__ float rd_tile[];  // [kRdCi][pitch]
  const Problem& p = prm.p;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g();
  const int taps = int(p.kh * p.kw);
  const int64_t Mt = taps * Cog, slice = p.groups * Mt * Cig;
  const int64_t g = blockIdx.z, ci0 = int64_t(blockIdx.x) * kRdCi, co0 = int64_t(blockIdx.y) * CC;
  const int ncc = int(Cog - co0 < CC ? Cog - co0 : CC);
  const int nci = int(Cig - ci0 < kRdCi ? Cig - ci0 : kRdCi);
  const float* ws = static_cast<const float*>(prm.workspace) + g * Mt * Cig + ci0;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int r = warp; r < ncc * taps; r += 8) {
    const int tap = r / ncc, c = r - tap * ncc;
    if (lane < nci) {
      const float* src = ws + (int64_t(tap) * Cog + co0 + c) * Cig + lane;
      float sum = 0.f;  // in split order; unrolled so the loads are in flight together
#pragma unroll 8
      for (int64_t k = 0; k < prm.splits; ++k) sum += src[k * slice];
      rd_tile[lane * pitch + c * taps + tap] = sum;
    }
  }
  __syncthreads();
  T* gw = static_cast<T*>(prm.gw) + ((g * Cig + ci0) * Cog + co0) * taps;
  const int run = ncc * taps;
  for (int e = threadIdx.x; e < nci * run; e += 256) {
    const int ci = e / run, q = e - ci * run;
    gw[int64_t(ci) * Cog * taps + q] = Cvt<T>::from_acc(rd_tile[ci * pitch + q]);
  }
}

// Tile configurations. 16-bit and tf32: warp tiles 64x32 (4 warps for BN 64,
// 8 for BN 128); 3xTF32 keeps three accumulator sets, so 32x32 warp tiles.
template <typename T> using TwNarrow = TwTraits<T, 128, 64, 2, 2, sizeof(T) == 4 ? 16 : 32, 4, false>;
template <typename T> using TwWide = TwTraits<T, 128, 128, 2, 4, sizeof(T) == 4 ? 16 : 32, 4, false>;
using TwSplit = TwTraits<float, 128, 64, 4, 2, 16, 4, true>;

template <typename T> using TwTall = TwTraits<T, 256, 64, 4, 2, sizeof(T) == 4 ? 16 : 32, 4, false>;
// 64x64 warp tiles (4 warps): fewer fragment loads per mma, fewer blocks per SM.
template <typename T> using TwBigTall = TwTraits<T, 256, 64, 4, 1, sizeof(T) == 4 ? 16 : 32, 3, false>;
template <typename T> using TwBigWide = TwTraits<T, 128, 128, 2, 2, sizeof(T) == 4 ? 16 : 32, 4, false>;
// wgmma (16-bit, sm_90a): 256 (tap, co) x 64 / 128 ci; BK 32 with 5 stages or BK 64 with 4.
template <typename T> using TwWg64 = TwTraits<T, 256, 64, 8, 1, 32, 5, false, true>;
template <typename T> using TwWg128 = TwTraits<T, 256, 128, 8, 1, 32, 5, false, true>;
template <typename T> using TwWg64K = TwTraits<T, 256, 64, 8, 1, 64, 4, false, true>;
template <typename T> using TwWg128K = TwTraits<T, 256, 128, 8, 1, 64, 4, false, true>;

// The tile WgradParams::tile names (a kWgradTileNames index: narrow | wide | tall | bigtall |
// bigwide | wg64 | wg128 | wg64k | wg128k; the planner's cuda::wgrad_tile or autotune's),
// where it can run: 3xTF32 (fp32, TF32 off) has one tile, kSplit; the wgmma tiles need 16-bit
// channels-last x on an sm_90a build on 9.0 (else the 64x64-warp mma.sync tile of its width).
enum class TwTile { kNarrow, kWide, kTall, kBigTall, kBigWide, kSplit, kWg64, kWg128, kWg64K,
                    kWg128K, kCount };
static_assert(int(TwTile::kSplit) == kTcWgradTiles, "tile count");
static_assert(kWgradTileCount == 10, "kWgradTileNames: 5 mma.sync tiles, 4 wgmma tiles, nowg");
bool tw_is_wg(TwTile t) { return t >= TwTile::kWg64 && t <= TwTile::kWg128K; }
TwTile tw_tile(const Problem& p, DType dt, MathMode math, int tile, bool xn) {
  if (dt == DType::kFloat && math == MathMode::kIEEE) return TwTile::kSplit;
  if (tile >= 0 && tile < kTcWgradTiles) return TwTile(tile);
  const bool wg_ok = dt != DType::kFloat && !xn && wgmma_device();
  if (wg_ok && tile >= kTcWgradTiles && tile < kTcWgradTiles + 4)
    return TwTile(int(TwTile::kWg64) + tile - kTcWgradTiles);
  return p.cin_g() > 64 ? TwTile::kBigWide : TwTile::kBigTall;
}
struct TwShape { int bm, bn, bk; };
TwShape tw_shape(const Problem& p, DType dt, MathMode math, int tile, bool xn) {
  const int bk = dt == DType::kFloat ? 16 : 32;
  switch (tw_tile(p, dt, math, tile, xn)) {
    case TwTile::kWide: case TwTile::kBigWide: return {128, 128, bk};
    case TwTile::kTall: case TwTile::kBigTall: return {256, 64, bk};
    case TwTile::kWg64: return {256, 64, 32};
    case TwTile::kWg128: return {256, 128, 32};
    case TwTile::kWg64K: return {256, 64, 64};
    case TwTile::kWg128K: return {256, 128, 64};
    default: return {128, 64, bk};
  }
}

// Output channels per reduction block: CC = max(1, 8 / taps), so a tile is ~8 workspace
// rows (taps * CC), one per warp.
int64_t tw_reduce_cc(const Problem& p) {
  return std::max<int64_t>(1, std::min<int64_t>(p.cout_g(), 8 / (p.kh * p.kw)));
}

// The reduction's launch: CC co per block, 32 * (taps * CC | 1) floats of shared memory
// (tc_wgrad_supported / tw_reduce_fits keep this launchable: taps <= 768).
template <typename T>
cudaError_t launch_tw_reduce(const WgradParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t taps = p.kh * p.kw;
  const int64_t cc = tw_reduce_cc(p);
  const int pitch = int((cc * taps) | 1);
  const size_t smem = size_t(kRdCi) * pitch * sizeof(float);
  const int64_t gx = (p.cin_g() + kRdCi - 1) / kRdCi, gy = (p.cout_g() + cc - 1) / cc;
  if (gx > 0x7fffffffLL || gy > 65535 || p.groups > 65535) return cudaErrorInvalidConfiguration;
  auto kern = tc_wgrad_reduce_kernel<T>;
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) return e;
  }
  kern<<<dim3(unsigned(gx), unsigned(gy), unsigned(p.groups)), 256, smem, st>>>(prm, int(cc),
                                                                               pitch);
  return cudaGetLastError();
}

template <class Tr, bool kXN>
cudaError_t run_tw_x(const WgradParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t Mt = p.kh * p.kw * p.cout_g();
  const int64_t gx = ((Mt + Tr::BM - 1) / Tr::BM) * ((p.cin_g() + Tr::BN - 1) / Tr::BN) * p.groups;
  if (gx > 0x7fffffffLL || prm.splits > 65535) return cudaErrorInvalidConfiguration;
  auto kern = tc_wgrad_kernel<Tr, kXN>;
  constexpr int smem = kXN ? Tr::kSmemBytesXN : Tr::kSmemBytes;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kern<<<dim3(unsigned(gx), unsigned(prm.splits)), Tr::kThreads, smem, st>>>(prm);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return launch_tw_reduce<typename Tr::T>(prm, st);
}
template <class Tr>
cudaError_t run_tw(const WgradParams& prm, cudaStream_t st) {
  if constexpr (Tr::kWg) {  // channels-last x only (tw_tile)
#if defined(CONVT2D_WGMMA)
    return prm.x_nchw ? cudaErrorInvalidValue : run_tw_x<Tr, false>(prm, st);
#else
    return cudaErrorInvalidValue;
#endif
  } else {
    return prm.x_nchw ? run_tw_x<Tr, true>(prm, st) : run_tw_x<Tr, false>(prm, st);
  }
}

// Resident blocks per SM of the kernel launch_tc_wgrad would run (0 on error).
template <class Tr, bool kXN>
int tw_occupancy() {
  auto kern = tc_wgrad_kernel<Tr, kXN>;
  constexpr int smem = kXN ? Tr::kSmemBytesXN : Tr::kSmemBytes;
  int n = 0;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, Tr::kThreads, smem) != cudaSuccess)
    return 0;
  return n;
}
template <class Tr>
int tw_occupancy(bool xn) {
  if constexpr (Tr::kWg) {
#if defined(CONVT2D_WGMMA)
    return xn ? 0 : tw_occupancy<Tr, false>();
#else
    return 0;
#endif
  } else {
    return xn ? tw_occupancy<Tr, true>() : tw_occupancy<Tr, false>();
  }
}
int tw_occupancy(TwTile tile, DType dt, bool xn) {
  // Cached per (tile, dtype, x layout): a property of the kernel and the device type.
  static std::atomic<int> cache[int(TwTile::kCount)][4][2];
  static std::once_flag init;
  std::call_once(init, [] {
    for (auto& row : cache)
      for (auto& c : row)
        for (auto& v : c) v.store(-1);
  });
  std::atomic<int>& slot = cache[int(tile)][int(dt)][xn ? 1 : 0];
  if (const int v = slot.load(); v >= 0) return v;
  auto pick = [&](auto tag) -> int {
    using T = decltype(tag);
    switch (tile) {
      case TwTile::kWide: return tw_occupancy<TwWide<T>>(xn);
      case TwTile::kTall: return tw_occupancy<TwTall<T>>(xn);
      case TwTile::kBigTall: return tw_occupancy<TwBigTall<T>>(xn);
      case TwTile::kBigWide: return tw_occupancy<TwBigWide<T>>(xn);
      case TwTile::kSplit: return tw_occupancy<TwSplit>(xn);
      default: break;
    }
    if constexpr (sizeof(T) == 2) {
      switch (tile) {
        case TwTile::kWg64: return tw_occupancy<TwWg64<T>>(xn);
        case TwTile::kWg128: return tw_occupancy<TwWg128<T>>(xn);
        case TwTile::kWg64K: return tw_occupancy<TwWg64K<T>>(xn);
        case TwTile::kWg128K: return tw_occupancy<TwWg128K<T>>(xn);
        default: break;
      }
    }
    return tw_occupancy<TwNarrow<T>>(xn);
  };
  int v = 0;
  switch (dt) {
    case DType::kHalf: v = pick(__half()); break;
    case DType::kBFloat16: v = pick(__nv_bfloat16()); break;
    case DType::kFloat: v = pick(float()); break;
    default: break;
  }
  slot.store(v);
  return v;
}

// Channels-last contiguous (size-1 dims may carry any stride) and 16-byte aligned.
bool dense_cl(const TensorRef& t, int64_t N, int64_t C, int64_t H, int64_t W) {
  return (reinterpret_cast<uintptr_t>(t.ptr) & 15) == 0 && (C == 1 || t.sc == 1) &&
         (W == 1 || t.sw == C) && (H == 1 || t.sh == W * C) && (N == 1 || t.sn == H * W * C);
}

// The reduction's launch limits (launch_tw_reduce): grid y (co tiles) and z (groups) at
// most 65535, and 32 * (taps | 1) floats of shared memory within every sm_80+ GPU's
// opt-in limit (99 KB on sm_86 / sm_89): taps <= 768. Shapes beyond go to grad_weight/wgrad_cuda_core.cu.
bool tw_reduce_fits(const Problem& p) {
  if (p.kh * p.kw > 768 || p.groups > 65535) return false;
  const int64_t cc = tw_reduce_cc(p);
  return (p.cout_g() + cc - 1) / cc <= 65535;
}

// NCHW contiguous (size-1 dims may carry any stride), H*W whole 16-byte chunks of
// e elements, 16-byte aligned: the kXN loader's chunks then never straddle images.
bool nchw_ok(const TensorRef& t, const Problem& p, int64_t e) {
  const int64_t HW = p.H * p.W;
  return (reinterpret_cast<uintptr_t>(t.ptr) & 15) == 0 && HW % e == 0 &&
         (p.W == 1 || t.sw == 1) && (p.H == 1 || t.sh == p.W) && (p.Cin == 1 || t.sc == HW) &&
         (p.N == 1 || t.sn == p.Cin * HW);
}

}  // namespace

bool tc_wgrad_supported(const WgradParams& prm, DType dt) {
  if (dt == DType::kDouble) return false;
  const Problem& p = prm.p;
  const int64_t e = dt == DType::kFloat ? 4 : 8;
  const int64_t K = p.N * p.H * p.W;
  const bool x_ok = prm.x_nchw ? nchw_ok(prm.x, p, e) : dense_cl(prm.x, p.N, p.Cin, p.H, p.W);
  return p.cin_g() % e == 0 && p.cout_g() % e == 0 && x_ok &&
         dense_cl(prm.gout, p.N, p.Cout, p.Ho, p.Wo) && K > 0 && K < (int64_t(1) << 31) - 1024 &&
         p.kh * p.kw * p.cout_g() < (int64_t(1) << 30) && tw_reduce_fits(p) &&
         p.Ho < (1 << 30) && p.Wo < (1 << 30) &&
         p.H * p.sh < (1 << 30) && p.W * p.sw < (1 << 30) && p.dh * (p.kh - 1) < (1 << 30) &&
         p.dw * (p.kw - 1) < (1 << 30) && p.ph < (1 << 30) && p.pw < (1 << 30);
}

TcWgradPlan tc_wgrad_plan(const Problem& p, DType dt, MathMode math, int num_sms, int tile,
                          bool x_nchw) {
  const TwShape s = tw_shape(p, dt, math, tile, x_nchw);
  const int64_t Mt = p.kh * p.kw * p.cout_g();
  const int64_t tiles = ((Mt + s.bm - 1) / s.bm) * ((p.cin_g() + s.bn - 1) / s.bn) * p.groups;
  const int64_t K = p.N * p.H * p.W;
  const int64_t ktiles = (K + s.bk - 1) / s.bk;
  // Split count from a small cost model: the main loop runs in waves of
  // per_sm * num_sms resident blocks, each block doing ceil(ktiles / splits)
  // k-tiles, and every split costs a write and a read of one fp32 workspace
  // slice. Rates are H100-class round numbers (only their ratio matters):
  // 300 / 150 / 50 TFLOP/s (16-bit / tf32 / 3xTF32) against 3 TB/s. Limits:
  // each split at least 16 k-tiles, each fp32 partial sum at most 2^20 pixels,
  // workspace at most 256 MiB.
  const TwTile tt = tw_tile(p, dt, math, tile, x_nchw);
  int per_sm = tw_occupancy(tt, dt, x_nchw);
  if (per_sm <= 0) per_sm = 2;
  const int64_t cap = int64_t(per_sm) * num_sms;
  const int64_t slice = p.groups * Mt * p.cin_g();
  const double rate = tw_is_wg(tt)              ? 500e12
                      : dt != DType::kFloat       ? 300e12
                      : math == MathMode::kIEEE   ? 50e12
                                                  : 150e12;
  const double t_ktile = double(cap) * 2.0 * s.bm * s.bn * s.bk / rate;  // one k-tile, one wave
  const double t_split = double(slice) * 8.0 / 3e12;
  const int64_t s_min = std::max<int64_t>(1, (ktiles + ((int64_t(1) << 20) / s.bk) - 1) /
                                                 ((int64_t(1) << 20) / s.bk));
  const int64_t s_max = std::max<int64_t>(
      s_min, std::min<int64_t>({ktiles / 16, (int64_t(1) << 26) / slice, 65535, 4 * cap}));
  int64_t splits = s_min;
  double best = -1.0;
  for (int64_t sp = s_min; sp <= s_max; ++sp) {
    const int64_t waves = (tiles * sp + cap - 1) / cap;
    const double t = double(waves) * double((ktiles + sp - 1) / sp) * t_ktile + sp * t_split;
    if (best < 0 || t < best) { best = t; splits = sp; }
  }
  const int64_t per = (ktiles + splits - 1) / splits;
  TcWgradPlan plan;
  plan.k_per_split = per * s.bk;
  plan.splits = (ktiles + per - 1) / per;
  plan.ws_elems = plan.splits * slice;
  return plan;
}

bool tc_wgrad_reduce_fits(const Problem& p) { return tw_reduce_fits(p); }

cudaError_t launch_tc_wgrad_reduce(const WgradParams& prm, DType dt, cudaStream_t st) {
  switch (dt) {
    case DType::kHalf: return launch_tw_reduce<__half>(prm, st);
    case DType::kBFloat16: return launch_tw_reduce<__nv_bfloat16>(prm, st);
    case DType::kFloat: return launch_tw_reduce<float>(prm, st);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_tc_wgrad(const WgradParams& prm, DType dt, MathMode math, cudaStream_t st) {
  const TwTile tile = tw_tile(prm.p, dt, math, prm.tile, prm.x_nchw);
  auto run16 = [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    switch (tile) {
      case TwTile::kWide: return run_tw<TwWide<T>>(prm, st);
      case TwTile::kTall: return run_tw<TwTall<T>>(prm, st);
      case TwTile::kBigTall: return run_tw<TwBigTall<T>>(prm, st);
      case TwTile::kBigWide: return run_tw<TwBigWide<T>>(prm, st);
      case TwTile::kSplit: return run_tw<TwSplit>(prm, st);
      default: break;
    }
    if constexpr (sizeof(T) == 2) {
      switch (tile) {
        case TwTile::kWg64: return run_tw<TwWg64<T>>(prm, st);
        case TwTile::kWg128: return run_tw<TwWg128<T>>(prm, st);
        case TwTile::kWg64K: return run_tw<TwWg64K<T>>(prm, st);
        case TwTile::kWg128K: return run_tw<TwWg128K<T>>(prm, st);
        default: break;
      }
    }
    return run_tw<TwNarrow<T>>(prm, st);
  };
  switch (dt) {
    case DType::kHalf: return run16(__half());
    case DType::kBFloat16: return run16(__nv_bfloat16());
    case DType::kFloat: return run16(float());
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace cuda
}  // namespace convt2d
