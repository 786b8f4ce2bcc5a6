// grad_weight of few channels per group, or few output channels: the weight's elements are
// few and the reduction over N*H*W pixels is long, so the pixels are split over many blocks.
//   gw[ci, co, ky, kx] = sum over (n, iy, ix) of
//       x[n, ci, iy, ix] * go[n, co, iy*sh - ph + ky*dh, ix*sw - pw + kx*dw]
// A block takes one group's weight elements m = (ci, co, tap) (up to 256 of them) and one
// range of pixels; its threads are (m, lane) pairs (lane fastest), each summing every lanes-th pixel
// of the range on CUDA cores; the lanes are added in a fixed order into an fp32 (fp64)
// workspace [splits][G * Cig*Cog*kh*kw], and a second kernel adds the splits in a fixed
// order into gw: deterministic. Any dtype and strides.
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) wgrad_direct_kernel(const DirectGradParams prm) {
  using Acc = typename AccOf<T>::type;
  __shared__ Acc red[kThreads];
  const Problem& p = prm.p;
  const int64_t cig = p.cin_g(), cog = p.cout_g(), kk = p.kh * p.kw;
  const int64_t M = cig * cog * kk;  // weight elements per group
  const int64_t mblocks = (M + kThreads - 1) / kThreads;
  const int64_t g = blockIdx.x / mblocks;
  const int64_t m0 = (blockIdx.x % mblocks) * kThreads;
  const int nm = int(std::min<int64_t>(M - m0, kThreads));
  const int lanes = kThreads / nm;
  // Lanes vary fastest: a warp's loads are `lanes` consecutive pixels of up to 32 / lanes
  // weight elements (coalesced along W in NCHW).
  const int t = threadIdx.x;
  const int ml = t / lanes, lane = t % lanes;
  Acc acc = Acc(0);
  if (ml < nm) {
    const int64_t m = m0 + ml;
    const int64_t ci = m / (cog * kk), rem = m % (cog * kk);
    const int64_t co = rem / kk, tap = rem % kk;
    const int64_t ky = tap / p.kw, kx = tap % p.kw;
    const T* __restrict__ x = static_cast<const T*>(prm.x.ptr) + (g * cig + ci) * prm.x.sc;
    const T* __restrict__ go =
        static_cast<const T*>(prm.gout.ptr) + (g * cog + co) * prm.gout.sc;
    const int64_t HW = p.H * p.W, P = p.N * HW;
    const int64_t pb = int64_t(blockIdx.y) * prm.pix_per_split;
    const int64_t pe = std::min<int64_t>(P, pb + prm.pix_per_split);
    // (n, iy, ix) of pixel pb + lane, then stepped by `lanes` pixels with carries.
    int64_t q = pb + lane;
    int64_t n = q / HW, iy = (q % HW) / p.W, ix = q % p.W;
    const int64_t dn = lanes / HW, diy = (lanes % HW) / p.W, dix = lanes % p.W;
    const int64_t oy0 = ky * p.dh - p.ph, ox0 = kx * p.dw - p.pw;
    for (; q < pe; q += lanes) {
      const int64_t oy = iy * p.sh + oy0, ox = ix * p.sw + ox0;
      if (oy >= 0 && oy < p.Ho && ox >= 0 && ox < p.Wo)
        acc += Cvt<T>::to_acc(x[n * prm.x.sn + iy * prm.x.sh + ix * prm.x.sw]) *
               Cvt<T>::to_acc(go[n * prm.gout.sn + oy * prm.gout.sh + ox * prm.gout.sw]);
      ix += dix;
      if (ix >= p.W) { ix -= p.W; ++iy; }
      iy += diy;
      if (iy >= p.H) { iy -= p.H; ++n; }
      n += dn;
    }
  }
  red[t] = acc;
  __syncthreads();
  if (t < nm) {
    Acc s = Acc(0);
    for (int l = 0; l < lanes; ++l) s += red[t * lanes + l];
    Acc* ws = static_cast<Acc*>(prm.workspace);
    ws[(int64_t(blockIdx.y) * p.groups + g) * M + m0 + t] = s;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) wgrad_split_sum_kernel(const void* wsv, void* gwv,
                                                                   int64_t splits,
                                                                   int64_t elems) {
  using Acc = typename AccOf<T>::type;
  const Acc* ws = static_cast<const Acc*>(wsv);
  T* gw = static_cast<T*>(gwv);
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < elems;
       e += int64_t(gridDim.x) * kThreads) {
    Acc s = Acc(0);
    for (int64_t k = 0; k < splits; ++k) s += ws[k * elems + e];
    gw[e] = Cvt<T>::from_acc(s);
  }
}

template <typename T>
cudaError_t split_sum(const void* ws, void* gw, int64_t splits, int64_t elems, cudaStream_t st) {
  const int64_t blocks = std::min<int64_t>((elems + kThreads - 1) / kThreads, 65535);
  if (blocks == 0) return cudaSuccess;
  wgrad_split_sum_kernel<T><<<unsigned(blocks), kThreads, 0, st>>>(ws, gw, splits, elems);
  return cudaGetLastError();
}

template <typename T>
cudaError_t run(const DirectGradParams& prm, cudaStream_t st) {
  const Problem& p = prm.p;
  const int64_t M = p.cin_g() * p.cout_g() * p.kh * p.kw;
  const int64_t mblocks = (M + kThreads - 1) / kThreads;
  const int64_t gx = p.groups * mblocks;
  if (gx > 0x7fffffffLL || prm.splits > 65535) return cudaErrorInvalidConfiguration;
  wgrad_direct_kernel<T><<<dim3(unsigned(gx), unsigned(prm.splits)), kThreads, 0, st>>>(prm);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return split_sum<T>(prm.workspace, prm.gw, prm.splits, p.groups * M, st);
}

}  // namespace

DirectWgradPlan wgrad_direct_plan(const Problem& p, DType dt, int num_sms) {
  const int64_t M = p.cin_g() * p.cout_g() * p.kh * p.kw;
  const int64_t mblocks = (M + kThreads - 1) / kThreads;
  const int64_t lanes = kThreads / std::min<int64_t>(M, kThreads);
  const int64_t P = p.N * p.H * p.W;
  const int64_t blocks = p.groups * mblocks;
  // About four blocks per SM in all, each lane summing at least 64 pixels and, unless the
  // 256 MiB workspace bound allows fewer splits, at most 2^16 (serial fp32 sums stay short).
  int64_t splits = (4 * int64_t(num_sms) + blocks - 1) / blocks;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, P / (64 * lanes)));
  splits = std::max<int64_t>(splits, (P + (lanes << 16) - 1) / (lanes << 16));
  const int64_t acc_bytes = dt == DType::kDouble ? 8 : 4;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, (int64_t(1) << 28) / (acc_bytes * p.groups * M)));
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
  DirectWgradPlan plan;
  plan.pix_per_split = (P + splits - 1) / splits;
  plan.splits = (P + plan.pix_per_split - 1) / plan.pix_per_split;
  plan.ws_elems = plan.splits * p.groups * M;
  return plan;
}

cudaError_t launch_wgrad_direct(const DirectGradParams& prm, DType dt, cudaStream_t st) {
  return DTYPE_SWITCH(dt, T, [&] { return run<T>(prm, st); });
}

cudaError_t launch_wgrad_split_sum(const void* ws, void* gw, int64_t splits, int64_t elems,
                                   DType dt, cudaStream_t st) {
  return DTYPE_SWITCH(dt, T, [&] { return split_sum<T>(ws, gw, splits, elems, st); });
}

}  // namespace cuda
}  // namespace convt2d
