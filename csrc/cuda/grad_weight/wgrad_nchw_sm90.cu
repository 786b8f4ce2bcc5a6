// grad_weight on Hopper wgmma from NCHW operands (sm_90a; fp32 as 3xTF32 or TF32).
//
// Mapping (the WgradParams GEMM with its operands K-major): per group g
//   C[m][ci] = sum over input pixels k = (img, iy, ix) of A[m][k] * B[ci][k]
//   m = tap * Cog + co,  A[m][k] = grad_out[img, g*Cog + co, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw]
//   B[ci][k] = x[img, g*Cig + ci, iy, ix]
// With stride 1 along W, a k-tile of 32 consecutive ix of one input row is, for every
// channel, 32 consecutive floats of x and (shifted by the tap) of grad_out: one 128-byte
// row. With sw > 1 the glue hands grad_out over as sw stride-phase planes
// [N][Cout][sw][Ho][Wq] (plane r holds columns r, r + sw, ...): tap kx reads plane
// r = (kx*dw - pw) mod sw at column ix + floor((kx*dw - pw) / sw), again 32 consecutive
// floats. So both operands are K-major straight from NCHW memory, the layout tf32 wgmma
// needs, and TMA copies them (4-D tiled boxes of pixels x 1 row x 64 channels x 1 image,
// zero-filled outside the tensor, which is exactly the conv's zero padding). x's boxes (32
// pixels, the wgmma B operand) land in the 128-byte swizzle. A tap's grad_out window starts
// at any pixel, but a TMA box's innermost coordinate must be 16-byte aligned (measured: an
// illegal instruction otherwise), so grad_out boxes are 36 pixels from the aligned pixel
// below the window, unswizzled 144-byte rows; the consumers read the A fragments from them
// with plain shared loads at the window's offset (rows 36 words apart: conflict-free).
//
// Block: 64 ci (one x box, the wgmma B operand, shared) x 4 items; an item is (tap, 64-co
// slab) of grad_out, one box each. Warpgroup 0 loads (warp 0: TMA; with kSplit warps 1-3
// split the x box into big + small TF32 halves in shared memory), warpgroups 1 and 2 take
// two items each: A from registers (the m64k8 fragments read from the swizzled box and,
// with kSplit, split in registers), wgmma m64n64k8 RS.
// 3xTF32 (kSplit): operands split into big (truncated to TF32) + small halves; per k-tile
// A_lo*B_hi + A_hi*B_lo, then A_hi*B_hi, into an accumulator that is added to the total
// with IEEE fp32 adds every two k-tiles (the tensor core's truncating accumulation spans
// 24 k-steps). A k-tile with a non-finite operand runs
// big*big and the cross terms apart and drops the cross terms where big*big is not
// finite (inf * small would be NaN), as the other 3xTF32 kernels do.
// Split-K over blockIdx.y (k_per_split row tiles each) into the fp32 workspace
// [split][g][m][ci]; launch_tc_wgrad_reduce sums the splits in a fixed order.
#include "cuda/common/implicit_gemm_tile.cuh"
#include "cuda/common/kernels.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/tma_maps.cuh"
#include "cuda/common/wgmma.cuh"
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kKmBox = 64 * 128;   // x box: 64 channel rows of 32 floats (128 bytes)
constexpr int kKmGRow = 36;        // grad_out box: 64 rows of 36 floats (144 bytes)
constexpr int kKmGBox = 64 * kKmGRow * 4;
constexpr int kKmItems = 4;        // (tap, co slab) items per block, two per consumer

struct KmArgs {
  CUtensorMap x, g;  // x (W, H, Cin, N), box 32 x 1 x 64 x 1; grad_out (Wq, Ho, sw, Cout, N),
                     // box 36 x 1 x 1 x 64 x 1
  WgradParams prm;
  int nitems, nslab, ctiles, tw;  // items (kh*kw*nslab), co slabs, ci tiles, row tiles per row
  int64_t kt_total;               // N * H * tw
};

template <bool kSplit_>
struct KmTraits {
  static constexpr bool kSplit = kSplit_;
  static constexpr int kXParts = kSplit ? 2 : 1;  // x (big half), x small half
  static constexpr int kGOff = kXParts * kKmBox;  // grad_out boxes (128-byte aligned)
  static constexpr int kStage = kGOff + kKmItems * kKmGBox;
  static constexpr int S = 4;
  static constexpr int kBarOff = S * kStage;
  static constexpr int kFlagOff = kBarOff + 3 * S * 8;  // [S][4] per-warp x flags
  static constexpr int kSmemBytes = kFlagOff + S * 4 * 4 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

#if defined(CONVT2D_WGMMA)
// A tap's column offset d = kx*dw - pw as d = tq * sw + r, 0 <= r < sw (plane r, shift tq).
__device__ __forceinline__ void km_phase(int d, int sw, int& tq, int& r) {
  tq = d >= 0 ? d / sw : -((-d + sw - 1) / sw);
  r = d - tq * sw;
}

// One 4-register m64k8 fragment (k-step ks) of a grad_out box: rows r, r + 8, columns
// 8 ks + t and + 4; row0 = the address of row r at the window's first pixel.
__device__ __forceinline__ void km_frag(uint32_t (&a)[4], uint32_t row0, int t, int ks) {
  const uint32_t lo = row0 + (8 * ks + t) * 4;
  a[0] = lds32(lo);
  a[1] = lds32(lo + 8 * kKmGRow * 4);
  a[2] = lds32(lo + 16);
  a[3] = lds32(lo + 16 + 8 * kKmGRow * 4);
}

template <bool kSplit>
__global__ void __launch_bounds__(384, 1) tc_wgrad_km_kernel(const __grid_constant__ KmArgs args) {
  if constexpr (!kSm90aPass<KmTraits<kSplit>>) {
    __trap();  // not compiled for this target (see kSm90aPass)
  } else {
  using Tr = KmTraits<kSplit>;
  constexpr int S = Tr::S;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sraw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t sbase = (sraw + 1023u) & ~1023u;
  const uint32_t bar_full = sbase + Tr::kBarOff, bar_ready = bar_full + S * 8,
                 bar_empty = bar_ready + S * 8;
  volatile int* flags = reinterpret_cast<volatile int*>(smem_raw + (sbase - sraw) + Tr::kFlagOff);

  const WgradParams& prm = args.prm;
  const Problem& p = prm.p;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = warp >> 2;
  const int Cig = int(p.cin_g()), Cog = int(p.cout_g()), kw = int(p.kw);
  const int nib = (args.nitems + kKmItems - 1) / kKmItems;
  int bid = blockIdx.x;
  const int ib = bid % nib;
  bid /= nib;
  const int ct = bid % args.ctiles;
  const int g = bid / args.ctiles;
  const int64_t kt0 = int64_t(blockIdx.y) * prm.k_per_split;
  const int nk = int(min(args.kt_total - kt0, prm.k_per_split));

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(bar_full + 8 * s, 1);
      mbar_init(bar_ready + 8 * s, 96);
      mbar_init(bar_empty + 8 * s, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (warp == 0) {
      if (lane != 0) return;
      tma_prefetch_map(&args.x);
      tma_prefetch_map(&args.g);
      int nvalid = 0;
      for (int j = 0; j < kKmItems; ++j) nvalid += ib * kKmItems + j < args.nitems;
      const uint32_t bytes = uint32_t(kKmBox + nvalid * kKmGBox);
      const int ci0 = g * Cig + ct * 64;
      for (int it = 0; it < nk; ++it) {
        const int s = it % S;
        if (it >= S) mbar_wait(bar_empty + 8 * s, ((it / S) - 1) & 1);
        int64_t kt = kt0 + it;
        const int xc = int(kt % args.tw) * 32;
        kt /= args.tw;
        const int iy = int(kt % p.H), img = int(kt / p.H);
        const uint32_t st = sbase + s * Tr::kStage, fb = bar_full + 8 * s;
        mbar_arrive_expect_tx(fb, bytes);
        tma_load_4d(st, &args.x, fb, xc, iy, ci0, img);
        for (int j = 0; j < kKmItems; ++j) {
          const int i = ib * kKmItems + j;
          if (i >= args.nitems) break;
          const int slab = i % args.nslab, tap = i / args.nslab;
          const int ky = tap / kw, kx = tap - ky * kw;
          int tq, r;
          km_phase(kx * int(p.dw) - int(p.pw), int(p.sw), tq, r);
          tma_load_5d(st + Tr::kGOff + j * kKmGBox, &args.g, fb, (xc + tq) & ~3,
                      iy * int(p.sh) - int(p.ph) + ky * int(p.dh), r, g * Cog + slab * 64, img);
        }
      }
    } else if constexpr (kSplit) {
      // x box -> big half in place, small half beside it; per-warp flag of a value
      // that is not finite.
      const int t = tid - 32;
      for (int it = 0; it < nk; ++it) {
        const int s = it % S;
        mbar_wait(bar_full + 8 * s, (it / S) & 1);
        const uint32_t st = sbase + s * Tr::kStage;
        bool bad = false;
        for (int q = t; q < kKmBox / 16; q += 96) {
          uint32_t v[4], sm[4];
          asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                       : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                       : "r"(st + q * 16));
#pragma unroll
          for (int e = 0; e < 4; ++e) bad |= !split_tf32_trunc(v[e], sm[e]);
          sts128(st + q * 16, v);
          sts128(st + kKmBox + q * 16, sm);
        }
        bad = __any_sync(0xffffffffu, bad);
        if (lane == 0) flags[s * 4 + warp] = bad ? 1 : 0;
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        mbar_arrive(bar_ready + 8 * s);
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  const int cw = wg - 1, wq = warp & 3, gq = lane >> 2, tq = lane & 3;
  const int i0 = ib * kKmItems + 2 * cw;
  const bool v0 = i0 < args.nitems, v1 = i0 + 1 < args.nitems;
  const int r0 = 16 * wq + gq;
  // Each item's window offset in its box (its tap's kx), and the box row r0's address.
  uint32_t arow[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int tap = (i0 + j) / args.nslab, kx = tap % kw;
    int shift, plane;
    km_phase(kx * int(p.dw) - int(p.pw), int(p.sw), shift, plane);
    arow[j] = uint32_t(Tr::kGOff + (2 * cw + j) * kKmGBox + r0 * kKmGRow * 4 + (shift & 3) * 4);
  }
  using W = WgmmaRS<float, 64>;
  float total[2][32], part[2][32];
  bool pending = false;  // kSplit: part holds a k-tile not yet added to total
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 32; ++e) total[j][e] = 0.f;
  auto flush = [&]() {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 32; ++e) total[j][e] += part[j][e];
    pending = false;
  };

  for (int it = 0; it < nk; ++it) {
    const int s = it % S;
    const uint32_t par = (it / S) & 1;
    mbar_wait(bar_full + 8 * s, par);
    if constexpr (kSplit) mbar_wait(bar_ready + 8 * s, par);
    const uint32_t st = sbase + s * Tr::kStage;
    const uint32_t xb = st;
    if (v0) {  // warpgroup-uniform
      uint32_t a[4][2][4];
#pragma unroll
      for (int ks = 0; ks < 4; ++ks)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          km_frag(a[ks][j], st + arow[j], tq, ks);
          if (j == 1 && !v1)
#pragma unroll
            for (int e = 0; e < 4; ++e) a[ks][j][e] = 0u;
        }
      if constexpr (kSplit) {
        const uint32_t xl = st + kKmBox;
        uint32_t sm[4][2][4];
        bool bad = false;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) bad |= !split_tf32_trunc(a[ks][j][e], sm[ks][j][e]);
        bad |= (flags[s * 4 + 1] | flags[s * 4 + 2] | flags[s * 4 + 3]) != 0;
        int careful;
        asm volatile(
            "{\n.reg .pred p, q;\nsetp.ne.b32 p, %1, 0;\n"
            "bar.red.or.pred q, %2, 128, p;\nselp.b32 %0, 1, 0, q;\n}\n"
            : "=r"(careful)
            : "r"(int(bad)), "r"(2 + cw)
            : "memory");
        // The cross terms A_lo*B_hi + A_hi*B_lo and big*big A_hi*B_hi of this k-tile into
        // part (keep: add to what part holds).
        auto cross = [&](bool keep) {
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              W::run(part[j], sm[ks][j], sw128_desc(xb + 32 * ks), ks > 0 || keep);
              W::run(part[j], a[ks][j], sw128_desc(xl + 32 * ks));
            }
        };
        auto big = [&](bool keep) {
#pragma unroll
          for (int ks = 0; ks < 4; ++ks)
#pragma unroll
            for (int j = 0; j < 2; ++j)
              W::run(part[j], a[ks][j], sw128_desc(xb + 32 * ks), ks > 0 || keep);
        };
        auto run_wait = [&](auto&& issue) {
          asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
          issue();
          asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
          asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        };
        if (!careful) {
          // Cross terms first (small values), big*big last.
          run_wait([&] { cross(pending); big(true); });
          // part sums two k-tiles (24 k-steps) before it goes into the total.
          if (pending) flush();
          else pending = true;
        } else {
          // big*big alone, then the cross terms where big*big is finite.
          if (pending) flush();
          run_wait([&] { big(false); });
          uint64_t fin = 0;
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 32; ++e) {
              total[j][e] += part[j][e];
              if (isfinite(part[j][e])) fin |= uint64_t(1) << (j * 32 + e);
            }
          run_wait([&] { cross(false); });
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 32; ++e)
              if ((fin >> (j * 32 + e)) & 1) total[j][e] += part[j][e];
        }
      } else {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
#pragma unroll
          for (int j = 0; j < 2; ++j) W::run(total[j], a[ks][j], sw128_desc(xb + 32 * ks));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar_empty + 8 * s);
  }
  if (pending) flush();

  // D fragment of item j: row co = slab*64 + 16 wq + gq (+8 for e & 2), column
  // ci = ct*64 + 8 n + 2 tq (+1 for e & 1), register 4 n + e.
  const int64_t Mt = p.kh * p.kw * Cog;
  float* ws = static_cast<float*>(prm.workspace) +
              (int64_t(blockIdx.y) * p.groups + g) * Mt * Cig;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int i = i0 + j;
    if (i >= args.nitems) break;
    const int slab = i % args.nslab, tap = i / args.nslab;
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int co = slab * 64 + r0 + 8 * h, ci = ct * 64 + 8 * n + 2 * tq;
        if (co < Cog && ci < Cig)
          *reinterpret_cast<float2*>(ws + (int64_t(tap) * Cog + co) * Cig + ci) =
              make_float2(total[j][4 * n + 2 * h], total[j][4 * n + 2 * h + 1]);
      }
  }
  }  // if constexpr (kSm90aPass)
}
#endif  // CONVT2D_WGMMA

int64_t km_row_tiles(const Problem& p) { return (p.W + 31) / 32; }
int64_t km_grid_x(const Problem& p) {
  const int64_t nitems = p.kh * p.kw * ((p.cout_g() + 63) / 64);
  return (nitems + kKmItems - 1) / kKmItems * ((p.cin_g() + 63) / 64) * p.groups;
}

// Unit W stride, 16-byte aligned base and other strides (TMA), sizes within its ranges.
bool km_ref_ok(const TensorRef& t, int64_t N, int64_t C, int64_t H, int64_t W) {
  const auto ok16 = [](int64_t v) { return v > 0 && v % 4 == 0 && v < (int64_t(1) << 37); };
  return (reinterpret_cast<uintptr_t>(t.ptr) & 15) == 0 && (W == 1 || t.sw == 1) &&
         ok16(t.sh) && ok16(t.sc) && ok16(t.sn) && N < (1 << 30) && C < (1 << 30) &&
         H < (1 << 30) && W < (1 << 30);
}

}  // namespace

bool tc_wgrad_km_supported(const WgradParams& prm, DType dt) {
#if defined(CONVT2D_WGMMA)
  const Problem& p = prm.p;
  if (dt != DType::kFloat || !wgmma_device() || p.sw < 1 || p.sw > 64 || p.N <= 0) return false;
  if (p.sw > 1 && !(prm.gout_sp > 0 && prm.gout_sp % 4 == 0 && prm.gout_sp < (int64_t(1) << 37)))
    return false;
  const int64_t kt = p.N * p.H * km_row_tiles(p);
  // Tap coordinates in 32-bit ints; a split's pixel count and the epilogue's int math.
  const int64_t reach = p.ph + p.pw + p.dh * p.kh + p.dw * p.kw;
  return km_ref_ok(prm.x, p.N, p.Cin, p.H, p.W) &&
         km_ref_ok(prm.gout, p.N, p.Cout, p.Ho, (p.Wo + p.sw - 1) / p.sw) &&
         p.cin_g() % 2 == 0 && kt < (int64_t(1) << 31) - 1 && km_grid_x(p) < 0x7fffffffLL &&
         p.H * p.sh + reach < (int64_t(1) << 30) && p.W * p.sw + reach < (int64_t(1) << 30) &&
         p.kh * p.kw * p.cout_g() < (int64_t(1) << 30) && tc_wgrad_reduce_fits(p);
#else
  (void)prm;
  (void)dt;
  return false;
#endif
}

TcWgradPlan tc_wgrad_km_plan(const Problem& p, int num_sms) {
  // One resident block per SM (~190 KB of shared memory). Splits from the same kind of
  // cost model as tc_wgrad_plan: waves x k-tiles per split, plus a write and a read of
  // one fp32 workspace slice per split; at least 16 k-tiles per split, workspace at
  // most 2^26 floats.
  const int64_t tiles = km_grid_x(p);
  const int64_t kt = p.N * p.H * km_row_tiles(p);
  const int64_t cap = std::max(1, num_sms);
  const int64_t slice = p.groups * p.kh * p.kw * p.cout_g() * p.cin_g();
  const double t_ktile = 1.5e-6;  // one k-tile of a block (3xTF32, measured order)
  const double t_split = double(slice) * 8.0 / 3e12;
  const int64_t s_max = std::max<int64_t>(
      1, std::min<int64_t>({kt / 16, (int64_t(1) << 26) / std::max<int64_t>(slice, 1), 65535,
                            4 * cap}));
  int64_t splits = 1;
  double best = -1.0;
  for (int64_t sp = 1; sp <= s_max; ++sp) {
    const int64_t waves = (tiles * sp + cap - 1) / cap;
    const double t = double(waves) * double((kt + sp - 1) / sp) * t_ktile + sp * t_split;
    if (best < 0 || t < best) { best = t; splits = sp; }
  }
  const int64_t per = (kt + splits - 1) / splits;
  TcWgradPlan plan;
  plan.k_per_split = per;
  plan.splits = (kt + per - 1) / per;
  plan.ws_elems = plan.splits * slice;
  return plan;
}

cudaError_t launch_tc_wgrad_km(const WgradParams& prm, MathMode math, cudaStream_t st) {
#if defined(CONVT2D_WGMMA)
  const Problem& p = prm.p;
  if (!tc_wgrad_km_supported(prm, DType::kFloat) || prm.splits < 1 || prm.splits > 65535 ||
      prm.k_per_split < 1)
    return cudaErrorInvalidValue;
  static const EncodeTiledFn enc = driver_fn<EncodeTiledFn>("cuTensorMapEncodeTiled");
  if (!enc) return cudaErrorNotSupported;
  KmArgs args;
  args.prm = prm;
  args.nslab = int((p.cout_g() + 63) / 64);
  args.nitems = int(p.kh * p.kw) * args.nslab;
  args.ctiles = int((p.cin_g() + 63) / 64);
  args.tw = int(km_row_tiles(p));
  args.kt_total = p.N * p.H * args.tw;
  const cuuint32_t estr[5] = {1, 1, 1, 1, 1};
  const auto fl = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  {  // x: (W, H, Cin, N), 32-pixel boxes in the 128-byte swizzle
    const TensorRef& t = prm.x;
    const cuuint64_t dim[4] = {cuuint64_t(p.W), cuuint64_t(p.H), cuuint64_t(p.Cin), cuuint64_t(p.N)};
    const cuuint64_t stride[3] = {cuuint64_t(t.sh * 4), cuuint64_t(t.sc * 4), cuuint64_t(t.sn * 4)};
    const cuuint32_t box[4] = {32, 1, 64, 1};
    if (enc(&args.x, fl, 4, t.ptr, dim, stride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return cudaErrorInvalidValue;
  }
  {  // grad_out: (Wq, Ho, sw phase planes, Cout, N), 36-pixel boxes, no swizzle
    const TensorRef& t = prm.gout;
    const int64_t sp = p.sw > 1 ? prm.gout_sp : t.sc;  // (one plane: any valid stride)
    const cuuint64_t dim[5] = {cuuint64_t((p.Wo + p.sw - 1) / p.sw), cuuint64_t(p.Ho),
                               cuuint64_t(p.sw), cuuint64_t(p.Cout), cuuint64_t(p.N)};
    const cuuint64_t stride[4] = {cuuint64_t(t.sh * 4), cuuint64_t(sp * 4), cuuint64_t(t.sc * 4),
                                  cuuint64_t(t.sn * 4)};
    const cuuint32_t box[5] = {cuuint32_t(kKmGRow), 1, 1, 64, 1};
    if (enc(&args.g, fl, 5, t.ptr, dim, stride, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
      return cudaErrorInvalidValue;
  }
  const int64_t gx = km_grid_x(p);
  auto launch = [&](auto kern, int smem) {
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kern<<<dim3(unsigned(gx), unsigned(prm.splits)), 384, smem, st>>>(args);
    return cudaGetLastError();
  };
  const cudaError_t e = math == MathMode::kIEEE
                            ? launch(tc_wgrad_km_kernel<true>, KmTraits<true>::kSmemBytes)
                            : launch(tc_wgrad_km_kernel<false>, KmTraits<false>::kSmemBytes);
  if (e != cudaSuccess) return e;
  return launch_tc_wgrad_reduce(prm, DType::kFloat, st);
#else
  (void)prm;
  (void)math;
  (void)st;
  return cudaErrorInvalidValue;
#endif
}

}  // namespace cuda
}  // namespace convt2d
