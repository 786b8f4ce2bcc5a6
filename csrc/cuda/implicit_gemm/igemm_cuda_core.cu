// Implicit-GEMM forward (per stride phase) and grad_input (strided conv2d),
// on tensor cores (WMMA) or CUDA cores. See common/kernels.h for the mapping.
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include "common/static_switch.h"
#include <climits>
#include <cstdint>
#include <cstdlib>

namespace convt2d {
namespace cuda {

void fill_phase_geo(IgemmParams& prm) {
  const Problem& p = prm.p;
  prm.geo_ok = 0;
  if (prm.phases_y > IgemmParams::kGeoTab || prm.phases_x > IgemmParams::kGeoTab) return;
  auto put = [](IgemmParams::PhaseGeo& q, const Geo& g) {
    const int64_t v[9] = {g.om, g.oa, g.im, g.ia, g.it, g.nq, g.k0, g.ks, g.ntap};
    for (int64_t x : v)
      if (x < INT32_MIN || x > INT32_MAX) return false;
    q = {int32_t(g.om), int32_t(g.oa), int32_t(g.im), int32_t(g.ia), int32_t(g.it),
         int32_t(g.nq), int32_t(g.k0), int32_t(g.ks), int32_t(g.ntap)};
    return true;
  };
  for (int64_t r = 0; r < prm.phases_y; ++r)
    if (!put(prm.geo_y[r], make_geo(prm.mode, r, p.sh, p.ph, p.dh, p.kh, prm.Hd))) return;
  for (int64_t r = 0; r < prm.phases_x; ++r)
    if (!put(prm.geo_x[r], make_geo(prm.mode, r, p.sw, p.pw, p.dw, p.kw, prm.Wd))) return;
  prm.geo_ok = 1;
}

// kVecB: B rows are loaded as 16-byte vectors (needs Nc % (16/sizeof(T)) == 0).
template <class Tr, bool kVecB, int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks) igemm_kernel(const IgemmParams prm) {
  using T = typename Tr::T;
  using Acc = typename Tr::Acc;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, NT = Tr::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  Acc* sC = reinterpret_cast<Acc*>(smem_raw);

  const Problem& p = prm.p;
  const int tid = threadIdx.x;
  const int64_t G = p.groups;
  const int64_t g = blockIdx.z % G;
  const int64_t phase = blockIdx.z / G;
  const int64_t ry = phase / prm.phases_x, rx = phase % prm.phases_x;
  const Geo gy = make_geo(prm.mode, ry, p.sh, p.ph, p.dh, p.kh, prm.Hd);
  const Geo gx = make_geo(prm.mode, rx, p.sw, p.pw, p.dw, p.kw, prm.Wd);
  const int64_t pix = gy.nq * gx.nq;
  const int64_t M = p.N * pix;
  const int64_t m0 = int64_t(blockIdx.x) * BM;
  const int64_t n0 = int64_t(blockIdx.y) * BN;
  if (m0 >= M) return;

  const T* __restrict__ src = static_cast<const T*>(prm.src.ptr);
  const T* __restrict__ wpk = static_cast<const T*>(prm.wpk);
  const int64_t Kc = prm.Kc, Nc = prm.Nc;

  // ---- A loader: this thread always loads the same pixel (row m) ----------
  constexpr int A_ROWS_STEP = NT / BM;          // k rows covered per pass
  constexpr int A_LOADS = BK / A_ROWS_STEP;
  const int a_m = tid % BM;
  const int a_k = tid / BM;
  const int64_t a_mg = m0 + a_m;
  const bool a_mvalid = a_mg < M;
  int64_t a_n = 0, a_qy = 0, a_qx = 0;
  if (a_mvalid) {
    a_n = a_mg / pix;
    const int64_t rem = a_mg - a_n * pix;
    a_qy = rem / gx.nq;
    a_qx = rem - a_qy * gx.nq;
  }
  const int64_t a_iy0 = a_qy * gy.im + gy.ia, a_ix0 = a_qx * gx.im + gx.ia;
  const int64_t a_base = a_n * prm.src.sn + g * Kc * prm.src.sc;

  // ---- B loader: kVecB ? 16-byte vectors along n : one element ---------------
  constexpr int BV = kVecB ? 16 / int(sizeof(T)) : 1;  // elements per load
  constexpr int B_TPR = BN / BV;                       // threads per k-row
  constexpr int B_ROWS_STEP = NT / B_TPR;
  constexpr int B_LOADS = BK / B_ROWS_STEP;
  static_assert(NT % B_TPR == 0 && BK % B_ROWS_STEP == 0 && BK % A_ROWS_STEP == 0, "tile");
  using BVec = typename std::conditional<kVecB, uint4, T>::type;
  const int b_n = (tid % B_TPR) * BV;
  const int b_k = tid / B_TPR;
  const bool b_nvalid = n0 + b_n < Nc;  // with kVecB, Nc % BV == 0: all BV or none
  BVec bzero;
  if constexpr (kVecB) bzero = make_uint4(0, 0, 0, 0); else bzero = Cvt<T>::zero();

  const int64_t kc_tiles = (Kc + BK - 1) / BK;
  const int64_t ntap = gy.ntap * gx.ntap;
  const int64_t iters = ntap * kc_tiles;

  T ra[A_LOADS];
  BVec rb[B_LOADS];
  auto load_global = [&](int64_t it) {
    const int64_t tap = it / kc_tiles;
    const int64_t c0 = (it - tap * kc_tiles) * BK;
    const int64_t jy = tap / gx.ntap, jx = tap - jy * gx.ntap;
    const int64_t iy = a_iy0 + jy * gy.it, ix = a_ix0 + jx * gx.it;
    const bool ok = a_mvalid && iy >= 0 && iy < prm.Hs && ix >= 0 && ix < prm.Ws;
    const T* ap = src + a_base + iy * prm.src.sh + ix * prm.src.sw + c0 * prm.src.sc;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int k = a_k + i * A_ROWS_STEP;
      ra[i] = (ok && c0 + k < Kc) ? ap[k * prm.src.sc] : Cvt<T>::zero();
    }
    const int64_t ky = gy.k0 + jy * gy.ks, kx = gx.k0 + jx * gx.ks;
    const T* bp = wpk + (((g * p.kh + ky) * p.kw + kx) * Kc + c0) * Nc + n0 + b_n;
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int k = b_k + i * B_ROWS_STEP;
      rb[i] = (b_nvalid && c0 + k < Kc) ? *reinterpret_cast<const BVec*>(bp + k * Nc) : bzero;
    }
  };
  auto store_smem = [&](int stage) {
    T* sA = smem + stage * Tr::kStageElems;
    T* sB = sA + BK * Tr::LDA;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) sA[(a_k + i * A_ROWS_STEP) * Tr::LDA + a_m] = ra[i];
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i)
      *reinterpret_cast<BVec*>(sB + (b_k + i * B_ROWS_STEP) * Tr::LDB + b_n) = rb[i];
  };

  BlockMma<Tr> mma;
  mma.init();
  if (iters > 0) {
    load_global(0);
    store_smem(0);
    __syncthreads();
    for (int64_t it = 0; it < iters; ++it) {
      const int cur = int(it & 1);
      if (it + 1 < iters) load_global(it + 1);
      const T* sA = smem + cur * Tr::kStageElems;
      mma.compute(sA, sA + BK * Tr::LDA);
      if (it + 1 < iters) store_smem(cur ^ 1);
      __syncthreads();
    }
  }
  mma.store(sC);
  __syncthreads();

  // ---- epilogue: C tile -> dst (+bias), m fastest so NCHW rows coalesce ----
  const T* bias = static_cast<const T*>(prm.bias);
  T* dst = static_cast<T*>(prm.dst.ptr);
  static_assert(NT % BM == 0, "epilogue assumes BM divides the thread count");
  if (!a_mvalid) return;
  const int64_t oy = a_qy * gy.om + gy.oa, ox = a_qx * gx.om + gx.oa;
  T* dp = dst + a_n * prm.dst.sn + oy * prm.dst.sh + ox * prm.dst.sw + g * Nc * prm.dst.sc;
  for (int nl = a_k; nl < BN; nl += A_ROWS_STEP) {
    const int64_t n = n0 + nl;
    if (n >= Nc) break;
    Acc v = sC[nl * Tr::LDC + a_m];
    if (bias) v += Cvt<T>::to_acc(bias[g * Nc + n]);
    dp[n * prm.dst.sc] = Cvt<T>::from_acc(v);
  }
}

template <class Tr, bool kVecB, int kMinBlocks>
static cudaError_t run_kernel(const IgemmParams& prm, cudaStream_t st) {
  const int64_t gx = (prm.max_m + Tr::BM - 1) / Tr::BM;
  const int64_t gy = (prm.Nc + Tr::BN - 1) / Tr::BN;
  const int64_t gz = prm.phases_y * prm.phases_x * prm.p.groups;
  if (gx > 0x7fffffffLL || gy > 65535 || gz > 65535) return cudaErrorInvalidConfiguration;
  auto kern = igemm_kernel<Tr, kVecB, kMinBlocks>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  kern<<<dim3(unsigned(gx), unsigned(gy), unsigned(gz)), Tr::kThreads, Tr::kSmemBytes, st>>>(prm);
  return cudaGetLastError();
}

template <class Tr>
static cudaError_t run(const IgemmParams& prm, cudaStream_t st) {
  constexpr int V = 16 / int(sizeof(typename Tr::T));
  const bool vec = prm.Nc % V == 0 && (reinterpret_cast<uintptr_t>(prm.wpk) % 16) == 0;
  // Two blocks per SM (a register-rich one-block variant measured no faster).
  return BOOL_SWITCH(vec, kVec, [&] { return run_kernel<Tr, kVec, 2>(prm, st); });
}

template <typename T, bool TC, int BK>
static cudaError_t run_bn(const IgemmParams& prm, cudaStream_t st) {
  if (prm.Nc <= 64) return run<Traits<T, TC, 128, 64, BK>>(prm, st);
  return run<Traits<T, TC, 128, 128, BK>>(prm, st);
}

cudaError_t launch_igemm(const IgemmParams& prm, DType dt, MathMode math, cudaStream_t st) {
  switch (dt) {
    case DType::kHalf: return run_bn<__half, true, 32>(prm, st);
    case DType::kBFloat16: return run_bn<__nv_bfloat16, true, 32>(prm, st);
    case DType::kFloat:
      if (math == MathMode::kTF32) return run_bn<float, true, 16>(prm, st);
      return run_bn<float, false, 16>(prm, st);
    case DType::kDouble: return run<Traits<double, false, 64, 64, 16>>(prm, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace convt2d
