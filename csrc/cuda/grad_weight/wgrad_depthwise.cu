// Depthwise grad_weight: one input channel per group (Cin == groups, m = Cout/groups outputs
// per input channel).
//   gw[co, ky, kx] = sum over (n, iy, ix) of x[n, co / m, iy, ix] * go[n, co, oy, ox],
//   oy = iy*sh - ph + ky*dh, ox = ix*sw - pw + kx*dw (in range)
// Cout*kh*kw weights, each a reduction over N*H*W pixels: the layer is bound by reading x and
// grad_output once. A block takes CB channels, up to kTK taps and one range of pixels (grid:
// channel blocks x tap chunks x pixel splits); its 256 threads are (channel lane, pixel lane)
// pairs, channel lanes fastest: CB = 32 (or 8 for fewer than 32 channels) where grad_output
// is channels-last, so a warp reads 32 consecutive channels of a pixel, and CB = 1 for NCHW,
// so a warp reads 32 consecutive pixels of a channel. Each thread reads its x value once per
// pixel and keeps its taps' sums in registers; the pixel lanes are added in a fixed order
// into an fp32 (fp64) workspace [splits][Cout*kh*kw], whose splits a second kernel adds in a
// fixed order into gw: deterministic. 32-bit pixel indices (the planner checks the sizes).
#include "cuda/common/kernels.h"
#include "cuda/common/dtype_switch.h"
#include "cuda/common/mma_core.cuh"

#include <algorithm>

namespace convt2d {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTK = 16;        // taps per block
constexpr int kMaxTaps = 1024;  // kh*kw (the tap offsets staged in shared memory)

template <typename T, int CB>
__global__ void __launch_bounds__(kThreads) wgrad_depthwise_kernel(const DirectGradParams prm) {
  using Acc = typename AccOf<T>::type;
  constexpr int PB = kThreads / CB;
  __shared__ int s_dy[kMaxTaps], s_dx[kMaxTaps];
  __shared__ Acc red[kTK][kThreads];
  const Problem& p = prm.p;
  const int kk = int(p.kh * p.kw), Cout = int(p.Cout), m = int(p.cout_g());
  const int H = int(p.H), W = int(p.W), Ho = int(p.Ho), Wo = int(p.Wo);
  const int sh = int(p.sh), sw = int(p.sw);
  for (int t = threadIdx.x; t < kk; t += kThreads) {
    s_dy[t] = int((t / p.kw) * p.dh - p.ph);
    s_dx[t] = int((t % p.kw) * p.dw - p.pw);
  }
  __syncthreads();
  const int tid = threadIdx.x, cl = tid % CB, pl = tid / CB;
  const int co = blockIdx.x * CB + cl;
  const bool co_ok = co < Cout;
  const T* __restrict__ x =
      static_cast<const T*>(prm.x.ptr) + (co_ok ? int64_t(co / m) * prm.x.sc : 0);
  const T* __restrict__ go = static_cast<const T*>(prm.gout.ptr) + (co_ok ? int64_t(co) * prm.gout.sc : 0);
  const int HW = H * W, P = int(p.N) * HW;
  const int pb = int(blockIdx.z * prm.pix_per_split);
  const int pe = int(std::min<int64_t>(P, pb + prm.pix_per_split));
  const int dn = PB / HW, diy = (PB % HW) / W, dix = PB % W;
  Acc* ws = static_cast<Acc*>(prm.workspace) + int64_t(blockIdx.z) * Cout * kk;
  {
    const int t0 = blockIdx.y * kTK;
    const int nt = min(kTK, kk - t0);
    int dy[kTK], dx[kTK];
    Acc acc[kTK];
#pragma unroll
    for (int t = 0; t < kTK; ++t) {
      dy[t] = t < nt ? s_dy[t0 + t] : 0;
      dx[t] = t < nt ? s_dx[t0 + t] : 0;
      acc[t] = Acc(0);
    }
    if (co_ok) {
      int q = pb + pl;
      int n = q / HW, iy = (q % HW) / W, ix = q % W;
      for (; q < pe; q += PB) {
        const Acc xv = Cvt<T>::to_acc(x[int64_t(n) * prm.x.sn + int64_t(iy) * prm.x.sh +
                                         int64_t(ix) * prm.x.sw]);
        const T* gn = go + int64_t(n) * prm.gout.sn;
        const int oy0 = iy * sh, ox0 = ix * sw;
#pragma unroll
        for (int t = 0; t < kTK; ++t) {
          const int oy = oy0 + dy[t], ox = ox0 + dx[t];
          if (t < nt && unsigned(oy) < unsigned(Ho) && unsigned(ox) < unsigned(Wo))
            acc[t] += xv * Cvt<T>::to_acc(gn[int64_t(oy) * prm.gout.sh + int64_t(ox) * prm.gout.sw]);
        }
        ix += dix;
        if (ix >= W) { ix -= W; ++iy; }
        iy += diy;
        if (iy >= H) { iy -= H; ++n; }
        n += dn;
      }
    }
#pragma unroll
    for (int t = 0; t < kTK; ++t) red[t][tid] = acc[t];
    __syncthreads();
    // (channel lane, tap) pairs: the pixel lanes in order.
    for (int i = tid; i < CB * nt; i += kThreads) {
      const int c = i % CB, t = i / CB;
      if (blockIdx.x * CB + c >= Cout) continue;
      Acc s = Acc(0);
      for (int l = 0; l < PB; ++l) s += red[t][l * CB + c];
      ws[int64_t(blockIdx.x * CB + c) * kk + t0 + t] = s;
    }
  }
}

// Channels per block: 32 (8 below 32 channels) where grad_output is channels-last, else 1.
int channel_block(const Problem& p, bool chan_last) {
  return !chan_last ? 1 : p.Cout >= 32 ? 32 : 8;
}

template <typename T>
cudaError_t run(const DirectGradParams& prm, bool chan_last, cudaStream_t st) {
  const Problem& p = prm.p;
  const int cb = channel_block(p, chan_last);
  const int64_t gx = (p.Cout + cb - 1) / cb, gy = (p.kh * p.kw + kTK - 1) / kTK;
  if (gx > 0x7fffffffLL || gy > 65535 || prm.splits > 65535)
    return cudaErrorInvalidConfiguration;
  const dim3 grid(unsigned(gx), unsigned(gy), unsigned(prm.splits));
  if (cb == 32) wgrad_depthwise_kernel<T, 32><<<grid, kThreads, 0, st>>>(prm);
  else if (cb == 8) wgrad_depthwise_kernel<T, 8><<<grid, kThreads, 0, st>>>(prm);
  else wgrad_depthwise_kernel<T, 1><<<grid, kThreads, 0, st>>>(prm);
  return cudaGetLastError();
}

}  // namespace

bool wgrad_depthwise_supported(const Problem& p) {
  const int64_t lim = int64_t(1) << 30;
  return p.cin_g() == 1 && p.kh * p.kw <= kMaxTaps && p.N * p.H * p.W > 0 &&
         p.N * p.H * p.W + kThreads < lim && p.Cout > 0 && p.Cout * p.kh * p.kw < lim &&
         p.H * p.sh + p.dh * p.kh < lim && p.W * p.sw + p.dw * p.kw < lim &&
         p.ph < lim && p.pw < lim;
}

DirectWgradPlan wgrad_depthwise_plan(const Problem& p, bool chan_last, DType dt, int num_sms) {
  const int64_t cb = channel_block(p, chan_last), pb = kThreads / cb;
  const int64_t cblocks = (p.Cout + cb - 1) / cb * ((p.kh * p.kw + kTK - 1) / kTK);
  const int64_t P = p.N * p.H * p.W;
  // About eight blocks per SM (the loads are latency-bound), each pixel lane summing at
  // least 8 pixels, the workspace within 256 MiB.
  int64_t splits = (8 * int64_t(num_sms) + cblocks - 1) / cblocks;
  splits = std::min<int64_t>(splits, std::max<int64_t>(1, P / (8 * pb)));
  const int64_t acc_bytes = dt == DType::kDouble ? 8 : 4;
  splits = std::min<int64_t>(
      splits, std::max<int64_t>(1, (int64_t(1) << 28) / (acc_bytes * p.Cout * p.kh * p.kw)));
  splits = std::max<int64_t>(1, std::min<int64_t>(splits, 65535));
  DirectWgradPlan plan;
  plan.pix_per_split = (P + splits - 1) / splits;
  plan.splits = (P + plan.pix_per_split - 1) / plan.pix_per_split;
  plan.ws_elems = plan.splits * p.Cout * p.kh * p.kw;
  return plan;
}

cudaError_t launch_wgrad_depthwise(const DirectGradParams& prm, bool chan_last, DType dt,
                                   cudaStream_t st) {
  const cudaError_t e = DTYPE_SWITCH(dt, T, [&] { return run<T>(prm, chan_last, st); });
  if (e != cudaSuccess) return e;
  return launch_wgrad_split_sum(prm.workspace, prm.gw, prm.splits,
                                prm.p.Cout * prm.p.kh * prm.p.kw, dt, st);
}

}  // namespace cuda
}  // namespace convt2d
