// Kernel traits and the block-level MMA policies shared by the implicit-GEMM
// kernels (forward / grad_input in implicit_gemm/igemm_cuda_core.cu, grad_weight in grad_weight/wgrad_cuda_core.cu).
//
// Shared-memory operand layout (both policies):
//   A tile: [BK][LDA]  element (m, k) at sA[k*LDA + m]   (m contiguous)
//   B tile: [BK][LDB]  element (k, n) at sB[k*LDB + n]   (n contiguous)
//   C tile: [BN][LDC]  element (m, n) at sC[n*LDC + m]   (m contiguous: the
//           epilogue stores NCHW rows coalesced)
// Policies: tensor cores through WMMA (fp16/bf16 m16n16k16, tf32 m16n16k8,
// fp32 accumulate) or CUDA cores (fp32 / fp64 FMA, register-tiled).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <type_traits>
#include "cuda/common/kernels.h"

namespace convt2d {
namespace cuda {

template <typename T> struct AccOf { using type = float; };
template <> struct AccOf<double> { using type = double; };

template <typename T> struct Cvt {
  static __device__ __forceinline__ T zero() { return T(0); }
  static __device__ __forceinline__ float to_acc(T v) { return static_cast<float>(v); }
  static __device__ __forceinline__ T from_acc(float v) { return static_cast<T>(v); }
};
template <> struct Cvt<double> {
  static __device__ __forceinline__ double zero() { return 0.0; }
  static __device__ __forceinline__ double to_acc(double v) { return v; }
  static __device__ __forceinline__ double from_acc(double v) { return v; }
};
template <> struct Cvt<__half> {
  static __device__ __forceinline__ __half zero() { return __float2half(0.f); }
  static __device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_acc(float v) { return __float2half_rn(v); }
};
template <> struct Cvt<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 zero() { return __float2bfloat16(0.f); }
  static __device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_acc(float v) { return __float2bfloat16_rn(v); }
};

// T: element type in global and shared memory (float also for tf32).
// TC: tensor cores (WMMA) or CUDA cores.
template <typename T_, bool TC_, int BM_, int BN_, int BK_>
struct Traits {
  using T = T_;
  using Acc = typename AccOf<T>::type;
  static constexpr bool kTC = TC_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_;
  static constexpr int kThreads = 256;
  // WMMA needs ldm to be a multiple of 16 bytes; the pad also breaks bank conflicts.
  static constexpr int kPad = 16 / int(sizeof(T)) > 0 ? 16 / int(sizeof(T)) : 1;
  static constexpr int LDA = BM + kPad;
  static constexpr int LDB = BN + kPad;
  static constexpr int LDC = BM + 16 / int(sizeof(Acc));
  static constexpr int kStageElems = BK * (LDA + LDB);
  static constexpr int kPipeBytes = 2 * kStageElems * int(sizeof(T));
  static constexpr int kCBytes = BN * LDC * int(sizeof(Acc));
  static constexpr int kSmemBytes = kPipeBytes > kCBytes ? kPipeBytes : kCBytes;
  static_assert(kThreads % BM == 0 || BM % kThreads == 0, "BM must divide or be a multiple of threads");
};

template <class Tr, bool TC = Tr::kTC> struct BlockMma;

// ---- tensor cores (WMMA) ---------------------------------------------------
template <class Tr> struct BlockMma<Tr, true> {
  using T = typename Tr::T;
  static constexpr bool kTF32 = std::is_same<T, float>::value;
  static constexpr int WARPS_M = 4, WARPS_N = 2;
  static constexpr int WM = Tr::BM / WARPS_M, WN = Tr::BN / WARPS_N;
  static constexpr int FM = WM / 16, FN = WN / 16;
  static constexpr int KK = kTF32 ? 8 : 16;
  using ElemAB = typename std::conditional<kTF32, nvcuda::wmma::precision::tf32, T>::type;
  static_assert(FM >= 1 && FN >= 1, "tile too small for 8 warps");

  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, KK, float> acc[FM][FN];
  int wm, wn;

  __device__ __forceinline__ void init() {
    const int warp = threadIdx.x / 32;
    wm = warp % WARPS_M;
    wn = warp / WARPS_M;
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j) nvcuda::wmma::fill_fragment(acc[i][j], 0.f);
  }

  __device__ __forceinline__ void compute(const T* sA, const T* sB) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
#pragma unroll
    for (int kk = 0; kk < Tr::BK; kk += KK) {
      wmma::fragment<wmma::matrix_a, 16, 16, KK, ElemAB, wmma::col_major> a[FM];
      wmma::fragment<wmma::matrix_b, 16, 16, KK, ElemAB, wmma::row_major> b[FN];
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        wmma::load_matrix_sync(a[i], sA + kk * Tr::LDA + wm * WM + i * 16, Tr::LDA);
        if constexpr (kTF32) {
#pragma unroll
          for (int t = 0; t < a[i].num_elements; ++t) a[i].x[t] = wmma::__float_to_tf32(a[i].x[t]);
        }
      }
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        wmma::load_matrix_sync(b[j], sB + kk * Tr::LDB + wn * WN + j * 16, Tr::LDB);
        if constexpr (kTF32) {
#pragma unroll
          for (int t = 0; t < b[j].num_elements; ++t) b[j].x[t] = wmma::__float_to_tf32(b[j].x[t]);
        }
      }
#pragma unroll
      for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
#else
    __trap();  // tensor-core path needs sm_80+; the launcher never picks it below that
#endif
  }

  __device__ __forceinline__ void store(float* sC) {
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
      for (int j = 0; j < FN; ++j)
        nvcuda::wmma::store_matrix_sync(sC + (wn * WN + j * 16) * Tr::LDC + wm * WM + i * 16,
                                        acc[i][j], Tr::LDC, nvcuda::wmma::mem_col_major);
  }
};

// ---- CUDA cores (register-tiled FMA) ---------------------------------------
// 256 threads as 16 x 16; thread (tm, tn) owns rows tm + 16*i and columns
// tn + 16*j, so a warp's shared-memory reads are consecutive or broadcast.
template <class Tr> struct BlockMma<Tr, false> {
  using T = typename Tr::T;
  using Acc = typename Tr::Acc;
  static constexpr int TM = Tr::BM / 16, TN = Tr::BN / 16;
  Acc acc[TM][TN];
  int tm, tn;

  __device__ __forceinline__ void init() {
    tm = threadIdx.x % 16;
    tn = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = Acc(0);
  }

  __device__ __forceinline__ void compute(const T* sA, const T* sB) {
#pragma unroll 4
    for (int k = 0; k < Tr::BK; ++k) {
      Acc a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = Cvt<T>::to_acc(sA[k * Tr::LDA + tm + 16 * i]);
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = Cvt<T>::to_acc(sB[k * Tr::LDB + tn + 16 * j]);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
  }

  __device__ __forceinline__ void store(Acc* sC) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) sC[(tn + 16 * j) * Tr::LDC + tm + 16 * i] = acc[i][j];
  }
};

// Per-dimension geometry of one GEMM "phase" (see common/kernels.h):
//   dst index  o = q*om + oa,         q in [0, nq)
//   src index  i = q*im + ia + j*it,  tap j in [0, ntap), weight tap k = k0 + j*ks
struct Geo {
  int64_t om, oa, im, ia, it, nq, k0, ks, ntap;
};

// Geometry of phase r of one dimension (forward), or of the dgrad conv.
__host__ __device__ __forceinline__ Geo make_geo(IgemmMode mode, int64_t r, int64_t s, int64_t pad,
                                        int64_t d, int64_t k, int64_t dst_size) {
  Geo g;
  if (mode == IgemmMode::kForward) {
    PhaseDim pd = make_phase_dim(r, s, pad, d, k, dst_size);
    g.om = s; g.oa = pd.q0 * s + r - pad; g.nq = pd.nq;
    g.im = 1; g.ia = pd.q0 - pd.koff0; g.it = -pd.koff_step;
    g.k0 = pd.k0; g.ks = pd.kstep; g.ntap = pd.ntap;
  } else {  // grad_input[i] += grad_out[i*s - pad + j*d] * w[j]
    g.om = 1; g.oa = 0; g.nq = dst_size;
    g.im = s; g.ia = -pad; g.it = d;
    g.k0 = 0; g.ks = 1; g.ntap = k;
  }
  return g;
}

// Phase r's geometry along y (y) or x: from the host's table when it has one (fill_phase_geo),
// else computed. The table entry is picked with constant offsets (a by-value kernel
// parameter indexed at run time could be copied to local memory).
__device__ __forceinline__ Geo phase_geo(const IgemmParams& prm, bool y, int64_t r) {
  const Problem& p = prm.p;
  if (!prm.geo_ok || r >= IgemmParams::kGeoTab)
    return y ? make_geo(prm.mode, r, p.sh, p.ph, p.dh, p.kh, prm.Hd)
             : make_geo(prm.mode, r, p.sw, p.pw, p.dw, p.kw, prm.Wd);
  IgemmParams::PhaseGeo q = y ? prm.geo_y[0] : prm.geo_x[0];
#pragma unroll
  for (int i = 1; i < IgemmParams::kGeoTab; ++i)
    if (r == i) q = y ? prm.geo_y[i] : prm.geo_x[i];
  Geo g;
  g.om = q.om; g.oa = q.oa; g.im = q.im; g.ia = q.ia; g.it = q.it;
  g.nq = q.nq; g.k0 = q.k0; g.ks = q.ks; g.ntap = q.ntap;
  return g;
}

// a / b and a % b for 0 <= a, 0 < b: 32-bit when both fit (the per-row pixel decode).
__device__ __forceinline__ int64_t udiv_fast(int64_t a, int64_t b) {
  return ((uint64_t(a) | uint64_t(b)) >> 32) == 0 ? int64_t(uint32_t(a) / uint32_t(b)) : a / b;
}

}  // namespace cuda
}  // namespace convt2d
