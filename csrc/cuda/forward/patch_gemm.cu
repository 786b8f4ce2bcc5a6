// Forward for kernel == stride (non-overlapping patches: U-Net / decoder k=2 s=2
// upsampling, k=4 s=4, 1x1), NCHW in and out, on mma.sync tensor cores, with no
// layout copies and no weight packing.
//
// With kh == sh, kw == sw, dilation 1 (or a single tap), no padding and no output
// padding, every output pixel receives exactly one tap:
//   out[n, g*Cog + co, h*kh + ky, w*kw + kx] =
//       bias[g*Cog + co] + sum_ci x[n, g*Cig + ci, h, w] * wt[g*Cig + ci, co, ky, kx]
// so per (n, g) the whole forward is ONE GEMM (not one per stride phase):
//   C[m = h*W + w][j = (co*kh + ky)*kw + kx] = sum_ci A[ci][m] * B[ci][j]
// with A = x's [Cig][H*W] planes (M contiguous) and B = the weight's own
// [Cig][Cog*kh*kw] rows (N contiguous). Both operands are "MN-major": ldmatrix.trans
// gives the 16-bit mma fragments from them, scalar shared loads the tf32 ones.
// The pixel shuffle (j -> (co, ky, kx)) happens in the epilogue, which is where
// the per-phase kernels lose: their phase rows are stride-2 scatters.
//
// Tile: BM = 128 pixels as R image rows x TW columns (TW a power of two, 8..128,
// chosen on the host to waste the least), BN = 128 GEMM columns (BN % (kh*kw) == 0,
// so a tile holds whole output channels), BK = 32 channels per stage,
// 4-stage (16-bit) / 3-stage (fp32) cp.async pipeline into XOR-swizzled shared memory, 8 warps as 2 (M) x 4 (N)
// with 64 x 32 warp tiles. Epilogue: acc + bias, converted, staged in shared memory
// in output order (per output channel and tap row, the tile's pixels times kw), then
// copied out with 16-byte loads and stores: each output line (co, ky, tile row r) is
// TW*kw contiguous output elements (whole 16-byte chunks: W % chunk == 0).
// fp32: tf32 m16n8k8 (TF32 on) or 3xTF32 (TF32 off, SplitMma of common/ptx.cuh).
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include "cuda/common/ptx.cuh"

namespace convt2d {
namespace cuda {
namespace {

constexpr int kPgBM = 128, kPgBN = 128, kPgThreads = 256;

template <typename T>
struct PgTraits {
  static constexpr int kE = 16 / int(sizeof(T));     // elements per 16-byte chunk
  static constexpr int kLgE = sizeof(T) == 2 ? 3 : 2;
  static constexpr int BK = 32;                      // channels per stage
  static constexpr int KS = BK * int(sizeof(T)) / 32;  // mma k-steps per stage (2 k16 / 4 k8)
  static constexpr int RB = kPgBM * int(sizeof(T));  // bytes per smem row (A and B: BM == BN)
  static constexpr int kStage = 2 * BK * RB;         // A + B bytes per stage (16 / 32 KB)
  // Pipeline depth: 4 stages (64 KB) for 16-bit, 3 (96 KB) for fp32: two blocks per SM on
  // an H100 (the 3xTF32 variant runs one, by its register count).
  static constexpr int kStages = sizeof(T) == 2 ? 4 : 3;
  static constexpr int kLd = BK * (kPgBM / kE) / kPgThreads;  // chunks per thread and operand
  // Epilogue staging, in output order: per GEMM-column row jrow = co*kh + ky
  // (BN / kw of them) the tile's line elements (m, kx) at m*kw + kx, pitch
  // BM*kw + kPad elements (kPad: 32 bytes, so the pitch is 8 words mod 32 banks).
  static constexpr int kPad = 32 / int(sizeof(T));
  static constexpr int kStageC = (kPgBN * kPgBM + kPgBN * kPad) * int(sizeof(T));  // kw = 1 worst
  static constexpr int kSmem = kStages * kStage > kStageC ? kStages * kStage : kStageC;
  // Swizzle of the 16-byte chunk index of smem row k: 16-bit ldmatrix reads 8
  // consecutive rows at one logical chunk. tf32: B lane reads are 4 rows x 2 chunks;
  // A lane reads (8-byte pairs, see the kernel) are 4 rows x 4 chunks x both halves.
  static __device__ __forceinline__ int swz_a(int k) {
    return sizeof(T) == 2 ? (k & 7) : (k & 3);
  }
  static __device__ __forceinline__ int swz_b(int k) {
    return sizeof(T) == 2 ? (k & 7) : ((k & 3) << 1);
  }
};

struct PgCfg {
  const void* x;
  void* out;
  const void* w;
  const void* bias;
  int Cin, Cig, Cog, Cout, H, W, Ho, Wo, G;
  int NJ;            // Cog * kh * kw (GEMM N per group)
  int lg_kh, lg_kw;  // kh, kw are powers of two
  int lg_tw;         // tile width TW = 1 << lg_tw, R = 128 / TW rows
  int tiles_w;       // column tiles per image
  int KT;            // k-tiles: ceil(Cig / BK)
};

template <typename T, bool kSplit>
__global__ void __launch_bounds__(kPgThreads, kSplit ? 1 : 2) patch_gemm_kernel(const PgCfg c) {
  using Tr = PgTraits<T>;
  constexpr int kE = Tr::kE, BK = Tr::BK, RB = Tr::RB;
  constexpr int MI = 4, NI = 4;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sbase = uint32_t(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;
  const int TW = 1 << c.lg_tw, lgR = 7 - c.lg_tw;
  const int j0 = blockIdx.x * kPgBN;
  const int th = blockIdx.y / c.tiles_w;
  const int h0 = th << lgR, w0 = (blockIdx.y - th * c.tiles_w) << c.lg_tw;
  const int n = blockIdx.z / c.G, g = blockIdx.z - n * c.G;
  const int64_t HW = int64_t(c.H) * c.W;
  const T* xg = static_cast<const T*>(c.x) + (int64_t(n) * c.Cin + int64_t(g) * c.Cig) * HW;
  const T* wg = static_cast<const T*>(c.w) + int64_t(g) * c.Cig * c.NJ;

  // ---- loader: per stage BK rows x kCh 16-byte chunks of A and of B; a thread
  // copies chunk column ch of rows k0 + i*kRs (i < kLd): one pixel chunk of x and one
  // column chunk of w, so one source pointer per operand (rows kRs apart), and one
  // destination base (kRs is a multiple of 8: the row swizzle is the same).
  constexpr int kCh = kPgBM / kE;  // chunks per smem row
  constexpr int kRs = kPgThreads / kCh;
  const int k0 = tid / kCh, ch = tid % kCh;
  const int m = ch * kE;
  const int ah = h0 + (m >> c.lg_tw), aw = w0 + (m & (TW - 1));
  const bool a_ok = ah < c.H && aw < c.W;
  const T* a_src = xg + int64_t(k0) * HW + (a_ok ? int64_t(ah) * c.W + aw : 0);
  const int bj = j0 + ch * kE;
  const bool b_ok = bj < c.NJ;
  const T* b_src = wg + int64_t(k0) * c.NJ + (b_ok ? bj : 0);
  const uint32_t a_dst = uint32_t(k0 * RB + ((ch ^ Tr::swz_a(k0)) << 4));
  const uint32_t b_dst = uint32_t(BK * RB + k0 * RB + ((ch ^ Tr::swz_b(k0)) << 4));
  const int64_t a_row = int64_t(kRs) * HW, b_row = int64_t(kRs) * c.NJ;
  // Called for kt = 0, 1, 2, ... in order: the source pointers step by BK channels.
  auto load_stage = [&](int stage, int kt) {
    const uint32_t s = sbase + stage * Tr::kStage;
#pragma unroll
    for (int i = 0; i < Tr::kLd; ++i) {
      const bool kin = kt * BK + k0 + i * kRs < c.Cig;
      const bool ka = a_ok && kin, kb = b_ok && kin;
      cp_async16(s + a_dst + i * kRs * RB, ka ? a_src + i * a_row : xg, ka ? 16 : 0);
      cp_async16(s + b_dst + i * kRs * RB, kb ? b_src + i * b_row : wg, kb ? 16 : 0);
    }
    a_src += Tr::kLd * a_row;
    b_src += Tr::kLd * b_row;
  };

  // ---- per-lane fragment offsets (bytes inside a stage; see the swizzle notes)
  // 16-bit: A x4.trans rows k = ks*16 + (lane&7) + ((lane>>4)&1)*8, chunk
  //   wm*8 + 2i + ((lane>>3)&1); B x4.trans rows k = ks*16 + (lane&7) +
  //   ((lane>>3)&1)*8, chunk wn*4 + 2jp + (lane>>4). The XOR of the swizzle
  //   commutes with the carry-free +2i / +2jp, so one base per lane suffices.
  // tf32: B b0, b1 = (k = ks*8 + t [+4], n = wn*32 + 8j + gq); t = lane&3, gq = lane>>2.
  //   A with its rows permuted (legal: it relabels C's rows): row r of m-tile i is tile
  //   pixel wm*64 + 8*(r&7) + 2*(i ^ (gq&1)) + (r>>3), so a0, a1 (rows gq, gq+8) are one
  //   8-byte pair of smem row k = ks*8 + t and a2, a3 the pair of row k + 4: two 64-bit
  //   loads per m-tile straight into the fragment's register halves (not four 32-bit
  //   ones). The i ^ (gq&1) puts lanes gq, gq+1 on different halves of a 16-byte chunk, so
  //   with the (k&3) chunk swizzle a half-warp's 16 pairs hit 32 different banks.
  uint32_t a_off, b_off;
  if constexpr (sizeof(T) == 2) {
    const int s = lane & 7;
    a_off = uint32_t(((lane & 7) + ((lane >> 4) & 1) * 8) * RB +
                     (((wm * 8 + ((lane >> 3) & 1)) ^ s) << 4));
    b_off = uint32_t(BK * RB + ((lane & 7) + ((lane >> 3) & 1) * 8) * RB +
                     (((wn * 4 + (lane >> 4)) ^ s) << 4));
  } else {
    const int t = lane & 3, gq = lane >> 2;
    // The pair of m-tile i: logical chunk wm*16 + 2gq + (i >> 1) (its low bit XORs into
    // the swizzled one), byte 8 * ((i ^ gq) & 1) in it: a_off ^ (i << 3).
    a_off = uint32_t(t * RB + (((wm * 16 + 2 * gq) ^ Tr::swz_a(t)) << 4) + (gq & 1) * 8);
    b_off = uint32_t(BK * RB + t * RB + (((wn * 8 + (gq >> 2)) ^ Tr::swz_b(t)) << 4) + (gq & 3) * 4);
  }

  float acc[MI][NI][4];
  zero_acc(acc);

#pragma unroll
  for (int s = 0; s < Tr::kStages - 1; ++s) {
    if (s < c.KT) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < c.KT; ++kt) {
    cp_async_wait<Tr::kStages - 2>();
    __syncthreads();
    {
      const int nk = kt + Tr::kStages - 1;
      if (nk < c.KT) load_stage(nk % Tr::kStages, nk);
      cp_async_commit();
    }
    const uint32_t st = sbase + (kt % Tr::kStages) * Tr::kStage;
    SplitMma<T, kSplit, MI, NI> sm;
    sm.begin_tile();
#pragma unroll
    for (int ks = 0; ks < Tr::KS; ++ks) {
      uint32_t bfr[NI][2], bs[NI][2];
      if constexpr (sizeof(T) == 2) {
#pragma unroll
        for (int jp = 0; jp < NI / 2; ++jp) {
          uint32_t r[4];
          ldmatrix_x4_trans(r, st + ((b_off + ks * 16 * RB) ^ (jp << 5)));
          bfr[2 * jp][0] = r[0]; bfr[2 * jp][1] = r[1];
          bfr[2 * jp + 1][0] = r[2]; bfr[2 * jp + 1][1] = r[3];
        }
      } else {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const uint32_t o = st + ((b_off + ks * 8 * RB) ^ (j << 5));
          bfr[j][0] = lds32(o);
          bfr[j][1] = lds32(o + 4 * RB);
        }
      }
#pragma unroll
      for (int j = 0; j < NI; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) sm.operand(bfr[j][e], bs[j][e]);
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        uint32_t af[4], as[4];
        if constexpr (sizeof(T) == 2) {
          ldmatrix_x4_trans(af, st + ((a_off + ks * 16 * RB) ^ (i << 5)));
        } else {
          const uint32_t o = st + ((a_off + ks * 8 * RB) ^ (i << 3));
          lds64(af[0], af[1], o);
          lds64(af[2], af[3], o + 4 * RB);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) sm.operand(af[e], as[e]);
#pragma unroll
        for (int j = 0; j < NI; ++j) sm.mma(acc, i, j, af, as, bfr[j], bs[j]);
      }
    }
    sm.end_tile(acc);
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- epilogue 1: acc + bias -> T, staged in output order: element (m, n) of the
  // tile (n = jrow*kw + kx) at jrow*ld2 + m*kw + kx.
  T* sC = reinterpret_cast<T*>(smem);
  const int lg_kk = c.lg_kh + c.lg_kw;
  const int kw = 1 << c.lg_kw;
  // fp32: the 8-byte pair stores stage 2-way conflicted with a 32-byte pad (kw = 4: 16 bytes).
  const int ld2 = (kPgBM << c.lg_kw) + (sizeof(T) == 4 && c.lg_kw == 2 ? 4 : Tr::kPad);
  if constexpr (sizeof(T) == 4) {
    // fp32 (rows permuted, see the fragment notes): the lane holds pixels
    // wm*64 + 8gq + 0..7 and columns n = wn*32 + 8j + 2t + e (e = 0, 1). With kw >= 2,
    // n and n + 1 are taps kx, kx + 1 of one staged row: one 8-byte store per pair.
    const int t = lane & 3, gq = lane >> 2;
    const float* bias = static_cast<const float*>(c.bias);
    float* sCf = reinterpret_cast<float*>(smem);
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      const int nn = wn * 32 + j * 8 + 2 * t;
      float bv[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int jj = j0 + nn + e;
        bv[e] = (bias != nullptr && jj < c.NJ) ? bias[int64_t(g) * c.Cog + (jj >> lg_kk)] : 0.f;
      }
      const int fn0 = (nn >> c.lg_kw) * ld2 + (nn & (kw - 1));
      const int fn1 = ((nn + 1) >> c.lg_kw) * ld2 + ((nn + 1) & (kw - 1));
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int m = wm * 64 + 8 * gq + 2 * ((i ^ gq) & 1) + (i >> 1) * 4;
        const int o0 = m << c.lg_kw, o1 = (m + 1) << c.lg_kw;
        if (c.lg_kw > 0) {
          *reinterpret_cast<float2*>(sCf + fn0 + o0) =
              make_float2(acc[i][j][0] + bv[0], acc[i][j][1] + bv[1]);
          *reinterpret_cast<float2*>(sCf + fn0 + o1) =
              make_float2(acc[i][j][2] + bv[0], acc[i][j][3] + bv[1]);
        } else {
          sCf[fn0 + o0] = acc[i][j][0] + bv[0];
          sCf[fn1 + o0] = acc[i][j][1] + bv[1];
          sCf[fn0 + o1] = acc[i][j][2] + bv[0];
          sCf[fn1 + o1] = acc[i][j][3] + bv[1];
        }
      }
    }
  } else {
    const int t = lane & 3, gq = lane >> 2;
    const T* bias = static_cast<const T*>(c.bias);
    const int m_base = (wm * 64 + gq) << c.lg_kw;
    const int m8 = 8 << c.lg_kw;
#pragma unroll
    for (int j = 0; j < NI; ++j) {
      float bv[2];
      int fn[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int nn = wn * 32 + j * 8 + 2 * t + e;
        const int jj = j0 + nn;
        bv[e] = (bias != nullptr && jj < c.NJ)
                    ? Cvt<T>::to_acc(bias[int64_t(g) * c.Cog + (jj >> lg_kk)])
                    : 0.f;
        fn[e] = (nn >> c.lg_kw) * ld2 + (nn & (kw - 1)) + m_base;
      }
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int mo = (i * 16) << c.lg_kw;
        sC[fn[0] + mo] = Cvt<T>::from_acc(acc[i][j][0] + bv[0]);
        sC[fn[1] + mo] = Cvt<T>::from_acc(acc[i][j][1] + bv[1]);
        sC[fn[0] + mo + m8] = Cvt<T>::from_acc(acc[i][j][2] + bv[0]);
        sC[fn[1] + mo + m8] = Cvt<T>::from_acc(acc[i][j][3] + bv[1]);
      }
    }
  }
  __syncthreads();

  // ---- epilogue 2: 16-byte chunks of the staged rows to the output lines. Row jrow
  // holds R lines (tile rows r) of TW*kw elements, each one output row segment.
  const int lg_ipj = 7 + c.lg_kw - Tr::kLgE;       // chunks per staged row
  const int lg_line = c.lg_tw + c.lg_kw;           // elements per line
  const int co_base = j0 >> lg_kk;
  T* outg = static_cast<T*>(c.out);
  const int64_t out_img = (int64_t(n) * c.Cout + int64_t(g) * c.Cog) * c.Ho;
  constexpr int kItems = kPgBN * kPgBM / kE;
#pragma unroll 4
  for (int f = tid; f < kItems; f += kPgThreads) {
    const int jrow = f >> lg_ipj;
    const int q = (f & ((1 << lg_ipj) - 1)) * kE;  // element in the staged row
    const int r = q >> lg_line;
    const int oxl = q & ((1 << lg_line) - 1);
    const int co = co_base + (jrow >> c.lg_kh);
    const int h = h0 + r;
    if (co >= c.Cog || h >= c.H || w0 + (oxl >> c.lg_kw) >= c.W) continue;
    const uint4 v = *reinterpret_cast<const uint4*>(sC + jrow * ld2 + q);
    const int64_t orow = out_img + int64_t(co) * c.Ho + (int64_t(h) << c.lg_kh) +
                         (jrow & ((1 << c.lg_kh) - 1));
    __stcs(reinterpret_cast<uint4*>(outg + orow * c.Wo + (int64_t(w0) << c.lg_kw) + oxl), v);  // streaming: written once
  }
}

int ilog2_exact(int64_t v) {  // log2 of a power of two, else -1
  if (v <= 0 || (v & (v - 1)) != 0) return -1;
  int l = 0;
  while ((int64_t(1) << l) < v) ++l;
  return l;
}

// Tile width: the power of two TW = 1 << lg_tw in [8, 128] whose R x TW tiles (R = 128 /
// TW) cover the image with the fewest pixels (ties: the wider tile, for longer output
// lines). Returns the tile count; tiles_w = column tiles.
int64_t pg_tiles(const Problem& p, int& lg_tw, int64_t& tiles_w) {
  int64_t best_area = -1;
  lg_tw = 7;
  for (int lg = 7; lg >= 3; --lg) {
    const int64_t tw = int64_t(1) << lg, r = kPgBM / tw;
    const int64_t area = ((p.W + tw - 1) / tw) * ((p.H + r - 1) / r);
    if (best_area < 0 || area < best_area) { best_area = area; lg_tw = lg; }
  }
  const int64_t tw = int64_t(1) << lg_tw, r = kPgBM / tw;
  tiles_w = (p.W + tw - 1) / tw;
  return tiles_w * ((p.H + r - 1) / r);
}

template <typename T, bool kSplit>
cudaError_t launch_t(const PgCfg& c, dim3 grid, cudaStream_t st) {
  using Tr = PgTraits<T>;
  auto kern = patch_gemm_kernel<T, kSplit>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmem);
  if (e != cudaSuccess) return e;
  kern<<<grid, kPgThreads, Tr::kSmem, st>>>(c);
  return cudaGetLastError();
}

}  // namespace

bool patch_gemm_supported(const Problem& p, DType dt) {
  if (dt != DType::kFloat && dt != DType::kHalf && dt != DType::kBFloat16) return false;
  if (p.kh != p.sh || p.kw != p.sw) return false;
  if ((p.kh > 1 && p.dh != 1) || (p.kw > 1 && p.dw != 1)) return false;
  if (p.ph != 0 || p.pw != 0 || p.oph != 0 || p.opw != 0) return false;
  const int64_t kk = p.kh * p.kw;
  if (ilog2_exact(p.kh) < 0 || ilog2_exact(p.kw) < 0 || kPgBN % kk != 0) return false;
  const int64_t ke = dt == DType::kFloat ? 4 : 8;
  if (p.W % ke != 0 || (p.cout_g() * kk) % ke != 0) return false;
  if (p.N <= 0 || p.cin_g() <= 0 || p.cout_g() <= 0 || p.H <= 0) return false;
  // 32-bit sizes in the kernel; grid y (pixel tiles) and z (images x groups) limits
  const int64_t lim = int64_t(1) << 30;
  if (p.H >= lim || p.W >= lim || p.Ho >= lim || p.Wo >= lim || p.Cin >= lim || p.Cout >= lim ||
      p.cout_g() * kk >= lim)
    return false;
  int lg_tw = 0;
  int64_t tiles_w = 0;
  if (p.N * p.groups > 65535 || pg_tiles(p, lg_tw, tiles_w) > 65535) return false;
  return true;
}

cudaError_t launch_patch_gemm(const PatchParams& prm, DType dt, MathMode math, cudaStream_t st,
                              bool& launched) {
  launched = false;
  const Problem& p = prm.p;
  if (!patch_gemm_supported(p, dt)) return cudaSuccess;
  for (const void* ptr : {prm.x, static_cast<const void*>(prm.out), prm.w})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return cudaSuccess;
  PgCfg c;
  c.x = prm.x; c.out = prm.out; c.w = prm.w; c.bias = prm.bias;
  c.Cin = int(p.Cin); c.Cig = int(p.cin_g()); c.Cog = int(p.cout_g()); c.Cout = int(p.Cout);
  c.H = int(p.H); c.W = int(p.W); c.Ho = int(p.Ho); c.Wo = int(p.Wo); c.G = int(p.groups);
  c.NJ = int(p.cout_g() * p.kh * p.kw);
  c.lg_kh = ilog2_exact(p.kh);
  c.lg_kw = ilog2_exact(p.kw);
  int64_t tiles_w = 0;
  const int64_t tiles = pg_tiles(p, c.lg_tw, tiles_w);  // <= 65535 (supported)
  c.tiles_w = int(tiles_w);
  const int bk = dt == DType::kFloat ? PgTraits<float>::BK : PgTraits<__half>::BK;
  c.KT = int((p.cin_g() + bk - 1) / bk);
  const dim3 grid(unsigned((c.NJ + kPgBN - 1) / kPgBN), unsigned(tiles), unsigned(p.N * p.groups));
  launched = true;
  switch (dt) {
    case DType::kHalf: return launch_t<__half, false>(c, grid, st);
    case DType::kBFloat16: return launch_t<__nv_bfloat16, false>(c, grid, st);
    default:
      return math == MathMode::kIEEE ? launch_t<float, true>(c, grid, st)
                                     : launch_t<float, false>(c, grid, st);
  }
}

}  // namespace cuda
}  // namespace convt2d
