// grad_input of few channels per group (depthwise, grouped): one thread per grad_input
// element, summing Cout/groups x taps products of grad_output with the weight on CUDA cores.
//   gi[n, ci, iy, ix] = sum over co in ci's group, (ky, kx) of
//       w[ci, co, ky, kx] * go[n, co, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw]
// The implicit GEMM's N is Cin/groups here: with a handful of channels per group its tiles
// are mostly padding, and the layer is bandwidth-bound (docs/design.md, "The planner").
// Any dtype and strides; threads walk grad_input in its memory order (coalesced stores).
#include "cuda/common/kernels.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

template <typename T, bool kChanLast>
__global__ void __launch_bounds__(256) dgrad_direct_kernel(const DirectGradParams prm) {
  using Acc = typename AccOf<T>::type;
  const Problem& p = prm.p;
  const int64_t cig = p.cin_g(), cog = p.cout_g(), kk = p.kh * p.kw;
  const int64_t total = p.N * p.Cin * p.H * p.W;
  const T* __restrict__ go = static_cast<const T*>(prm.gout.ptr);
  const T* __restrict__ w = static_cast<const T*>(prm.w);
  T* __restrict__ gi = static_cast<T*>(prm.gin.ptr);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    int64_t r = i, n, ci, iy, ix;
    if constexpr (kChanLast) {
      ci = r % p.Cin; r /= p.Cin;
      ix = r % p.W; r /= p.W;
      iy = r % p.H; n = r / p.H;
    } else {
      ix = r % p.W; r /= p.W;
      iy = r % p.H; r /= p.H;
      ci = r % p.Cin; n = r / p.Cin;
    }
    const int64_t co0 = (ci / cig) * cog;
    const T* wp = w + ci * cog * kk;
    const T* gp = go + n * prm.gout.sn + co0 * prm.gout.sc;
    Acc acc = Acc(0);
    for (int64_t ky = 0; ky < p.kh; ++ky) {
      const int64_t oy = iy * p.sh - p.ph + ky * p.dh;
      if (oy < 0 || oy >= p.Ho) continue;
      for (int64_t kx = 0; kx < p.kw; ++kx) {
        const int64_t ox = ix * p.sw - p.pw + kx * p.dw;
        if (ox < 0 || ox >= p.Wo) continue;
        const T* q = gp + oy * prm.gout.sh + ox * prm.gout.sw;
        const T* wq = wp + ky * p.kw + kx;
        for (int64_t co = 0; co < cog; ++co)
          acc += Cvt<T>::to_acc(q[co * prm.gout.sc]) * Cvt<T>::to_acc(wq[co * kk]);
      }
    }
    gi[n * prm.gin.sn + ci * prm.gin.sc + iy * prm.gin.sh + ix * prm.gin.sw] = Cvt<T>::from_acc(acc);
  }
}

template <typename T>
cudaError_t run(const DirectGradParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t total = p.N * p.Cin * p.H * p.W;
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + 255) / 256, int64_t(sm_count()) * 64);
  if (prm.gin.sc == 1 && p.Cin > 1)
    dgrad_direct_kernel<T, true><<<unsigned(blocks), 256, 0, st>>>(prm);
  else
    dgrad_direct_kernel<T, false><<<unsigned(blocks), 256, 0, st>>>(prm);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_dgrad_direct(const DirectGradParams& prm, DType dt, cudaStream_t st) {
  switch (dt) {
    case DType::kFloat: return run<float>(prm, st);
    case DType::kDouble: return run<double>(prm, st);
    case DType::kHalf: return run<__half>(prm, st);
    case DType::kBFloat16: return run<__nv_bfloat16>(prm, st);
  }
  return cudaErrorInvalidValue;
}

}  // namespace cuda
}  // namespace convt2d
