// grad_weight: per tap (ky, kx) and group g a GEMM
//   gw[g][tap][co][ci] = sum over input pixels k=(n, iy, ix) of
//        A[co][k] = grad_out[n, g*Cog+co, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw]
//        B[k][ci] = x[n, g*Cig+ci, iy, ix]
// split over K (pixels) across blockIdx.y into a workspace, reduced over the
// splits in a fixed order by a second kernel: always deterministic.
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"
#include <algorithm>

namespace convt2d {
namespace cuda {

template <class Tr>
__global__ void __launch_bounds__(256) wgrad_kernel(const WgradParams prm) {
  using T = typename Tr::T;
  using Acc = typename Tr::Acc;
  constexpr int BM = Tr::BM, BN = Tr::BN, BK = Tr::BK, NT = Tr::kThreads;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  Acc* sC = reinterpret_cast<Acc*>(smem_raw);

  const Problem& p = prm.p;
  const int tid = threadIdx.x;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g(), G = p.groups, taps = p.kh * p.kw;
  const int64_t mt = (Cog + BM - 1) / BM, nt = (Cig + BN - 1) / BN;
  int64_t b = blockIdx.x;
  const int64_t mtile = b % mt; b /= mt;
  const int64_t ntile = b % nt; b /= nt;
  const int64_t tap = b % taps;
  const int64_t g = b / taps;
  const int64_t ky = tap / p.kw, kx = tap - ky * p.kw;
  const int64_t m0 = mtile * BM, n0 = ntile * BN;
  const int64_t HW = p.H * p.W, K = p.N * HW;
  const int64_t k_begin = int64_t(blockIdx.y) * prm.k_per_split;
  const int64_t k_end = min(K, k_begin + prm.k_per_split);

  const T* __restrict__ x = static_cast<const T*>(prm.x.ptr);
  const T* __restrict__ go = static_cast<const T*>(prm.gout.ptr);

  constexpr int ROWS = NT / BK;  // rows per pass; each thread owns one k column
  constexpr int A_LOADS = BM / ROWS, B_LOADS = BN / ROWS;
  static_assert(NT % BK == 0 && BM % ROWS == 0 && BN % ROWS == 0, "tile");
  const int kl = tid % BK, row = tid / BK;

  T ra[A_LOADS], rb[B_LOADS];
  auto load_global = [&](int64_t kt) {
    const int64_t k = kt + kl;
    bool ok_x = k < k_end, ok_g = ok_x;
    int64_t xo = 0, go_off = 0;
    if (ok_x) {
      const int64_t n = k / HW;
      const int64_t r = k - n * HW;
      const int64_t iy = r / p.W, ix = r - iy * p.W;
      const int64_t oy = iy * p.sh - p.ph + ky * p.dh, ox = ix * p.sw - p.pw + kx * p.dw;
      ok_g = oy >= 0 && oy < p.Ho && ox >= 0 && ox < p.Wo;
      xo = n * prm.x.sn + iy * prm.x.sh + ix * prm.x.sw + (g * Cig + n0) * prm.x.sc;
      go_off = n * prm.gout.sn + oy * prm.gout.sh + ox * prm.gout.sw + (g * Cog + m0) * prm.gout.sc;
    }
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
      const int m = row + i * ROWS;
      ra[i] = (ok_g && m0 + m < Cog) ? go[go_off + m * prm.gout.sc] : Cvt<T>::zero();
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
      const int n = row + i * ROWS;
      rb[i] = (ok_x && n0 + n < Cig) ? x[xo + n * prm.x.sc] : Cvt<T>::zero();
    }
  };
  auto store_smem = [&](int stage) {
    T* sA = smem + stage * Tr::kStageElems;
    T* sB = sA + BK * Tr::LDA;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) sA[kl * Tr::LDA + row + i * ROWS] = ra[i];
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) sB[kl * Tr::LDB + row + i * ROWS] = rb[i];
  };

  BlockMma<Tr> mma;
  mma.init();
  if (k_begin < k_end) {
    load_global(k_begin);
    store_smem(0);
    __syncthreads();
    int cur = 0;
    for (int64_t kt = k_begin; kt < k_end; kt += BK) {
      const bool more = kt + BK < k_end;
      if (more) load_global(kt + BK);
      const T* sA = smem + cur * Tr::kStageElems;
      mma.compute(sA, sA + BK * Tr::LDA);
      if (more) store_smem(cur ^ 1);
      __syncthreads();
      cur ^= 1;
    }
  }
  mma.store(sC);
  __syncthreads();

  // workspace [split][g][tap][ci][co], co fastest (coalesced over m)
  Acc* ws = static_cast<Acc*>(prm.workspace) +
            ((int64_t(blockIdx.y) * G + g) * taps + tap) * Cig * Cog;
  for (int idx = tid; idx < BM * BN; idx += NT) {
    const int ml = idx % BM, nl = idx / BM;
    const int64_t co = m0 + ml, ci = n0 + nl;
    if (co < Cog && ci < Cig) ws[ci * Cog + co] = sC[nl * Tr::LDC + ml];
  }
}

// gw[ci_all][co][ky][kx] = sum_s ws[s][g][tap][ci][co], s in order.
template <typename T, typename Acc>
__global__ void wgrad_reduce_kernel(const WgradParams prm) {
  const Problem& p = prm.p;
  const int64_t Cig = p.cin_g(), Cog = p.cout_g(), taps = p.kh * p.kw;
  const int64_t total = p.Cin * Cog * taps;
  const int64_t slice = p.groups * taps * Cig * Cog;
  const Acc* ws = static_cast<const Acc*>(prm.workspace);
  T* gw = static_cast<T*>(prm.gw);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tap = e % taps;
    const int64_t co = (e / taps) % Cog;
    const int64_t ci_all = e / (taps * Cog);
    const int64_t g = ci_all / Cig, ci = ci_all - g * Cig;
    const Acc* src = ws + ((g * taps + tap) * Cig + ci) * Cog + co;
    Acc s = Acc(0);
    for (int64_t k = 0; k < prm.splits; ++k) s += src[k * slice];
    gw[e] = Cvt<T>::from_acc(s);
  }
}

template <class Tr>
static cudaError_t run(const WgradParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t mt = (p.cout_g() + Tr::BM - 1) / Tr::BM, nt = (p.cin_g() + Tr::BN - 1) / Tr::BN;
  const int64_t gx = mt * nt * p.groups * p.kh * p.kw;
  if (gx > 0x7fffffffLL || prm.splits > 65535) return cudaErrorInvalidConfiguration;
  auto kern = wgrad_kernel<Tr>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Tr::kSmemBytes);
  if (e != cudaSuccess) return e;
  kern<<<dim3(unsigned(gx), unsigned(prm.splits)), Tr::kThreads, Tr::kSmemBytes, st>>>(prm);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const int64_t total = p.Cin * p.cout_g() * p.kh * p.kw;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, 65536);
  wgrad_reduce_kernel<typename Tr::T, typename Tr::Acc><<<unsigned(blocks), 256, 0, st>>>(prm);
  return cudaGetLastError();
}

template <typename T, bool TC, int BK> using WTraits = Traits<T, TC, 128, 64, BK>;
using WTraitsD = Traits<double, false, 64, 64, 16>;

int64_t wgrad_tile_k(DType dt, MathMode math) {
  return (dt == DType::kHalf || dt == DType::kBFloat16) ? 32 : 16;
}

int64_t wgrad_split_count(const Problem& p, DType dt, MathMode math, int num_sms) {
  const int bm = dt == DType::kDouble ? 64 : 128, bn = 64;
  const int64_t tiles = ((p.cout_g() + bm - 1) / bm) * ((p.cin_g() + bn - 1) / bn) * p.groups *
                        p.kh * p.kw;
  const int64_t bk = wgrad_tile_k(dt, math);
  const int64_t ktiles = (p.N * p.H * p.W + bk - 1) / bk;
  int64_t splits = (2 * int64_t(num_sms) + tiles - 1) / tiles;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, ktiles / 8));  // >= 8 k-tiles each
  // Accuracy: each accumulator sums at most ~2^20 products serially, so huge N*H*W
  // (>2^31 pixels) keeps fp32 rounding small; bounded by a 256 MiB workspace.
  const int64_t per_split_cap = (int64_t(1) << 20) / bk;
  splits = std::max<int64_t>(splits, (ktiles + per_split_cap - 1) / per_split_cap);
  const int64_t ws_per_split = p.groups * p.kh * p.kw * p.cin_g() * p.cout_g() *
                               (dt == DType::kDouble ? 8 : 4);
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, (int64_t(1) << 28) / ws_per_split));
  return std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
}

cudaError_t launch_wgrad(const WgradParams& prm, DType dt, MathMode math, cudaStream_t st) {
  switch (dt) {
    case DType::kHalf: return run<WTraits<__half, true, 32>>(prm, st);
    case DType::kBFloat16: return run<WTraits<__nv_bfloat16, true, 32>>(prm, st);
    case DType::kFloat:
      if (math == MathMode::kTF32) return run<WTraits<float, true, 16>>(prm, st);
      return run<WTraits<float, false, 16>>(prm, st);
    case DType::kDouble: return run<WTraitsD>(prm, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace convt2d
