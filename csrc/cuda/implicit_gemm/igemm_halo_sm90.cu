// Halo implicit GEMM (sm_90a, wgmma): the tap columns of a GEMM row are shifted
// views of one shared-memory halo, so the activation is read from L2 once per
// tap row instead of once per tap.
//
// Mapping: the common/kernels.h GEMM of one phase and group, with the phase's output
// rows widened to wv = nqx + xt pixels, xt = (ntap_x - 1) * |it_x| (the reach of
// the tap columns in source pixels). GEMM row m = (n, qy, u), u in [0, wv);
// pixels u >= nqx are computed and dropped. Tap column jx of row m reads source
// column u + ia_x + jx * it_x, which is halo row (m - m0) + e(jx) of a halo that
// holds, for virtual row v = m0 + h, source column u(v) + ia_x + min(0, xt*sign):
// within one image row (u + e < wv) the shift e(jx) is the same for every row,
// and a shift that wraps into the next image row only feeds dropped pixels.
// So for each tap row jy and channel tile, the loader stages BM + xt halo rows
// once, and the consumers run ntap_x k-tiles at row offsets e(jx) into it.
//
// The halo is stored like every wgmma tile here: 128-byte K rows in the 128-byte
// swizzle, slots aligned to the 1024-byte pattern, row r's chunk c at
// r * 128 + ((c ^ (r & 7)) << 4). A descriptor that starts e rows into the slot
// (not a multiple of 8) reads the right rows: the hardware applies the XOR to
// the address bits, as the loader did (measured: setting the descriptor's
// base-offset field to (start >> 7) & 7 gave wrong results, and the interleaved
// no-swizzle layout, whose rows are 16-byte aligned anywhere, ran 5-10% slower).
// Warp specialisation as tc_ws_kernel, from the same collectives (common/ws_collectives.cuh):
// warpgroup 0 loads with cp.async (one mbarrier arrival per thread when its copies land) or
// TMA, warpgroups 1 and 2 each run wgmma on BM/2 rows x BN and keep one wgmma group in
// flight. Two StageRings: halo slots (2) and weight stages (SB). The kernel is its parts:
// halo_tile (the tile), halo_produce_tma / halo_produce (the loaders; HaloRows and the
// stage_halo_* functions stage a halo item), halo_consume (the K loop), halo_store /
// halo_store_persistent (the epilogues).
//
// 3xTF32 (fp32 with TF32 off, kSplit): every operand is split into big + small
// TF32 halves (the weight: split_tf32, round to nearest; the activation, in the loader:
// split_tf32_trunc, truncation, fewer instructions). The weight halves come split from
// global memory (prm.wpk_hi / wpk_lo, launch_split_tf32); the loader stages the
// activation through registers and writes both halves of each halo row. Per
// item (tap, channel tile) the consumers sum A_hi*B_lo + A_lo*B_hi + A_hi*B_hi
// into a fresh accumulator (wgmma scale-d 0 on the first k-step) and add it to
// the total with IEEE fp32 adds, so the tensor core's truncating accumulation
// spans 12 k-steps of one item. Where an operand of the item is not finite or
// is huge (|v| >= 2^60: the loader flags its halo, the weight split sets
// prm.wflag), big*big and the cross terms are summed apart and the cross terms
// dropped where big*big is not finite (as SplitMma does: inf*small is NaN).
//
// 3xFP16 (kF16x3): the same three products on fp16 halves scaled by
// powers of two (a scale per item and per weight column). Its weights come through TMA
// (both halves, the loader's thread 0), and each item's halo is loaded into registers while
// the previous item's weights go out. A block takes one tile; the persistent variant
// (kPersist, CONVT2D_ALGO=f16x3_persist=on) has min(tiles, SMs) blocks take tiles in turn, the
// consumers writing C from the accumulators while the loader fills the next tile. Its
// 3xTF32 fallback is looped (kLoop): a gated launch of one wave of blocks.
#include "cuda/common/implicit_gemm_tile.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma_maps.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/common/ws_collectives.cuh"
#include "common/static_switch.h"
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kHaloMaxReach = 16;  // largest xt the halo slots hold

#if defined(CONVT2D_WGMMA)
template <typename T, int BM_, int BN_, int SB_, bool kSplit_ = false, bool kPersist_ = false,
          bool kLoop_ = false>
struct HaloTraits {
  using Tp = T;  // the tiles' element type
  static constexpr bool kSplit = kSplit_;  // 3xTF32 / 3xFP16: both halves of each tile staged
  // 3xFP16 (kSplit with T = __half): fp32 source and output, fp16 halves, a scale per item.
  static constexpr bool kF16x3 = kSplit_ && sizeof(T) == 2;
  // Persistent (3xFP16 only): one block per SM takes tiles in turn, its loader filling the
  // next tile while the consumers store the last one (C straight from the accumulators).
  static constexpr bool kPersist = kPersist_;
  static_assert(!kPersist || kF16x3, "persistent: 3xFP16 only");
  // Looped (3xTF32 / 3xFP16): min(tiles, SMs) blocks take tiles in turn as kPersist's, but
  // each tile ends as a block's would (C staged over the rings), so all threads meet at a
  // block barrier before the next tile: no block launch per tile, and a gated launch
  // (run_if) that exits at once costs one wave instead of one per tile.
  static constexpr bool kLoop = kLoop_;
  static_assert(!(kLoop && kPersist) && (!kLoop || kSplit_), "looped: 3xTF32 / 3xFP16");
  static constexpr bool kMulti = kPersist || kLoop;  // a block takes several tiles
  using Src = std::conditional_t<kSplit_, float, T>;  // source and output element type
  static constexpr int BM = BM_, BN = BN_, SB = SB_, BKB = 128, CH = 8, KS = 4;
  static constexpr int CR = BM / 2, HALVES = CR / 64;  // rows and m64 blocks per consumer
  static constexpr int E = 16 / int(sizeof(T)), BK = BKB / int(sizeof(T));
  static constexpr int kThreads = 384, kConsumers = 256;
  static constexpr int NI = BN / 8;
  static constexpr int kHaloRows = BM + kHaloMaxReach;
  static constexpr int kABytes = (kHaloRows + 7) / 8 * 1024;  // 128-byte rows, whole atoms
  static constexpr int kBBytes = BN * BKB;
  static constexpr int kParts = kSplit ? 2 : 1;  // big half, then small half
  static constexpr int kAStage = kParts * kABytes, kBStage = kParts * kBBytes;
  static constexpr int kAOff = SB * kBStage;  // weight stages first: 1024-byte aligned
  static constexpr int kPipeBytes = kAOff + 2 * kAStage;
  static constexpr int LDC_M = BM + 4, LDC_N = BN + 4;
  static constexpr int kCBytes = (BN * LDC_M > BM * LDC_N ? BN * LDC_M : BM * LDC_N) * 4;
  static constexpr int kRowTableOff = kPipeBytes > kCBytes ? kPipeBytes : kCBytes;
  static constexpr int kBarOff = kRowTableOff + BM * 8;
  static constexpr int kFlagOff = kBarOff + (2 * SB + 4) * 8;  // kSplit: [2 slots][4 warps]
  // kSplit: [2 slots][4 warps] flags; kF16x3 also the loader warps' exchange of their
  // maxima at kFlagOff + 32, [2 slots][4 warps].
  // kPersist: each consumer warp's C staging, 16 columns x 16 rows padded to 20.
  static constexpr int kWarpC = 16 * 20, kWarpCOff = kFlagOff + 64;
  static_assert(kWarpCOff % 16 == 0, "C staging: 16-byte rows");
  static constexpr int kSmemBytes =
      (kPersist ? kWarpCOff + 8 * kWarpC * 4 : kFlagOff + (kSplit ? 64 : 0)) + 1024;
  static_assert(BN == 64 || BN == 128, "BN");
  static_assert(!kSplit || HALVES * NI * 4 <= 64, "split: 64-bit mask");
  static_assert(!kSplit || sizeof(T) == 4 || std::is_same<T, __half>::value, "split: tf32 or fp16");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// One 3xTF32 / 3xFP16 item of a consumer (kSplit): its HALVES x BN slice of the tile for
// one tap and channel tile, one m64 block at a time (one fresh partial accumulator).
// a_hi/a_lo: the halves of the item's first A row (the m64 blocks 64 rows apart),
// b_hi/b_lo: the weight stage. 3xFP16: the partial sum times inv (2^-(item's scale +
// weight scale)) is added to the total; it has no careful path (out-of-range operands
// rerun on 3xTF32).
template <class Tr>
__device__ __forceinline__ void split_item(float (&acc)[Tr::HALVES][Tr::NI][4], uint64_t& bad_mask,
                                           uint32_t a_hi, uint32_t a_lo, uint32_t b_hi,
                                           uint32_t b_lo, bool careful, float inv) {
  constexpr int NI = Tr::NI;
  using W = Wgmma<typename Tr::Tp, Tr::BN>;
#pragma unroll
  for (int h = 0; h < Tr::HALVES; ++h) {
    float part[NI][4];
    const uint32_t ah = a_hi + h * 64 * 128, al = a_lo + h * 64 * 128;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    if (!careful) {
      // Cross terms first (small values), big*big last: one fresh accumulator.
#pragma unroll
      for (int ks = 0; ks < Tr::KS; ++ks) {
        W::run(&part[0][0], sw128_desc(ah + 32 * ks), sw128_desc(b_lo + 32 * ks), ks > 0);
        W::run(&part[0][0], sw128_desc(al + 32 * ks), sw128_desc(b_hi + 32 * ks));
      }
#pragma unroll
      for (int ks = 0; ks < Tr::KS; ++ks)
        W::run(&part[0][0], sw128_desc(ah + 32 * ks), sw128_desc(b_hi + 32 * ks));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if constexpr (Tr::kF16x3) acc[h][j][q] = fmaf(part[j][q], inv, acc[h][j][q]);
          else acc[h][j][q] += part[j][q];
        }
      continue;
    }
    if constexpr (!Tr::kF16x3) {
      // Careful: big*big alone, then the cross terms, kept only where big*big is finite.
#pragma unroll
      for (int ks = 0; ks < Tr::KS; ++ks)
        W::run(&part[0][0], sw128_desc(ah + 32 * ks), sw128_desc(b_hi + 32 * ks), ks > 0);
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          acc[h][j][q] += part[j][q];
          if (!isfinite(part[j][q])) bad_mask |= uint64_t(1) << ((h * NI + j) * 4 + q);
        }
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
      for (int ks = 0; ks < Tr::KS; ++ks) {
        W::run(&part[0][0], sw128_desc(ah + 32 * ks), sw128_desc(b_lo + 32 * ks), ks > 0);
        W::run(&part[0][0], sw128_desc(al + 32 * ks), sw128_desc(b_hi + 32 * ks));
      }
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (!((bad_mask >> ((h * NI + j) * 4 + q)) & 1)) acc[h][j][q] += part[j][q];
    }
  }
}

// The split loaders' halo loads (3xTF32: NV = 1, 3xFP16: NV = 2): row rb + 64 i of the item's
// halo, chunk sub + 2 c as NV float4 of fp32 source channels (zeros outside the source or
// past Kc), from source row y = a_y[i] + dy, channel offset cofs.
template <int AR, int NV, int E>
__device__ __forceinline__ void load_halo_f32(float4 (&v)[AR][4][NV], const float* src,
                                              const int64_t (&a_off)[AR], const int (&a_y)[AR],
                                              const bool (&a_ok)[AR], int rb, int rows, int dy,
                                              uint32_t uHs, int64_t sh, int cofs, int c0, int Kc) {
#pragma unroll
  for (int i = 0; i < AR; ++i) {
    const int r = rb + 64 * i;
    const int y = a_y[i] + dy;
    const bool row_ok = r < rows && a_ok[i] && uint32_t(y) < uHs;
    const float* ga = src + (a_off[i] + (row_ok ? int64_t(y) * sh : 0) + cofs);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const bool ok = row_ok && c0 + 2 * c * E < Kc;
#pragma unroll
      for (int hh = 0; hh < NV; ++hh)
        v[i][c][hh] = ok ? __ldg(reinterpret_cast<const float4*>(ga + 2 * c * E + 4 * hh))
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

// The 3xFP16 loader's halo loads from an NCHW source (kNchw): thread (octet o, quad) of
// round i holds source channels 8 o .. 8 o + 7 (of the item's 64) at 4 consecutive source
// columns (one float4 per channel, v[i][k / 2][k % 2] for channel k of the octet). a_off /
// a_y / a_ok describe each round's quad (the host guarantees that its 4 columns are in one
// row, 16-byte aligned, and all inside or all outside the source); cofs is the channel
// tile's offset, ch_ok whether the octet is below Kc.
template <int AR>
__device__ __forceinline__ void load_halo_nchw(float4 (&v)[AR][4][2], const float* src,
                                               const int64_t (&a_off)[AR], const int (&a_y)[AR],
                                               const bool (&a_ok)[AR], int dy, uint32_t uHs,
                                               int64_t sh, int64_t sc, int64_t cofs, bool ch_ok) {
#pragma unroll
  for (int i = 0; i < AR; ++i) {
    const int y = a_y[i] + dy;
    const bool ok = ch_ok && a_ok[i] && uint32_t(y) < uHs;
    const float* ga = src + (a_off[i] + (ok ? int64_t(y) * sh + cofs : 0));
#pragma unroll
    for (int k = 0; k < 8; ++k)
      v[i][k >> 1][k & 1] = ok ? __ldg(reinterpret_cast<const float4*>(ga + k * sc))
                               : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

__device__ __forceinline__ float f4_at(const float4& q, int p) {
  return p == 0 ? q.x : p == 1 ? q.y : p == 2 ? q.z : q.w;
}

// ---- the kernel's parts ------------------------------------------------------------------
// A tile of the halo GEMM: its TileGeo with the GEMM rows widened (t.wv, t.lead, t.M as the
// file's header says), |it_x| and the tap columns' reach xt, the phase's output rows, and
// the K loop's extent (tap rows x channel tiles, then a weight stage per tap column).
struct HaloTile {
  TileGeo t;
  int adx, xt, kc_tiles, tap_rows;
  int64_t nqy;
};

// Tile `tile`'s HaloTile; false where it has no rows for this block.
template <class Tr, int kNchw>
__device__ __forceinline__ bool halo_tile(const IgemmParams& prm, int64_t tile, HaloTile& h) {
  TileGeo& t = h.t;
  t = tile_geo<Tr::BM, Tr::BN>(prm, tile);
  if (t.pix == 0) return false;
  h.adx = t.it_x < 0 ? -t.it_x : t.it_x;
  h.xt = t.ntap_x > 0 ? (t.ntap_x - 1) * h.adx : 0;
  h.nqy = udiv_fast(t.pix, t.nqx);
  t.wv = t.nqx + h.xt;
  if constexpr (kNchw) {
    // Row position u holds source column u - lead + c0 (c0: the halo's first column
    // relative to the output pixel): lead makes it a multiple of 4 at u = 4 j, and the
    // row is widened to a multiple of 4, so each quad of positions is one float4 per
    // channel (halo_shape(prm, true) sizes the grid the same way).
    const int c0 = t.ia_x + (t.it_x < 0 ? -h.xt : 0);
    t.lead = c0 & 3;
    t.wv = (t.nqx + h.xt + t.lead + 3) & ~int64_t(3);
  }
  t.M = prm.p.N * h.nqy * t.wv;
  if (t.m0 >= t.M) return false;
  h.kc_tiles = int((prm.Kc + Tr::BK - 1) / Tr::BK);
  // A phase with no tap columns has no K loop (its halos would never be released).
  h.tap_rows = t.ntap_x > 0 ? t.ntap_y : 0;
  return true;
}

// TMA loader (kTma, not with kSplit): one thread issues, per tap row and channel
// tile, one im2col copy of the BM + xt halo rows (the phase's map: W window widened
// by xt, W offset 0, the tap row as H offset), and per tap column one tiled copy of
// the weight box (common/tma_maps.cuh).
template <class Tr>
__device__ __forceinline__ void halo_produce_tma(const TmaArgs<true>& args, const HaloTile& h,
                                                 uint32_t sbase, const StageRing<Tr::SB>& wring,
                                                 const StageRing<2>& hring) {
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK;
  const IgemmParams& prm = args.prm;
  const Problem& p = prm.p;
  const TileGeo& t = h.t;
  const TmaTile m = tma_tile(args, t);
  const int lo_y = m.lo_y, lo_x = m.lo_x;
  const int64_t pixv = h.nqy * t.wv;
  const int64_t n = udiv_fast(t.m0, pixv), rem = t.m0 - n * pixv;
  const int64_t qy = udiv_fast(rem, t.wv), u = rem - qy * t.wv;
  const int bx = int(u) + lo_x, by = int(qy) * t.im_y + lo_y;
  const int c_base = int(t.g * prm.Kc);
  const int b_row = int((t.g * p.kh * p.kw) * prm.Nc + t.n0);
  const uint32_t a_bytes = uint32_t(BM + h.xt) * 128u;
  int ia = 0, ib = 0;
  for (int jy = 0; jy < h.tap_rows; ++jy) {
    const int oy = t.ia_y + jy * t.it_y - lo_y;
    const int brow = (t.k0y + jy * t.ksy) * p.kw + t.k0x;
    for (int ct = 0; ct < h.kc_tiles; ++ct, ++ia) {
      hring.acquire(ia);
      const uint32_t sa = sbase + Tr::kAOff + hring.stage(ia) * Tr::kABytes;
      mbar_arrive_expect_tx(hring.full_bar(ia), a_bytes);
      tma_load_im2col4(sa, m.a, hring.full_bar(ia), c_base + ct * BK, bx, by, int(n), 0,
                       uint16_t(oy));
      for (int jx = 0; jx < t.ntap_x; ++jx, ++ib) {
        wring.acquire(ib);
        const uint32_t sb = sbase + wring.stage(ib) * Tr::kBStage;
        mbar_arrive_expect_tx(wring.full_bar(ib), uint32_t(BN * 128));
        tma_load_2d(sb, m.b, wring.full_bar(ib), ct * BK, b_row + (brow + jx * t.ksx) * int(prm.Nc));
      }
    }
  }
}

// The register / cp.async loader's share of a tile's halo (thread tid of warpgroup 0): per
// round i (64 halo rows a round) its row rb + 64 i's source offset (the channel group and
// sub-chunk included), source row before the tap row's shift, and whether it lies inside the
// source. kNchw: round i's row is the first of a quad of 4 (nchw_quad_row) and the offset
// that of the thread's channel octet (nchw_octet); kNchw 2 also which of the quad's 4
// positions a kept output reads ([lead, lead + nqx + xt)): the others (the lead, the
// widening: source columns that padding crops) are zeroed before the item's max, so that
// they cannot change its scale.
__device__ __forceinline__ int nchw_octet() {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  return 4 * (warp & 1) + (lane & 3);
}
// A round covers 64 rows: warps 2 h and 2 h + 1 take rows 32 h .. 32 h + 31 (8 quads,
// lane / 4), the first the octets 0..3, the second 4..7 (lane % 4): a load instruction
// reads 128 contiguous bytes of each of 4 channels.
__device__ __forceinline__ int nchw_quad_row(int i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  return 64 * i + 32 * (warp >> 1) + 4 * (lane >> 2);
}

template <class Tr, int kNchw>
struct HaloRows {
  static constexpr int AR = (Tr::kHaloRows + 63) / 64;
  static_assert(!kNchw || AR * 64 >= Tr::kHaloRows, "NCHW: rounds of 64 halo rows");
  int64_t off[AR];
  int y[AR];
  bool ok[AR];
  uint32_t msk[kNchw == 2 ? AR : 1];
  // Whether any lane of the warp holds a partly kept quad (kNchw 2; warp-uniform, so that
  // the zeroing is a branch the warps of unled, unwidened rows skip).
  bool msk_any = false;
  int rows;  // halo rows the consumers read (BM + xt)

  __device__ __forceinline__ HaloRows(const IgemmParams& prm, const HaloTile& h) {
    const TileGeo& t = h.t;
    const int tid = threadIdx.x, sub = tid & 1, rb = tid >> 1;
    const int Kc = int(prm.Kc), E = Tr::E;
    rows = Tr::BM + h.xt;
    const int64_t pixv = h.nqy * t.wv;
    const int omin = t.it_x < 0 ? -h.xt : 0;
    bool part = false;  // a partly kept quad
#pragma unroll
    for (int i = 0; i < AR; ++i) {
      const int r = kNchw ? nchw_quad_row(i) : rb + 64 * i;
      const int64_t v = t.m0 + r;
      const int64_t n = udiv_fast(v, pixv), rem = v - n * pixv;
      const int64_t qy = udiv_fast(rem, t.wv), u = rem - qy * t.wv;
      const int64_t col = u - t.lead + t.ia_x + omin;
      ok[i] = v < t.M && col >= 0 && col < prm.Ws && (!kNchw || r < rows);
      y[i] = int(qy) * t.im_y + t.ia_y;
      if constexpr (kNchw) {
        off[i] = ok[i] ? n * prm.src.sn + (t.g * Kc + 8 * nchw_octet()) * prm.src.sc + col : 0;
      } else {
        off[i] = ok[i] ? n * prm.src.sn + t.g * Kc + sub * E + col * prm.src.sw : 0;
      }
      if constexpr (kNchw == 2) {
        const int64_t lo = t.lead - u, hi = t.lead + t.nqx + h.xt - u;  // kept: lo <= q < hi
        uint32_t mk = 0;
#pragma unroll
        for (int q = 0; q < 4; ++q) mk |= uint32_t(q >= lo && q < hi) << q;
        msk[i] = mk;
        part |= mk != 0u && mk != 15u;
        if (mk == 0) {  // nothing kept: not loaded
          ok[i] = false;
          off[i] = 0;
        }
      }
    }
    if constexpr (kNchw == 2) msk_any = __any_sync(0xffffffffu, part);
  }
};

// cp.async loader (16-bit types, TF32): item (tap row shift dy, channel tile ct)'s halo rows
// rb + 64 i, chunks sub + 2 c, into halo slot sa; the slot's full barrier counts the copies.
template <class Tr, int kNchw>
__device__ __forceinline__ void stage_halo_cp_async(const HaloRows<Tr, kNchw>& hr,
                                                    const IgemmParams& prm, uint32_t sa,
                                                    uint32_t full, int dy, int ct) {
  using TS = typename Tr::Src;
  constexpr int E = Tr::E, BK = Tr::BK, CH = Tr::CH;
  const TS* __restrict__ src = static_cast<const TS*>(prm.src.ptr);
  const int sub = threadIdx.x & 1, rb = threadIdx.x >> 1;
  const int c0 = ct * BK + sub * E, Kc = int(prm.Kc);
#pragma unroll
  for (int i = 0; i < HaloRows<Tr, kNchw>::AR; ++i) {
    const int r = rb + 64 * i;
    if (r >= hr.rows) continue;
    const int y = hr.y[i] + dy;
    const bool row_ok = hr.ok[i] && uint32_t(y) < uint32_t(prm.Hs);
    const TS* ga = src + (hr.off[i] + (row_ok ? int64_t(y) * prm.src.sh : 0) + ct * BK);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const bool ok = row_ok && c0 + 2 * c * E < Kc;
      cp_async16(sa + swz<CH>(r, sub + 2 * c), ok ? ga + 2 * c * E : src, ok ? 16 : 0);
    }
  }
  mbar_arrive_cp_async(full);
}

// 3xTF32: item (dy, ct)'s halo through registers (loads issued before the slot is free),
// written as big and small halves; the warp's flag (slot a's word) says whether any value
// needs the careful sum (not finite, or |v| >= 2^60).
template <class Tr, int kNchw>
__device__ __forceinline__ void stage_halo_tf32x3(const HaloRows<Tr, kNchw>& hr,
                                                  const IgemmParams& prm, unsigned char* smem,
                                                  uint32_t sbase, const StageRing<2>& hring,
                                                  int ia, int dy, int ct) {
  constexpr int E = Tr::E, BK = Tr::BK, CH = Tr::CH, AR = HaloRows<Tr, kNchw>::AR;
  const int tid = threadIdx.x, sub = tid & 1, rb = tid >> 1, lane = tid & 31, warp = tid >> 5;
  float4 v[AR][4][1];
  load_halo_f32<AR, 1, E>(v, static_cast<const float*>(prm.src.ptr), hr.off, hr.y, hr.ok, rb,
                          hr.rows, dy, uint32_t(prm.Hs), prm.src.sh, ct * BK, ct * BK + sub * E,
                          int(prm.Kc));
  hring.acquire(ia);
  const int a = hring.stage(ia);
  const uint32_t sa = sbase + Tr::kAOff + a * Tr::kAStage;
  bool bad = false;
#pragma unroll
  for (int i = 0; i < AR; ++i) {
    const int r = rb + 64 * i;
    if (r >= hr.rows) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      uint32_t hi[4] = {__float_as_uint(v[i][c][0].x), __float_as_uint(v[i][c][0].y),
                        __float_as_uint(v[i][c][0].z), __float_as_uint(v[i][c][0].w)};
      uint32_t lo[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        bad |= !(fabsf(__uint_as_float(hi[q])) < 0x1p60f);
        bad |= !split_tf32_trunc(hi[q], lo[q]);
      }
      const uint32_t d = sa + swz<CH>(r, sub + 2 * c);
      sts128(d, hi);
      sts128(d + Tr::kABytes, lo);
    }
  }
  const bool any_bad = __any_sync(0xffffffffu, bad);
  if (lane == 0)
    *reinterpret_cast<volatile int*>(smem + Tr::kFlagOff + 16 * a + 4 * warp) = any_bad;
  // Generic-proxy stores, read by wgmma through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  mbar_arrive(hring.full_bar(ia));
}

// 3xFP16: an item's halo, loaded into v (8 channels = two float4 per 16-byte chunk), to its
// slot: its largest |value| over the loader warpgroup (named barrier 2), then each value
// times 2^s (f16x3_scale) written as big and small fp16 halves; s goes to the consumers in
// the slot's flag words. An operand out of range sets f16_flag: the 3xTF32 kernel launched
// next then reruns the product.
template <class Tr, int kNchw>
__device__ __forceinline__ void stage_halo_f16x3(const HaloRows<Tr, kNchw>& hr,
                                                 float4 (&v)[HaloRows<Tr, kNchw>::AR][4][2],
                                                 const IgemmParams& prm, unsigned char* smem,
                                                 uint32_t sbase, const StageRing<2>& hring,
                                                 int ia) {
  constexpr int CH = Tr::CH, AR = HaloRows<Tr, kNchw>::AR;
  const int tid = threadIdx.x, sub = tid & 1, rb = tid >> 1, lane = tid & 31, warp = tid >> 5;
  const int a = hring.stage(ia);
  if constexpr (kNchw == 2) {
    if (hr.msk_any) {
#pragma unroll
      for (int i = 0; i < AR; ++i) {
        const uint32_t mk = hr.msk[i];
        if (mk == 15u) continue;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          float4& q = v[i][k >> 1][k & 1];
          q = make_float4(mk & 1u ? q.x : 0.f, mk & 2u ? q.y : 0.f, mk & 4u ? q.z : 0.f,
                          mk & 8u ? q.w : 0.f);
        }
      }
    }
  }
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < AR; ++i)
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float4 q = v[i][c][hh];
        m = max(m, max(max(__float_as_uint(q.x) & 0x7fffffffu, __float_as_uint(q.y) & 0x7fffffffu),
                       max(__float_as_uint(q.z) & 0x7fffffffu, __float_as_uint(q.w) & 0x7fffffffu)));
      }
  m = __reduce_max_sync(0xffffffffu, m);
  volatile uint32_t* xch = reinterpret_cast<volatile uint32_t*>(smem + Tr::kFlagOff + 32 + 16 * a);
  if (lane == 0) xch[warp] = m;
  asm volatile("bar.sync 2, 128;\n" ::: "memory");
  m = max(max(xch[0], xch[1]), max(xch[2], xch[3]));
  bool bad = false;
  const int sx = f16x3_scale(m, bad);
  if (bad && tid == 0) *reinterpret_cast<volatile int*>(prm.f16_flag) = 1;
  const float sc = exp2i(sx);
  hring.acquire(ia);
  const uint32_t sa = sbase + Tr::kAOff + a * Tr::kAStage;
  // Eight values times 2^s as big and small fp16 halves, to row r's chunk c.
  auto put8 = [&](int r, int c, const float (&f)[8]) {
    uint32_t hi[4], lo[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float f0 = f[2 * k] * sc, f1 = f[2 * k + 1] * sc;
      const __half2 h = __floats2half2_rn(f0, f1);
      const float2 hf = __half22float2(h);
      const __half2 l = __floats2half2_rn(f0 - hf.x, f1 - hf.y);
      hi[k] = *reinterpret_cast<const uint32_t*>(&h);
      lo[k] = *reinterpret_cast<const uint32_t*>(&l);
    }
    const uint32_t d = sa + swz<CH>(r, c);
    sts128(d, hi);
    sts128(d + Tr::kABytes, lo);
  };
#pragma unroll
  for (int i = 0; i < AR; ++i) {
    if constexpr (kNchw) {
      // The quad's 4 rows, chunk octet (8 lanes of a store: 2 rows x 4 chunks whose
      // swizzled positions differ, no bank conflicts).
      const int r = nchw_quad_row(i);
      if (r >= hr.rows) continue;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float f[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = f4_at(v[i][k >> 1][k & 1], q);
        put8(r + q, nchw_octet(), f);
      }
    } else {
      const int r = rb + 64 * i;
      if (r >= hr.rows) continue;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float f[8] = {v[i][c][0].x, v[i][c][0].y, v[i][c][0].z, v[i][c][0].w,
                            v[i][c][1].x, v[i][c][1].y, v[i][c][1].z, v[i][c][1].w};
        put8(r, sub + 2 * c, f);
      }
    }
  }
  if (lane == 0) *reinterpret_cast<volatile int*>(smem + Tr::kFlagOff + 16 * a + 4 * warp) = sx;
  // Generic-proxy stores, read by wgmma through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  mbar_arrive(hring.full_bar(ia));
}

// The register / cp.async loader (warpgroup 0): per tap row and channel tile, the halo item,
// then per tap column the weight stage (cp.async; 3xFP16 with kTma: thread 0 copies both
// halves by TMA). ia / ib: the rings' positions, kept across a multi-tile block's tiles.
template <class Tr, bool kTma, int kNchw>
__device__ __forceinline__ void halo_produce(const TmaArgs<kTma>& args, const HaloTile& h,
                                             unsigned char* smem, uint32_t sbase,
                                             const StageRing<Tr::SB>& wring,
                                             const StageRing<2>& hring, int& ia, int& ib) {
  using T = typename Tr::Tp;
  constexpr int BK = Tr::BK, E = Tr::E, CH = Tr::CH, SB = Tr::SB, BN = Tr::BN;
  const IgemmParams& prm = args.prm;
  const Problem& p = prm.p;
  const TileGeo& t = h.t;
  const int tid = threadIdx.x, sub = tid & 1, rb = tid >> 1;
  const int Kc = int(prm.Kc), Nc = int(prm.Nc);
  const HaloRows<Tr, kNchw> hr(prm, h);
  constexpr int AR = HaloRows<Tr, kNchw>::AR, BR = BN / 64;
  // 3xTF32 / 3xFP16: the big and small weight halves (same layout as wpk).
  const T* __restrict__ wpk =
      static_cast<const T*>(Tr::kF16x3 ? prm.w16_hi : Tr::kSplit ? prm.wpk_hi : prm.wpk);
  const int64_t tap_stride = int64_t(Nc) * Kc;
  const T* b_base = wpk + t.g * p.kh * p.kw * tap_stride + sub * E;
  const T* b_lo = Tr::kSplit
                      ? static_cast<const T*>(Tr::kF16x3 ? prm.w16_lo : prm.wpk_lo) + (b_base - wpk)
                      : nullptr;
  // The thread's weight rows rb + 64 i (cp.async): whether they exist, and where they start.
  bool b_ok[BR];
  const T* b_rows[BR];
#pragma unroll
  for (int i = 0; i < BR; ++i) {
    b_ok[i] = t.n0 + rb + 64 * i < Nc;
    b_rows[i] = b_base + (t.n0 + rb + 64 * i) * Kc;
  }
  // 3xFP16 with TMA weights (kTma): the next item's halo is loaded into v as soon as
  // this one is stored, so its latency overlaps the weight copies of this item.
  // (Not in the persistent kernel: there it spilled 700+ bytes.)
  constexpr bool kPrefetch = kTma && !Tr::kMulti;
  const int b_row = int((t.g * p.kh * p.kw) * prm.Nc + t.n0);
  float4 v[Tr::kF16x3 ? AR : 1][4][2];
  // The 3xFP16 halo of item (tap row shift dy, channel tile ct) into v.
  auto load_item = [&](int dy, int ct) {
    if constexpr (kNchw)
      load_halo_nchw<AR>(v, static_cast<const float*>(prm.src.ptr), hr.off, hr.y, hr.ok, dy,
                         uint32_t(prm.Hs), prm.src.sh, prm.src.sc, int64_t(ct) * BK * prm.src.sc,
                         ct * BK + 8 * nchw_octet() < Kc);
    else if constexpr (Tr::kF16x3)
      load_halo_f32<AR, 2, E>(v, static_cast<const float*>(prm.src.ptr), hr.off, hr.y, hr.ok,
                              rb, hr.rows, dy, uint32_t(prm.Hs), prm.src.sh, ct * BK,
                              ct * BK + sub * E, Kc);
  };
  // Tap rows in the order of their source rows (forward: it_y < 0, the last tap row
  // first): a tile's first item then reads the source row that the tiles before it read
  // too (from L2), and the row no tile has read yet (from DRAM) comes last, loaded
  // while the item before it runs.
  auto row_of = [&](int jj) { return t.it_y < 0 ? h.tap_rows - 1 - jj : jj; };
  // Block per tile with TMA weights: thread 0 issues the first item's weight stages (up
  // to SB) before the halo is loaded, so that their latency overlaps the halo's at the
  // tile start (stages ib < pre are not issued again below).
  int pre = 0;
  if constexpr (Tr::kF16x3 && kPrefetch) {
    if (tid == 0 && h.tap_rows > 0) {
      pre = t.ntap_x < SB ? t.ntap_x : SB;
      const int brow0 = (t.k0y + row_of(0) * t.ksy) * p.kw + t.k0x;
      for (int jx = 0; jx < pre; ++jx) {
        const uint32_t sb = sbase + jx * Tr::kBStage;
        const int y = b_row + (brow0 + jx * t.ksx) * int(prm.Nc);
        mbar_arrive_expect_tx(wring.full_bar(jx), uint32_t(2 * Tr::kBBytes));
        tma_load_2d(sb, &args.tma.b, wring.full_bar(jx), 0, y);
        tma_load_2d(sb + Tr::kBBytes, &args.tma.b_lo, wring.full_bar(jx), 0, y);
      }
    }
    if (h.tap_rows > 0) load_item(row_of(0) * t.it_y, 0);
  }
  for (int jj = 0; jj < h.tap_rows; ++jj) {
    const int jy = row_of(jj);
    const int dy = jy * t.it_y;
    const int64_t brow = int64_t(t.k0y + jy * t.ksy) * p.kw + t.k0x;
    for (int ct = 0; ct < h.kc_tiles; ++ct) {
      if constexpr (Tr::kF16x3) {
        if constexpr (!kPrefetch) load_item(dy, ct);
        stage_halo_f16x3<Tr, kNchw>(hr, v, prm, smem, sbase, hring, ia);
        ++ia;
        if constexpr (kPrefetch) {
          const int nct = ct + 1 < h.kc_tiles ? ct + 1 : 0;
          const int njj = ct + 1 < h.kc_tiles ? jj : jj + 1;
          if (njj < h.tap_rows) load_item(row_of(njj) * t.it_y, nct);
        }
      } else if constexpr (Tr::kSplit) {
        stage_halo_tf32x3<Tr, kNchw>(hr, prm, smem, sbase, hring, ia, dy, ct);
        ++ia;
      } else {
        hring.acquire(ia);
        stage_halo_cp_async<Tr, kNchw>(hr, prm, sbase + Tr::kAOff + hring.stage(ia) * Tr::kABytes,
                                       hring.full_bar(ia), dy, ct);
        ++ia;
      }
      // The item's weight stages, one per tap column.
      if constexpr (!kTma) {
        // cp.async: rows rb + 64 i, chunks sub + 2 c; per item the thread's row pointers
        // and which of its chunks exist, hoisted out of the tap-column loop by hand (left
        // to the compiler, it recomputed them per stage: 1.5-2x the loader's instructions).
        const int c0 = ct * BK + sub * E;
        const T* g[BR];
        const T* gl[Tr::kSplit ? BR : 1];  // 3xTF32: the small halves
        bool okc[BR][4];
#pragma unroll
        for (int i = 0; i < BR; ++i) {
          g[i] = b_rows[i] + (brow * tap_stride + ct * BK);
          if constexpr (Tr::kSplit) gl[i] = b_lo + (g[i] - b_base);
#pragma unroll
          for (int c = 0; c < 4; ++c) okc[i][c] = b_ok[i] && c0 + 2 * c * E < Kc;
        }
        const int64_t step = int64_t(t.ksx) * tap_stride;
        for (int jx = 0; jx < t.ntap_x; ++jx, ++ib) {
          wring.acquire(ib);
          const uint32_t sb = sbase + wring.stage(ib) * Tr::kBStage;
#pragma unroll
          for (int i = 0; i < BR; ++i) {
            const int r = rb + 64 * i;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const bool ok = okc[i][c];
              cp_async16(sb + swz<CH>(r, sub + 2 * c), ok ? g[i] + 2 * c * E : wpk, ok ? 16 : 0);
              if constexpr (Tr::kSplit)
                cp_async16(sb + Tr::kBBytes + swz<CH>(r, sub + 2 * c),
                           ok ? gl[i] + 2 * c * E : wpk, ok ? 16 : 0);
            }
            g[i] += step;
            if constexpr (Tr::kSplit) gl[i] += step;
          }
          mbar_arrive_cp_async(wring.full_bar(ib));
        }
      } else {
        // 3xFP16 with TMA weights: thread 0 copies both halves of each stage (those before
        // pre were issued before the tile's first halo).
        for (int jx = 0; jx < t.ntap_x; ++jx, ++ib) {
          if (tid != 0 || ib < pre) continue;
          wring.acquire(ib);
          const uint32_t sb = sbase + wring.stage(ib) * Tr::kBStage;
          const int y = b_row + int(brow + jx * t.ksx) * int(prm.Nc);
          mbar_arrive_expect_tx(wring.full_bar(ib), uint32_t(2 * Tr::kBBytes));
          tma_load_2d(sb, &args.tma.b, wring.full_bar(ib), ct * BK, y);
          tma_load_2d(sb + Tr::kBBytes, &args.tma.b_lo, wring.full_bar(ib), ct * BK, y);
        }
      }
    }
  }
}

// The consumers' K loop (warpgroup cw = wg - 1 owns tile rows [CR cw, CR cw + CR)): per halo
// item, one k-tile per tap column at its row offset e(jx) into the halo, against that column's
// weight stage. 16-bit / TF32: one wgmma group in flight, a stage released once the group
// reading it has retired; 3xTF32 / 3xFP16: split_item per stage, released at once.
template <class Tr, bool kTma>
__device__ __forceinline__ void halo_consume(float (&acc)[Tr::HALVES][Tr::NI][4],
                                             const IgemmParams& prm, const HaloTile& h,
                                             unsigned char* smem, uint32_t sbase,
                                             const StageRing<Tr::SB>& wring,
                                             const StageRing<2>& hring, int& ia, int& ib) {
  static_assert(Tr::KS == 4 && Tr::BKB == 128, "wgmma_ktile: 128-byte K rows, 4 k-steps");
  const TileGeo& t = h.t;
  const int cw = (threadIdx.x >> 7) - 1;
  // 3xTF32: a weight that is not finite or huge (launch_split_tf32), and the
  // accumulator elements whose big*big sum was not finite (their cross terms dropped).
  const bool wbad = Tr::kSplit && !Tr::kF16x3 && *prm.wflag != 0;
  uint64_t bad_mask = 0;
  int prev_s = 0, prev_a = 0;  // the previous item's stages (16-bit / TF32)
  for (int jy = 0; jy < h.tap_rows; ++jy) {
    for (int ct = 0; ct < h.kc_tiles; ++ct, ++ia) {
      const int a = hring.stage(ia);
      hring.wait(ia);
      const uint32_t sa = sbase + Tr::kAOff + a * Tr::kAStage + cw * Tr::CR * 128;
      for (int jx = 0; jx < t.ntap_x; ++jx, ++ib) {
        const int s = wring.stage(ib);
        wring.wait(ib);
        // cp.async rings are written through the generic proxy; wgmma reads
        // them through the async proxy (TMA writes through the async proxy).
        // (Measured: this fence costs 2-3% here; dropping it is not proven safe.)
        if constexpr (!kTma) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        const int e = (t.it_x < 0 ? t.ntap_x - 1 - jx : jx) * h.adx;
        const uint32_t a_rows = sa + e * 128, b_tile = sbase + s * Tr::kBStage;
        if constexpr (Tr::kSplit) {
          // The flag is the same in every thread; a warp vote makes that visible to
          // ptxas (a branch it takes as divergent makes it serialise every wgmma).
          const volatile int* fl = reinterpret_cast<const volatile int*>(smem + Tr::kFlagOff + 16 * a);
          bool careful = false;
          float inv = 1.f;
          if constexpr (Tr::kF16x3) inv = exp2i(-fl[0]);
          else careful = __any_sync(0xffffffffu, wbad || (fl[0] | fl[1] | fl[2] | fl[3]) != 0);
          split_item<Tr>(acc, bad_mask, a_rows, a_rows + Tr::kABytes, b_tile, b_tile + Tr::kBBytes,
                         careful, inv);
          // This item's wgmma has retired: release its stages.
          wring.release(s);
          if (jx == t.ntap_x - 1) hring.release(a);
          continue;
        }
        wgmma_ktile<typename Tr::Tp, Tr::BN, Tr::HALVES>(acc, a_rows, b_tile);
        wgmma_wait<1>();
        // The previous item's wgmma has retired: release its stages (its halo slot too
        // where it was the slot's last tap column: this item is a new slot's first).
        if (ib > 0) {
          wring.release(prev_s);
          if (jx == 0) hring.release(prev_a);
        }
        prev_s = s;
        prev_a = a;
      }
    }
  }
  wgmma_wait<0>();
}

// The persistent 3xFP16 kernel's epilogue (kPersist): the loader is already filling the rings
// for the next tile, so C does not go through them: element (j, q) of a thread (row wq * 16 +
// lane / 4 + 8 (q / 2), column j * 8 + 2 (lane % 4) + q % 2) times its weight column's
// 2^-w16_scale, plus bias, stored from the accumulators (channels-last) or through the warp's
// own shared-memory block (NCHW).
template <class Tr, bool kChanOut>
__device__ __forceinline__ void halo_store_persistent(const IgemmParams& prm, const HaloTile& h,
                                                      const float (&acc)[1][Tr::NI][4],
                                                      unsigned char* smem) {
  using TS = typename Tr::Src;
  constexpr int NI = Tr::NI;
  static_assert(std::is_same<TS, float>::value, "persistent: 3xFP16 only");
  const TileGeo& t = h.t;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, cw = (threadIdx.x >> 7) - 1;
  const int Nc = int(prm.Nc);
  const Geo gy = phase_geo(prm, true, t.ry);
  const Geo gx = phase_geo(prm, false, t.rx);
  const int64_t pixv = h.nqy * t.wv;
  const int wrow = cw * Tr::CR + (warp & 3) * 16;  // the warp's 16 rows
  auto row_off = [&](int r) -> int64_t {  // destination of tile row r, -1 if dropped
    const int64_t mg = t.m0 + r;
    if (mg >= t.M) return -1;
    const int64_t n = udiv_fast(mg, pixv), rem = mg - n * pixv;
    const int64_t qy = udiv_fast(rem, t.wv), qx = rem - qy * t.wv;
    if (qx >= gx.nq) return -1;
    return n * prm.dst.sn + (qy * gy.om + gy.oa) * prm.dst.sh + (qx * gx.om + gx.oa) * prm.dst.sw +
           t.g * prm.Nc * prm.dst.sc;
  };
  const int* wsc = prm.w16_scale + t.g * prm.Nc;
  const TS* bias = static_cast<const TS*>(prm.bias);
  const TS* bias_g = bias ? bias + t.g * prm.Nc : nullptr;
  TS* dst = static_cast<TS*>(prm.dst.ptr);
  const int64_t dsc = prm.dst.sc;
  if constexpr (kChanOut) {
    // Channels contiguous: a thread's two columns are neighbours (one 8-byte store),
    // a warp's store covers 8 rows x 32 bytes.
    const int64_t ro[2] = {row_off(wrow + (lane >> 2)), row_off(wrow + (lane >> 2) + 8)};
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int64_t n = t.n0 + j * 8 + 2 * (lane & 3);
      if (n >= Nc) continue;
      const bool two = n + 1 < Nc;
      const float f0 = exp2i(-__ldg(wsc + n)), f1 = two ? exp2i(-__ldg(wsc + n + 1)) : 0.f;
      const float b0 = bias_g ? __ldg(bias_g + n) : 0.f;
      const float b1 = bias_g && two ? __ldg(bias_g + n + 1) : 0.f;
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        if (ro[rr] < 0) continue;
        const float v0 = acc[0][j][2 * rr] * f0 + b0, v1 = acc[0][j][2 * rr + 1] * f1 + b1;
        TS* d = dst + ro[rr] + n;
        if (two && (reinterpret_cast<uintptr_t>(d) & 7) == 0) {
          *reinterpret_cast<float2*>(d) = make_float2(v0, v1);
        } else {
          d[0] = v0;
          if (two) d[1] = v1;
        }
      }
    }
  } else {
    // Pixels along the output row: the warp turns 16 columns at a time around in its
    // own shared-memory block ([column][row], rows padded to 20), then each lane stores
    // 4 consecutive rows of a column with one 16-byte store where they are contiguous.
    float* sw = reinterpret_cast<float*>(smem + Tr::kWarpCOff) + (warp - 4) * Tr::kWarpC;
    const int q4 = lane & 3;
    int64_t ro[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) ro[i] = row_off(wrow + q4 * 4 + i);
    // Every lane's 4 rows contiguous (else, e.g. in a stride-2 phase or across an
    // output row, each store covers 16 rows of 2 columns).
    const bool vec = __all_sync(0xffffffffu, ro[0] >= 0 && ro[1] == ro[0] + 1 &&
                                                 ro[2] == ro[0] + 2 && ro[3] == ro[0] + 3 &&
                                                 prm.dst.sw == 1);
    const int64_t rl = vec ? 0 : row_off(wrow + (lane & 15));
#pragma unroll
    for (int P = 0; P < NI / 2; ++P) {
#pragma unroll
      for (int jj = 0; jj < 2; ++jj)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int lc = jj * 8 + 2 * (lane & 3) + e;
          const int64_t n = t.n0 + P * 16 + lc;
          const float f = n < Nc ? exp2i(-__ldg(wsc + n)) : 0.f;
          const float b = bias_g && n < Nc ? __ldg(bias_g + n) : 0.f;
#pragma unroll
          for (int rr = 0; rr < 2; ++rr)
            sw[lc * 20 + (lane >> 2) + 8 * rr] = acc[0][2 * P + jj][2 * rr + e] * f + b;
        }
      __syncwarp();
      if (vec) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const int col = (lane >> 2) + 8 * k;
          const int64_t n = t.n0 + P * 16 + col;
          if (n >= Nc) continue;
          const float4 v = *reinterpret_cast<const float4*>(sw + col * 20 + q4 * 4);
          TS* d = dst + ro[0] + n * dsc;
          if ((reinterpret_cast<uintptr_t>(d) & 15) == 0) {
            *reinterpret_cast<float4*>(d) = v;
          } else {
            d[0] = v.x;
            d[1] = v.y;
            d[2] = v.z;
            d[3] = v.w;
          }
        }
      } else if (rl >= 0) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const int col = 2 * k + (lane >> 4);
          const int64_t n = t.n0 + P * 16 + col;
          if (n < Nc) dst[rl + n * dsc] = sw[col * 20 + (lane & 15)];
        }
      }
      __syncwarp();
    }
  }
}

// The block-per-tile epilogue: 3xFP16 undoes the weight columns' scales (column n of the tile
// times 2^-w16_scale[g * Nc + n], 0 past Nc); C is staged over the drained rings and stored
// (store_consumer_tile).
template <class Tr, bool kChanOut>
__device__ __forceinline__ void halo_store(const IgemmParams& prm, const HaloTile& h,
                                           float (&acc)[Tr::HALVES][Tr::NI][4],
                                           unsigned char* smem) {
  constexpr int NI = Tr::NI, HV = Tr::HALVES;
  const int lane = threadIdx.x & 31, cw = (threadIdx.x >> 7) - 1;
  // 3xFP16: the scales, loaded before the barrier so that their latency overlaps the wait
  // for the other consumer.
  int wsf[Tr::kF16x3 ? NI : 1][2];
  if constexpr (Tr::kF16x3) {
    const int* wsc = prm.w16_scale + h.t.g * prm.Nc;
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t n = h.t.n0 + j * 8 + 2 * (lane & 3) + e;
        wsf[j][e] = n < prm.Nc ? __ldg(wsc + n) : INT_MIN;
      }
  }
  sync_threads_n<Tr::kConsumers>();  // both consumers done reading the rings
  if constexpr (Tr::kF16x3) {
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float f = wsf[j][e] == INT_MIN ? 0.f : exp2i(-wsf[j][e]);
#pragma unroll
        for (int hh = 0; hh < HV; ++hh) {
          acc[hh][j][e] *= f;
          acc[hh][j][e + 2] *= f;
        }
      }
  }
  store_consumer_tile<typename Tr::Src, Tr::BM, Tr::BN, Tr::LDC_M, Tr::LDC_N, Tr::kRowTableOff,
                      Tr::kConsumers, kChanOut, true, HV>(prm, smem, acc, cw * Tr::CR,
                                                          int(threadIdx.x) - 128, h.t);
}

// ---- the kernel ------------------------------------------------------------------------
// Warpgroup 0 produces (halo_produce_tma / halo_produce), warpgroups 1 and 2 consume
// (halo_consume) and store (halo_store / halo_store_persistent); a block takes one tile, or
// (kMulti) tiles blockIdx.x, + gridDim.x, ... in turn.
template <class Tr, bool kChanOut, bool kTma, int kNchw = 0>
__global__ void __launch_bounds__(384, 1) tc_halo_kernel(const __grid_constant__ TmaArgs<kTma> args) {
  if constexpr (!kSm90aPass<Tr>) {
    __trap();  // not compiled for this target (see kSm90aPass)
  } else {
  // 3xTF32 / 3xFP16 stage the activation halves through registers; 3xFP16 may take its
  // weights through TMA (kTma: the loader's thread 0 issues them).
  static_assert(!(kTma && Tr::kSplit && !Tr::kF16x3), "3xTF32: no TMA");
  // kNchw: 3xFP16 (a block per tile, TMA weights) reading prm.src as NCHW x (sw == 1,
  // float4 quads along W; f16x3_nchw_ok), its GEMM rows led and widened as halo_tile says;
  // 2: some quads hold positions no kept output reads (zeroed), 1: none do (no lead, no
  // widening).
  static_assert(!kNchw || (Tr::kF16x3 && kTma && !Tr::kMulti), "NCHW: 3xFP16 block per tile");
  constexpr bool kTmaA = kTma && !Tr::kSplit;  // the halo through TMA too
  const IgemmParams& prm = args.prm;
  // The 3xTF32 fallback of a 3xFP16 product runs only where 3xFP16 flagged an operand.
  if constexpr (Tr::kSplit)
    if (prm.run_if && *reinterpret_cast<const volatile int*>(prm.run_if) == 0) return;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t sraw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sbase = (sraw + 1023u) & ~1023u;
  unsigned char* smem = smem_raw + (sbase - sraw);
  const int tid = threadIdx.x, wg = tid >> 7;
  // Two rings: weight stages (SB) and halo slots (2).
  const StageRing<Tr::SB> wring(sbase + Tr::kBarOff);
  const StageRing<2> hring(sbase + Tr::kBarOff + StageRing<Tr::SB>::kBarBytes);
  if (tid == 0) {
    wring.init(kTma ? 1 : 128, Tr::kConsumers);
    hring.init(kTmaA ? 1 : 128, Tr::kConsumers);
    mbar_init_fence();
  }
  __syncthreads();
  // Ring positions (halo items, weight stages) of this thread's role. A multi-tile block
  // keeps them across its tiles: loader and consumers walk the same tiles, so their
  // positions stay paired.
  int ia = 0, ib = 0;
  const int64_t tile_end = Tr::kMulti ? prm.tiles : int64_t(blockIdx.x) + 1;
  for (int64_t tile = blockIdx.x; tile < tile_end;
       tile = Tr::kMulti ? tile + gridDim.x : tile_end) {  // (one trip unless kMulti)
    // kLoop: the last tile's C staging (over the rings) is done before the loader refills.
    if constexpr (Tr::kLoop)
      if (tile != blockIdx.x) __syncthreads();
    HaloTile h;
    if (!halo_tile<Tr, kNchw>(prm, tile, h)) continue;
    if (wg == 0) {
      if constexpr (kTmaA) {
        if (tid == 0 && h.tap_rows > 0) halo_produce_tma<Tr>(args, h, sbase, wring, hring);
        return;
      } else {
        halo_produce<Tr, kTma, kNchw>(args, h, smem, sbase, wring, hring, ia, ib);
        continue;
      }
    }
    float acc[Tr::HALVES][Tr::NI][4];
    zero_acc(acc);
    halo_consume<Tr, kTma>(acc, prm, h, smem, sbase, wring, hring, ia, ib);
    if constexpr (Tr::kPersist) halo_store_persistent<Tr, kChanOut>(prm, h, acc, smem);
    else halo_store<Tr, kChanOut>(prm, h, acc, smem);
  }
  if (wg == 0) asm volatile("cp.async.wait_all;\n" ::: "memory");  // no exit with copies in flight
  }  // if constexpr (kSm90aPass)
}

// Largest virtual GEMM height over the phases (grid sizing) and the largest
// tap-column reach xt, from the host-side phase geometry. quads: the rows as the kNchw
// kernel widens them (led to a source column that is a multiple of 4, then rounded up to 4).
struct HaloShape {
  int64_t max_mv = 0, max_xt = 0, max_ntap_x = 0;
};

HaloShape halo_shape(const IgemmParams& prm, bool quads = false) {
  const Problem& p = prm.p;
  HaloShape h;
  int64_t nqy = 0, wv = 0;
  if (prm.mode == IgemmMode::kForward) {
    for (int64_t r = 0; r < p.sh; ++r) nqy = std::max(nqy, make_phase_dim(r, p.sh, p.ph, p.dh, p.kh, p.Ho).nq);
    for (int64_t r = 0; r < p.sw; ++r) {
      const PhaseDim pd = make_phase_dim(r, p.sw, p.pw, p.dw, p.kw, p.Wo);
      const int64_t xt = pd.ntap > 0 ? (pd.ntap - 1) * pd.koff_step : 0;
      int64_t w = pd.nq + xt;
      if (quads) {  // as the kernel: c0 = ia_x + (it_x < 0 ? -xt : 0), it_x = -koff_step
        const Geo g = make_geo(prm.mode, r, p.sw, p.pw, p.dw, p.kw, prm.Wd);
        const int64_t c0 = g.ia + (g.it < 0 ? -xt : 0);
        w = (w + (c0 & 3) + 3) / 4 * 4;
      }
      wv = std::max(wv, w);
      h.max_xt = std::max(h.max_xt, xt);
      h.max_ntap_x = std::max(h.max_ntap_x, pd.ntap);
    }
  } else {
    nqy = p.H;
    h.max_xt = (p.kw - 1) * p.dw;
    h.max_ntap_x = p.kw;
    wv = p.W + h.max_xt;
  }
  h.max_mv = p.N * nqy * wv;
  return h;
}

// Phase r's GEMM row width (nq + xt) and its width led and widened as the kNchw kernel
// makes it (0, 0 for a phase with no tap columns).
struct NchwRow {
  int64_t wv = 0, widened = 0;
};
NchwRow nchw_row(const IgemmParams& prm, int64_t r) {
  const Problem& p = prm.p;
  const Geo g = make_geo(prm.mode, r, p.sw, p.pw, p.dw, p.kw, prm.Wd);
  NchwRow w;
  if (g.ntap == 0) return w;
  const int64_t xt = (g.ntap - 1) * (g.it < 0 ? -g.it : g.it);
  const int64_t c0 = g.ia + (g.it < 0 ? -xt : 0);  // as the kernel's lead = c0 & 3
  w.wv = g.nq + xt;
  w.widened = (w.wv + (c0 & 3) + 3) / 4 * 4;
  return w;
}

// Whether some phase's NCHW rows are led or widened: then quads hold positions no kept
// output reads, which the kernel zeroes (kNchw 2).
bool f16x3_nchw_masked(const IgemmParams& prm) {
  for (int64_t r = 0; r < prm.phases_x; ++r) {
    const NchwRow w = nchw_row(prm, r);
    if (w.widened != w.wv) return true;
  }
  return false;
}

template <class Tr, bool kTma, int kNchw = 0>
cudaError_t launch_halo(const TmaArgs<kTma>& args, int64_t max_mv, cudaStream_t st) {
  const IgemmParams& prm = args.prm;
  const int64_t mt = (max_mv + Tr::BM - 1) / Tr::BM;
  const int64_t nt = (prm.Nc + Tr::BN - 1) / Tr::BN;
  const int64_t blocks = mt * nt * prm.phases_y * prm.phases_x * prm.p.groups;
  if constexpr (Tr::kMulti) {
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;  // tile_geo's 32-bit index
    TmaArgs<kTma> pa = args;
    pa.prm.tiles = blocks;
    return BOOL_SWITCH(prm.dst.sc == 1, kChan, [&] {
      return launch_tile_grid<Tr>(tc_halo_kernel<Tr, kChan, kTma>,
                                  std::min<int64_t>(blocks, sm_count()), pa, st);
    });
  }
  return BOOL_SWITCH(prm.dst.sc == 1, kChan, [&] {
    return launch_tile_grid<Tr>(tc_halo_kernel<Tr, kChan, kTma, kNchw>, blocks, args, st);
  });
}

// The TMA loader where it applies (not 3xTF32), unless cp.async is forced (Variant::loader = 0).
template <class Tr>
cudaError_t run_halo(const IgemmParams& prm, int64_t max_mv, cudaStream_t st) {
  if constexpr (Tr::kF16x3 && !Tr::kMulti) {
    // NCHW x (prm.src_nchw, left by run_halo_f16x3 only where f16x3_nchw_ok): the kernel
    // reads it itself, with TMA weights; without the maps cudaErrorNotSupported (the caller
    // then makes the channels-last copy and comes back without src_nchw).
    if (prm.src_nchw.ptr) {
      TmaArgs<true> a{};
      a.prm = prm;
      a.prm.src = prm.src_nchw;
      if (!make_f16x3_wmaps(prm, Tr::BK, Tr::BN, a.tma)) return cudaErrorNotSupported;
      const int64_t mv = halo_shape(prm, true).max_mv;
      // Rows neither led nor widened (unpadded stride 1, kernel == stride): no quad to
      // mask (the masking measured 2-5% on them even when it never runs).
      if (!f16x3_nchw_masked(prm)) return launch_halo<Tr, true, 1>(a, mv, st);
      return launch_halo<Tr, true, 2>(a, mv, st);
    }
  }
  if constexpr (Tr::kF16x3) {
    // 3xFP16: the weights through TMA where the maps can be made, unless the cp.async
    // loader is forced (Variant::loader = 0).
    if (prm.var.loader != 0) {
      TmaArgs<true> a{};
      a.prm = prm;
      if (make_f16x3_wmaps(prm, Tr::BK, Tr::BN, a.tma)) return launch_halo<Tr, true>(a, max_mv, st);
    }
  }
  if constexpr (!Tr::kSplit) {
    if (prm.var.loader != 0) {
      TmaArgs<true> a;
      a.prm = prm;
      if (make_tma_maps<typename Tr::Tp>(prm, Tr::BK, Tr::BN, Tr::BM, /*halo=*/true, a.tma))
        return launch_halo<Tr, true>(a, max_mv, st);
    }
  }
  TmaArgs<false> a;
  a.prm = prm;
  return launch_halo<Tr, false>(a, max_mv, st);
}

// 3xTF32: a fresh partial accumulator beside the total halves the tile per consumer
// (64 + 64 registers), and both halves of every operand are staged (about 200 KB).
// kLoop: the 3xTF32 fallback of a 3xFP16 product (prm.run_if set), looped so that its
// launch, whose blocks exit at once unless an operand was out of range, is one wave of
// blocks rather than one per tile (dense stride-1, 128 outputs per group: 17K blocks, 0.06 ms).
template <bool kLoop = false>
cudaError_t run_halo_split(const IgemmParams& prm, int64_t max_mv, cudaStream_t st) {
  // (256 x 64 tiles for 128-column GEMMs too measured slower: a dense stride-1 forward,
  // 7.83 -> 9.66 ms.)
  if (prm.Nc <= 64)
    return run_halo<HaloTraits<float, 256, 64, 4, true, false, kLoop>>(prm, max_mv, st);
  return run_halo<HaloTraits<float, 128, 128, 4, true, false, kLoop>>(prm, max_mv, st);
}

// Whether the 3xFP16 kernel reads NCHW x (prm.src_nchw) itself. It can where float4 loads
// along W work: W unit-stride, the other strides multiples of 4 floats, a 16-byte aligned
// base (a quad of columns 4 j .. 4 j + 3 is then one aligned float4 per channel, inside or
// outside the row as a whole), and TMA weights. By default it does where the widening of
// its GEMM rows (lead, then a multiple of 4) adds at most 1/8 to every phase's rows: measured
// against the copy and the NHWC kernel, no widening: dense stride-1 3.639 -> 3.435 ms,
// kernel == stride 0.398 -> 0.345; 1/43 more rows, quads masked: k=3 stride 2, batch 1
// 0.444 -> 0.442; 3/17 more (before the masking): k=4 stride 2 0.385 -> 0.388.
// Variant::f16x3_nchw = 1: wherever it can (tests, A/B), 0: never; never with cp.async
// weights (Variant::loader = 0).
bool f16x3_nchw_ok(const IgemmParams& prm) {
  if (prm.var.f16x3_nchw == 0 || prm.var.loader == 0) return false;
  const TensorRef& x = prm.src_nchw;
  const bool can = prm.mode == IgemmMode::kForward && x.sw == 1 && x.sh % 4 == 0 &&
                   x.sc % 4 == 0 && x.sn % 4 == 0 && prm.Ws % 4 == 0 &&
                   (reinterpret_cast<uintptr_t>(x.ptr) & 15) == 0;
  if (!can || prm.var.f16x3_nchw == 1) return can;
  for (int64_t r = 0; r < prm.phases_x; ++r) {
    const NchwRow w = nchw_row(prm, r);
    if (8 * w.widened > 9 * w.wv) return false;
  }
  return true;
}

// 3xFP16: 128 x 128 tiles as 3xTF32's (a fresh partial accumulator beside the total), each
// item 64 channels; then the looped 3xTF32 kernel, which exits at once unless an operand was
// out of the 3xFP16 range (f16_flag) and otherwise recomputes the whole product.
cudaError_t run_halo_f16x3(const IgemmParams& prm, int64_t max_mv, cudaStream_t st) {
  // A block per tile: with TMA weights and the next halo prefetched it beat the persistent
  // kernel on dense stride 1 (3.75 vs 4.01 ms) and on stride-2 k=4 / k=3 layers (0.384 vs
  // 0.401, 0.441 vs 0.476), and lost with kernel == stride (0.408 vs 0.393).
  // Variant::f16x3_persist = 1 forces the persistent kernel (tests, A/B timing).
  const bool persist = prm.var.f16x3_persist == 1;
  IgemmParams fb = prm;
  fb.src_nchw = TensorRef{};
  fb.run_if = prm.f16_flag;
  // NCHW x: the block-per-tile kernel reads it itself where it can, and the
  // channels-last copy is made only for the fallback, where an operand was out of range.
  if (prm.src_nchw.ptr && !persist && f16x3_nchw_ok(prm)) {
    const cudaError_t e = run_halo<HaloTraits<__half, 128, 128, 4, true>>(prm, max_mv, st);
    if (e == cudaSuccess) {
      const cudaError_t f = fill_src_nhwc(prm, prm.f16_flag, st);
      if (f != cudaSuccess) return f;
      return run_halo_split<true>(fb, max_mv, st);
    }
    if (e != cudaErrorNotSupported) return e;
  }
  const cudaError_t f = fill_src_nhwc(prm, nullptr, st);
  if (f != cudaSuccess) return f;
  IgemmParams q = prm;
  q.src_nchw = TensorRef{};
  const cudaError_t e =
      persist ? run_halo<HaloTraits<__half, 128, 128, 4, true, true>>(q, max_mv, st)
              : run_halo<HaloTraits<__half, 128, 128, 4, true>>(q, max_mv, st);
  if (e != cudaSuccess) return e;
  return run_halo_split<true>(fb, max_mv, st);
}

template <typename T>
cudaError_t run_halo_t(const IgemmParams& prm, int64_t max_mv, cudaStream_t st) {
  // 64-column GEMMs: 512-row tiles (each consumer four m64n64 blocks) halve the weight
  // re-reads and the per-tile fill/epilogue share (dense stride-1, bf16 forward: 1.70 ->
  // 1.42 ms). 128 columns keep 256 x 128 (512 x 64 tiles measured slower: dense stride-1,
  // bf16 forward: 2.08 -> 2.24 ms).
  if (prm.Nc <= 64) return run_halo<HaloTraits<T, 512, 64, 6>>(prm, max_mv, st);
  return run_halo<HaloTraits<T, 256, 128, 6>>(prm, max_mv, st);
}
#endif  // CONVT2D_WGMMA

}  // namespace

bool tc_halo_supported(const IgemmParams& prm, DType dt, MathMode math) {
#if defined(CONVT2D_WGMMA)
  // fp32 with TF32 off runs 3xTF32 (it then needs prm.wpk_hi / wpk_lo / wflag).
  if (dt == DType::kDouble) return false;
  const int64_t size = dt == DType::kFloat ? 4 : 2;
  if (prm.Kc * size < 128 || prm.Nc <= 32) return false;
  // Source pixels of a phase row must be consecutive (always in forward; the
  // dgrad conv needs stride 1 along x).
  if (prm.mode == IgemmMode::kDgrad && prm.p.sw != 1) return false;
  // One tap column per phase gives no halo reuse: only 3xTF32 takes it (its
  // alternative, the mma.sync 3xTF32 kernel, is about 2x slower).
  const bool split = dt == DType::kFloat && math == MathMode::kIEEE;
  const HaloShape h = halo_shape(prm);
  if (h.max_xt > kHaloMaxReach || h.max_ntap_x < (split ? 1 : 2)) return false;
  return wgmma_device();
#else
  (void)prm; (void)dt; (void)math;
  return false;
#endif
}

// 3xFP16 (docs/design.md, Precision policy): forward GEMMs of more than 64 columns whose
// channels fill whole 16-byte fp16 chunks (Variant::f16x3 = 0: never, 3xTF32 instead).
bool tc_halo_f16x3_applies(const IgemmParams& prm) {
#if defined(CONVT2D_WGMMA)
  if (prm.var.f16x3 == 0) return false;
  return prm.mode == IgemmMode::kForward && prm.Kc % 8 == 0 && prm.Nc > 64 &&
         tc_halo_supported(prm, DType::kFloat, MathMode::kIEEE);
#else
  (void)prm;
  return false;
#endif
}

int64_t tc_halo_tap_cols(const IgemmParams& prm) {
#if defined(CONVT2D_WGMMA)
  return halo_shape(prm).max_ntap_x;
#else
  (void)prm;
  return 0;
#endif
}

cudaError_t launch_tc_halo(const IgemmParams& prm_in, DType dt, MathMode math, cudaStream_t st) {
#if defined(CONVT2D_WGMMA)
  // Only the 3xFP16 kernel reads NCHW x (prm.src_nchw) itself: elsewhere the copy first.
  const bool f16x3 = dt == DType::kFloat && math == MathMode::kIEEE && prm_in.wpk_hi &&
                     prm_in.wpk_lo && prm_in.wflag && prm_in.w16_hi && prm_in.w16_lo &&
                     prm_in.w16_scale && prm_in.f16_flag && tc_halo_f16x3_applies(prm_in);
  IgemmParams prm = prm_in;
  if (prm.src_nchw.ptr && !f16x3) {
    const cudaError_t e = fill_src_nhwc(prm, nullptr, st);
    if (e != cudaSuccess) return e;
    prm.src_nchw = TensorRef{};
  }
  // The halo slots hold BM + kHaloMaxReach rows; the loader trusts that bound.
  const HaloShape h = halo_shape(prm);
  if (h.max_xt > kHaloMaxReach || (prm.mode == IgemmMode::kDgrad && prm.p.sw != 1))
    return cudaErrorInvalidValue;
  const int64_t max_mv = h.max_mv;
  switch (dt) {
    case DType::kHalf: return run_halo_t<__half>(prm, max_mv, st);
    case DType::kBFloat16: return run_halo_t<__nv_bfloat16>(prm, max_mv, st);
    case DType::kFloat:
      if (math != MathMode::kIEEE) return run_halo_t<float>(prm, max_mv, st);
      if (!prm.wpk_hi || !prm.wpk_lo || !prm.wflag) return cudaErrorInvalidValue;
      if (f16x3) return run_halo_f16x3(prm, max_mv, st);
      return run_halo_split(prm, max_mv, st);
    default: return cudaErrorInvalidValue;
  }
#else
  (void)prm_in; (void)dt; (void)math; (void)st;
  return cudaErrorInvalidDeviceFunction;
#endif
}

}  // namespace cuda
}  // namespace convt2d
